#pragma once

// Evaluates the current variables on a held-out set: pulls them from every
// PS shard, loads them on its own device actor and runs the forward pass in
// slices. It only reads, so the sync loop never waits for it; requests are
// served one after another.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actors.hpp"
#include "runtime/data/dataset.hpp"

namespace syncfac {

/// Evaluates the PS shards' current variables on a held-out set.
using evaluator_actor = caf::typed_actor<
  // Evaluate the variables of `global_step` or a later one (the shards'
  // now): a request that waited behind another evaluation, or a round
  // applied meanwhile, finds them further on, and the result is labelled
  // with the step they are at, not the one asked for.
  caf::replies_to<eval_atom, int64_t>::with<eval_result>,
  // Pull from these shards from now on (a PS shard came back after a
  // loss); as many as before.
  caf::reacts_to<rewire_atom, std::vector<ps_actor>>>;

struct evaluator_config {
  model_spec model;
  std::shared_ptr<const dataset> data;
  device_actor device;
  std::vector<ps_actor> shards;
  /// Evaluate the variables' moving averages instead of their values.
  bool use_averages = false;
  /// Examples per device request (bounds activation memory).
  int64_t slice_size = 500;
  std::chrono::milliseconds request_timeout{60000};
  /// Called with every result and the global step of the variables it
  /// evaluated, in the evaluator's context (may be empty).
  std::function<void(int64_t, const eval_result&)> on_result;
  /// Called when a request has been answered, with a result or an error
  /// (may be empty): a sender that keeps one evaluation at a time.
  std::function<void()> on_answered;

  caf::error validate() const;
};

struct evaluator_state {
  static inline const char* name = "evaluator";

  evaluator_config cfg;
  parameter_set params;
  std::map<std::string, size_t> slot_of;
  bool loaded = false;
};

caf::expected<evaluator_actor> spawn_evaluator(caf::actor_system& sys,
                                               evaluator_config cfg);

} // namespace syncfac
