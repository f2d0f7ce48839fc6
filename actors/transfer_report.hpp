#pragma once

// What the roles of a run sent, per global step and per worker step,
// against the minimum: one push and one pull of the parameters per worker
// step (docs/benchmarks-history.md, "Transfers per step"). Goes into the run's
// summary as "transfers".

#include <chrono>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "actors/role_totals.hpp"
#include "runtime/json.hpp"

namespace syncfac {

/// The figures the report is made of, each summed over a role's actors
/// (role_totals), and the size of the model's variables.
struct transfer_tally {
  /// Payload bytes of the model's variables (one pull of every shard).
  int64_t parameter_bytes = 0;
  int64_t global_steps = 0;
  int64_t worker_steps = 0;
  transfer_counts workers;
  transfer_counts shards;
  transfer_counts chief;
  /// Workers: payload bytes pushed, pulled and used, pulled and not used.
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t bytes_pulled_unused = 0;
  /// Shards: pulls that waited for their step, and those answered without
  /// values.
  int64_t pulls_waited = 0;
  int64_t pulls_without_values = 0;
  /// Workers: seconds from token request to grant, summed (the token's
  /// latency, which the step path waits for).
  double token_wait_s = 0;

  /// The workers' payload per worker step (pushes and every pull answer
  /// they received) over the minimum of twice the parameters; 0 before a
  /// step.
  double ratio_to_minimum() const;

  json_object to_json() const;
};

/// The tally of `roles` (every role's status at the end of the run) and
/// the shards' variables' sizes, asked for now (each bounded by
/// `timeout`; a shard that does not answer is left out).
transfer_tally tally_transfers(caf::scoped_actor& self,
                               const role_totals& roles,
                               const std::vector<ps_actor>& shards,
                               std::chrono::milliseconds timeout);

} // namespace syncfac
