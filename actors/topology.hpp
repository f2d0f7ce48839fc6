#pragma once

// What every role of a synchronous run is configured with, computed from
// the run's sync_training_config alone. The in-process trainer and the
// nodes of a distributed run both build their actors from these functions,
// so that every node of a cluster derives the same placement of variables
// and layers, the same task split and the same seeds without talking to
// the others first.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "actors/chief.hpp"
#include "actors/covariance.hpp"
#include "actors/device_actor.hpp"
#include "actors/inverse.hpp"
#include "actors/owned_actors.hpp"
#include "actors/ps_shard.hpp"
#include "actors/sync_trainer.hpp"
#include "actors/worker.hpp"
#include "runtime/model.hpp"

namespace syncfac {

bool uses_kfac(const sync_training_config& cfg);

/// Worker tasks by role under the K-FAC strategy.
struct task_plan {
  int32_t gradient_workers = 1;
  int32_t statistics_workers = 0;
  int32_t replicas_to_aggregate = 1;

  /// Tasks that run a worker actor (gradient workers, then statistics
  /// workers). With dedicated_workers, one more task inverts.
  int32_t worker_tasks() const {
    return gradient_workers + statistics_workers;
  }
};

/// The seeds' split for dedicated_workers (the first ceil(0.6 N) tasks
/// compute gradients, the next ones statistics, the last inverts); every
/// task computes gradients otherwise.
caf::expected<task_plan> plan_tasks(const sync_training_config& cfg);

/// Global steps of the run: --steps, or num_epochs passes over `examples`
/// at R batches per step.
int64_t total_steps(const sync_training_config& cfg, const task_plan& tasks,
                    int64_t examples);

/// The PS shards' configurations and which shard holds each variable.
struct shard_layout {
  std::vector<ps_shard_config> shards;
  std::map<std::string, int32_t> shard_of;
};

caf::expected<shard_layout> layout_shards(const sync_training_config& cfg,
                                          const model& init);

/// Which covariance and inverse actor keeps each K-FAC layer, and what the
/// workers that send statistics ask their devices for.
struct kfac_layout {
  std::vector<kfac_layer> layers;
  std::vector<int32_t> inverse_of;
  std::vector<int32_t> covariance_of;
  /// Layer name -> covariance actor (what a worker needs).
  std::map<std::string, int32_t> covariance_by_name;
  stats_request request;
  /// Stats updates that complete one step at a covariance actor.
  int32_t contributions_per_step = 1;
};

kfac_layout layout_kfac(const sync_training_config& cfg,
                        const layer_collection& collection,
                        const task_plan& tasks);

/// Inverse actor k; its layers go to `shards` (indices from `shards_of`).
inverse_config make_inverse_config(const sync_training_config& cfg,
                                   const kfac_layout& kfac,
                                   const shard_layout& layout, int32_t k,
                                   std::vector<ps_actor> shards,
                                   device_actor device);

/// A device actor of an inverse actor's own, owned by `top`: the run's
/// device with one compute thread, since the inverse kernels run on the
/// calling thread.
caf::expected<device_actor>
spawn_inverse_device(caf::actor_system& sys, const sync_training_config& cfg,
                     owned_actors& top);

/// Covariance actor c, handing factors to `inverses`.
covariance_config make_covariance_config(const sync_training_config& cfg,
                                         const kfac_layout& kfac, int32_t c,
                                         std::vector<inverse_actor> inverses);

/// The chief of a run of `steps` global steps starting at 0.
chief_config make_chief_config(const sync_training_config& cfg,
                               const task_plan& tasks, int64_t steps,
                               std::vector<ps_actor> shards);

/// Whether worker task `task` sends K-FAC statistics.
bool sends_statistics(const sync_training_config& cfg, const task_plan& tasks,
                      int32_t task);

/// Worker task `task` (gradients below tasks.gradient_workers, statistics
/// above). `covariance` may be empty when the task sends no statistics.
worker_config make_worker_config(const sync_training_config& cfg,
                                 const task_plan& tasks,
                                 const kfac_layout* kfac, int32_t task,
                                 std::shared_ptr<const dataset> data,
                                 device_actor device,
                                 std::vector<ps_actor> shards,
                                 chief_actor chief,
                                 std::vector<covariance_actor> covariance);

/// The device of tower `tower` of worker task `task`, when `sharing_tasks`
/// tasks share this process's threads: the threads split between all their
/// towers, and a sampled-Fisher seed distinct on every device of the run.
device_config worker_device_config(const sync_training_config& cfg,
                                   int32_t task, int32_t sharing_tasks,
                                   int32_t tower);

/// A worker task's device: one device actor, or with num_towers > 1 a
/// tower device over that many; every actor spawned is owned by `top`.
caf::expected<device_actor> spawn_worker_device(caf::actor_system& sys,
                                                const sync_training_config& cfg,
                                                int32_t task,
                                                int32_t sharing_tasks,
                                                owned_actors& top);

/// Longest wait for a role's counters at the end of a run: they only go
/// into the summary, and a role whose process went away (a lost worker)
/// must not hold the summary up for a whole request timeout.
inline std::chrono::milliseconds
counters_timeout(const sync_training_config& cfg) {
  return std::min(cfg.base.request_timeout, std::chrono::milliseconds{3000});
}

} // namespace syncfac
