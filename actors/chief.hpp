#pragma once

// The chief: owns global_step and the token queue and runs the sync loop of
// TF's SyncReplicasOptimizerV2. Each round it asks every PS shard to apply
// the average of R gradients, then increments global_step and puts
// max(N, R) tokens carrying it into the queue. Workers take one token per
// step; a token request waits until one is there.
//
// A worker whose process or node goes away (its link breaks) is lost, not
// fatal: the run goes on with the others (with backups the steps complete
// without it; without, the step waits, bounded by step_timeout, for it to
// come back). A token it was granted for the current step goes back into
// the queue, and its waiting requests are dropped. A restarted worker asks
// where to resume (rejoin_atom, index) and continues from the current step
// and its last reported data position; while the steps cannot go on (a
// lost role is being brought back) the request is held and answered where
// they go on from, or failed naming the worker when the run ends first. A
// worker that fails with an error of its own (bad data, divergence) still
// ends the run with that error.
//
// A PS shard or K-FAC role the chief does not watch: its supervisor
// (actors/chief_supervisor.hpp) decides that one is lost and tells the
// chief (lost_atom), which pauses the steps and fails its run request with
// ec::peer_lost; the supervisor brings the role back and the chief goes on
// from the step it names (rollback_atom: a rollback after a shard's loss).
//
// Its states are behaviours (actors/chief.cpp): ready -> running -> paused
// -> (ready, after a rollback) ... -> finishing -> done. The files:
//
//   actors/chief.cpp              the states and what each does with a
//                                 message; the configuration's checks
//   actors/chief_steps.cpp        tokens, workers, rounds, the run's end
//   actors/chief_faults.cpp       a lost role's pause, the rollback, a
//                                 preemption
//   actors/chief_rejoins.cpp      where a worker rejoins; rejoins held
//                                 while the steps cannot go on
//   actors/chief_checkpoints.*    the checkpoints' snapshots and writes,
//                                 the workers' data positions
//   actors/chief_round.hpp        the steps and rounds as lifetimes, held
//                                 weakly by their requests' continuations
//   actors/chief_parts.hpp        the chief's state, for those files only

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/actors.hpp"

namespace syncfac {

/// What the chief tells its observer after each round.
struct round_report {
  int64_t global_step = 0;
  /// Worker reports that arrived since the previous round; without any,
  /// mean_loss and accuracy are the last ones reported.
  int64_t reports = 0;
  double mean_loss = 0;
  double accuracy = 0;
  /// Pushes dropped as stale so far, as the workers reported them.
  int64_t stale_pushes = 0;
  /// Time the round waited for the shards to aggregate and apply.
  double round_s = 0;
  /// The global norm of the round's averaged gradients, before clipping
  /// (--clip_norm; NaN without it, the shards computing none).
  double gradient_norm = std::numeric_limits<double>::quiet_NaN();
  /// Examples the workers have reported so far.
  int64_t examples = 0;
  /// So far, over the shards: pushes refused; steps in which a shard
  /// preconditioned (the most of any shard); inverse sets installed.
  int64_t refused_pushes = 0;
  int64_t preconditioned_steps = 0;
  int64_t inverse_sets = 0;
  /// Seconds token requests waited for their grant so far, summed over
  /// the workers.
  double token_wait_s = 0;
};

struct chief_config {
  /// N: workers computing gradients (total_num_replicas).
  int32_t worker_replicas = 1;
  /// R: gradients averaged per update (replicas_to_aggregate).
  int32_t replicas_to_aggregate = 1;
  /// Tokens put in the queue at start; -1 means R. Fewer than R - N cannot
  /// finish the first step.
  int64_t num_tokens = -1;
  /// global_step at start (0, or a restored step).
  int64_t start_step = 0;
  /// Training ends when global_step reaches this.
  int64_t steps = 1;
  std::vector<ps_actor> shards;
  /// Longest wait for one round (all shards aggregated and applied).
  std::chrono::milliseconds step_timeout{120000};
  /// Longest wait for a set_step or status answer.
  std::chrono::milliseconds request_timeout{10000};
  /// Clipping by the global norm of each round's averaged gradients (0:
  /// off): the shards send their sums of squares first (norm_atom), then
  /// apply with the one factor.
  float clip_norm = 0;
  /// Called in the chief's context after every round (may be empty).
  std::function<void(const round_report&)> on_round;
  /// Checkpoints (none without a writer): every `checkpoint_every` global
  /// steps (0: only at the end) and when training ends. The snapshots are
  /// taken between a step's apply and its tokens, so they are consistent;
  /// the file is written with the workers' data positions once every
  /// gradient worker reported the step's, or after `checkpoint_grace`.
  checkpointer_actor checkpointer;
  int64_t checkpoint_every = 0;
  std::chrono::milliseconds checkpoint_grace{2000};
  /// K-FAC: their factors go into the checkpoints too.
  std::vector<covariance_actor> covariance;
  /// Called in the chief's context after each checkpoint: the file
  /// written, or why none was (the run goes on either way).
  std::function<void(const caf::expected<checkpoint_written>&)> on_checkpoint;
  /// After a preemption: longest wait for the global step in flight;
  /// then the run ends at the last applied step (a worker that was
  /// preempted too, or is dead, never sends its gradient).
  std::chrono::milliseconds preempt_wait{20000};
  /// Called in the chief's context with a line worth logging (a worker
  /// lost or rejoining).
  std::function<void(const std::string&)> on_event;

  caf::error validate() const;

  int64_t initial_tokens() const {
    return num_tokens < 0 ? replicas_to_aggregate : num_tokens;
  }

  int64_t tokens_per_step() const {
    return std::max<int64_t>(worker_replicas, replicas_to_aggregate);
  }
};

/// Validates `cfg` and spawns the chief.
caf::expected<chief_actor> spawn_chief(caf::actor_system& sys,
                                       chief_config cfg);

} // namespace syncfac
