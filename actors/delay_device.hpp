#pragma once

// The benchmark-only device (runtime/sync/compute_delay.hpp): it builds the
// model to learn its variables, then answers every gradient request with
// zero gradients (or, with :random, the same random ones each time) after a
// drawn delay, without computing anything. Not
// detached and never blocking: hundreds of them in one process cost no
// thread each, so a benchmark measures the chief's, the shards' and the
// workers' own cost (docs/benchmarks-history.md, "Hundreds of workers").

#include <cstdint>
#include <map>
#include <random>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/device_actor.hpp"
#include "runtime/sync/compute_delay.hpp"

namespace syncfac {

/// The device interface plus its own timer: answer request `id` now.
using delay_device_actor
  = device_actor::extend<caf::reacts_to<step_atom, uint64_t>>;

struct delay_device_state {
  static inline const char* name = "delay_device";

  compute_delay delay;
  std::mt19937_64 rng;
  /// What every answer carries, shaped like the model's variables: zeros,
  /// or values drawn once at load_model with :random (a draw per answer
  /// would cost the benchmark the compute it leaves out). Empty before
  /// load_model.
  parameter_set gradients;
  /// Gradient requests waiting for their delay, by id.
  std::map<uint64_t, std::pair<caf::typed_response_promise<step_result>,
                               step_result>>
    waiting;
  uint64_t next_id = 0;
};

/// Spawns the delay device of `cfg.backend` (a bench_delay value).
caf::expected<device_actor> spawn_delay_device(caf::actor_system& sys,
                                               const device_config& cfg);

} // namespace syncfac
