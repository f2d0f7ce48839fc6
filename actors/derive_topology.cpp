#include "actors/cluster_node.hpp"

#include "actors/topology.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

caf::error derive_topology(sync_training_config& sync,
                           const cluster_spec& cluster, bool explicit_workers,
                           bool explicit_ps) {
  auto check = [](const char* flag, int32_t given, const char* job,
                  int32_t tasks) -> caf::error {
    if (given == tasks)
      return caf::none;
    return make_error(ec::invalid_config,
                      std::string{"--"} + flag + " " + std::to_string(given)
                        + " contradicts the cluster file's "
                        + std::to_string(tasks) + " '" + job + "' task(s)");
  };
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
                         workers))
      return err;
  if (explicit_ps)
    if (auto err = check("ps_tasks", sync.ps_tasks, "ps", ps))
      return err;
  sync.worker_replicas = workers;
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
