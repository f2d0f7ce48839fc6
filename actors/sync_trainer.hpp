#pragma once

// Training through the synchronous-replica runtime in one actor system:
// P PS shards, one chief, N workers each with its own device actor, and an
// evaluator. The seeds' SyncReplicasOptimizerV2 topology, in one process.

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/actors.hpp"
#include "actors/local_trainer.hpp"
#include "runtime/kfac/layer_collection.hpp"
#include "runtime/sync/placement.hpp"
#include "messages/push_parts.hpp"

namespace syncfac {

/// Where K-FAC's statistics and inverses are computed (optimizer kfac).
enum class cov_inv_strategy : uint8_t {
  /// The seeds' chief_worker: worker 0 (the chief worker) sends statistics
  /// of its own batch every step; inverses every invert_every steps on the
  /// chief's node. All workers compute gradients.
  chief_worker,
  /// The seeds' dedicated_workers: of N worker tasks the first ceil(0.6 N)
  /// compute gradients (the sync step waits for that many), the next ones
  /// compute statistics of their own batches, the last inverts.
  dedicated_workers,
  /// Beyond the seeds: every gradient worker sends (sub-sampled)
  /// statistics of its own batch, so the factors see the global batch.
  all_workers,
};

const char* to_string(cov_inv_strategy x) noexcept;
caf::expected<cov_inv_strategy> parse_cov_inv_strategy(const std::string& str);

/// K-FAC's topology in the sync runtime.
struct kfac_topology {
  cov_inv_strategy strategy = cov_inv_strategy::chief_worker;
  /// Covariance and inverse actors; layers are placed on them.
  int32_t covariance_actors = 1;
  int32_t inverse_actors = 1;
  kfac_placement placement = kfac_placement::round_robin;
};

/// Where and how often the chief checkpoints the run; a run with a
/// directory restores from its newest good checkpoint first.
struct checkpoint_options {
  /// Empty: no checkpoints.
  std::string directory;
  /// Global steps between checkpoints (0: only at the end).
  int64_t every = 0;
  /// Checkpoints kept (the newest ones).
  int32_t keep = 3;
};

struct sync_training_config {
  /// Model, optimizer (applied on the shards), devices, data and logging.
  local_training_config base;
  /// N: workers computing gradients.
  int32_t worker_replicas = 1;
  /// R: gradients averaged per update (N > R: backups; N < R: several
  /// batches per worker and update).
  int32_t replicas_to_aggregate = 1;
  /// P: PS shards.
  int32_t ps_tasks = 1;
  /// Initial tokens (-1: R).
  int64_t num_tokens = -1;
  placement_strategy placement = placement_strategy::round_robin;
  /// Decay of the variables' moving averages (0: none); when set, the
  /// evaluations use the averages.
  float moving_average_decay = 0;
  /// The variables that keep moving averages (TF's variables_to_average):
  /// names or layer prefixes ("fc4" for fc4/weights and fc4/bias); empty:
  /// every variable. The others evaluate with their current values.
  std::vector<std::string> variables_to_average;
  /// Optimizer kfac only.
  kfac_topology kfac;
  /// Device actors per worker (multi-tower): the worker's batch is split
  /// across them and their gradients and statistics averaged.
  int32_t num_towers = 1;
  /// In a cluster: worker actors each worker task hosts (the node plan's
  /// run_shape::workers_per_task); N = the cluster's worker tasks times
  /// this. In one process every role is in the process anyway.
  int32_t workers_per_task = 1;
  /// Longest wait for one global step.
  std::chrono::milliseconds step_timeout{120000};
  /// In a cluster: how long the chief lets a covariance or inverse actor
  /// leave its liveness probe unanswered before taking it for lost
  /// (chief_supervisor_config::probe_timeout; 0: no probe).
  std::chrono::milliseconds role_probe_timeout{0};
  checkpoint_options checkpoint;
  /// Pushes to shards in other processes go as parts of about this many
  /// bytes (0: whole); in one process they always go whole.
  int64_t push_part_bytes = default_push_part_bytes;
  /// Workers pull an embedding table whole every step instead of the rows
  /// their next batch looks up (worker_config::whole_pulls).
  bool whole_pulls = false;
  /// In one process: called with the run's chief once it exists (a stop
  /// signal watcher sends it (preempt_atom, why) to end the run after the
  /// global step in flight, checkpointed), and with an empty handle once
  /// the run is over and the chief gone. May be empty.
  std::function<void(const chief_actor&)> on_chief;

  caf::error validate() const;
};

/// Trains on `train` (sharded across the workers), evaluates on `test`.
caf::expected<training_summary>
train_sync(caf::actor_system& sys, const sync_training_config& cfg,
           std::shared_ptr<const dataset> train,
           std::shared_ptr<const dataset> test, std::ostream& log);

} // namespace syncfac
