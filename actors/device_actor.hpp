#pragma once

// The device actor: one compute backend and the model replica on it.
// Spawned detached, because kernels block for milliseconds and must not
// stall the scheduler's threads that carry everyone else's messages.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actors.hpp"
#include "kernels/backend.hpp"
#include "kernels/kfac_inverter.hpp"
#include "runtime/kfac/kfac_preconditioner.hpp"
#include "runtime/model.hpp"
#include "runtime/optimizer.hpp"

namespace syncfac {

struct device_config {
  /// "cpu" or, in builds with CUDA, "cuda".
  std::string backend = "cpu";
  /// CPU threads the backend's kernels use.
  int threads = 1;
  /// Seeds the sampled Fisher's targets; devices of one run need distinct
  /// seeds, or their k-th examples draw the same targets.
  uint64_t seed = 0x5eed;

  caf::error validate() const;
};

struct device_state {
  static inline const char* name = "device";

  std::shared_ptr<backend> dev;
  /// The K-FAC kernels on dev's device (cuBLAS and cuSOLVER on a GPU,
  /// Eigen on the CPU): the factor statistics (stats requests, the local
  /// K-FAC step), the inversions (invert_atom, the local step's inverses)
  /// and the local step's preconditioning.
  std::shared_ptr<kfac_inverter> inverter;
  std::unique_ptr<model> replica;
  /// The K-FAC statistics pass runs here (at the replica's parameters);
  /// one of few examples on stats_dev: for a CPU device one thread of its
  /// own, otherwise dev itself.
  std::unique_ptr<model> stats_replica;
  std::shared_ptr<backend> stats_dev;
  std::optional<optimizer> local_optimizer;
  /// K-FAC's factors and inverses for train_atom with optimizer kfac.
  std::optional<kfac_preconditioner> kfac;
  int64_t kfac_steps = 0;
  /// Statistics requests so far (advances the location sampling seed).
  uint64_t stats_requests = 0;
  /// Draws the sampled Fisher's targets.
  std::mt19937_64 rng{0x5eed};
  /// Requests refused with an error, for status reports.
  int64_t refused = 0;
};

/// `inverter` (not null) runs on dev's device: make_kfac_inverter(dev).
device_actor::behavior_type
device(device_actor::stateful_pointer<device_state> self,
       std::shared_ptr<backend> dev, std::shared_ptr<kfac_inverter> inverter,
       uint64_t seed);

/// Validates `cfg`, creates its backend and the K-FAC kernels on it, and
/// spawns the actor. A GPU backend without GPU K-FAC kernels is
/// ec::unavailable naming the device, not a device running K-FAC on the
/// CPU.
caf::expected<device_actor> spawn_device(caf::actor_system& sys,
                                         const device_config& cfg);

} // namespace syncfac
