#include "actors/cluster_node.hpp"

#include "actors/topology.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

caf::error derive_topology(sync_training_config& sync,
                           const cluster_spec& cluster, bool explicit_workers,
                           bool explicit_ps) {
  auto check = [](const char* flag, int32_t given, const char* job,
                  int32_t tasks, int32_t per_task) -> caf::error {
    if (given == tasks * per_task)
      return caf::none;
    return make_error(ec::invalid_config,
                      std::string{"--"} + flag + " " + std::to_string(given)
                        + " contradicts the cluster file's "
                        + std::to_string(tasks) + " '" + job + "' task(s)"
                        + (per_task == 1
                             ? std::string{}
                             : " times --workers_per_task "
                                 + std::to_string(per_task) + " ("
                                 + std::to_string(tasks * per_task)
                                 + " workers)"));
  };
  // Several workers per task: the plan checks the rest
  // (runtime/cluster/node_plan.cpp); the product below needs K in range.
  auto k = sync.workers_per_task;
  if (k < 1 || k > 4096)
    return make_error(ec::invalid_config,
                      "--workers_per_task " + std::to_string(k)
                        + " must be between 1 and 4096");
  auto workers = cluster.count("worker");
  auto ps = cluster.count("ps");
  if (workers < 1)
    return make_error(ec::invalid_config,
                      "the cluster has no 'worker' task: training needs at "
                      "least one");
  if (ps < 1)
    return make_error(ec::invalid_config,
                      "the cluster has no 'ps' task: training needs at "
                      "least one parameter-server shard");
  if (explicit_workers)
    if (auto err = check("worker_replicas", sync.worker_replicas, "worker",
                         workers, k))
      return err;
  if (explicit_ps)
    if (auto err = check("ps_tasks", sync.ps_tasks, "ps", ps, 1))
      return err;
  sync.worker_replicas = workers * k;
  sync.ps_tasks = ps;
  if (cluster.count("covariance") > 0)
    sync.kfac.covariance_actors = cluster.count("covariance");
  if (cluster.count("inverse") > 0)
    sync.kfac.inverse_actors = cluster.count("inverse");
  bool kfac = uses_kfac(sync);
  if (!kfac && (cluster.count("covariance") > 0
                || cluster.count("inverse") > 0))
    return make_error(ec::invalid_config,
                      "the cluster has covariance or inverse tasks, but the "
                      "optimizer is not kfac");
  return caf::none;
}

} // namespace syncfac
