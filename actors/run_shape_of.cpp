#include "actors/run_shape_of.hpp"

namespace syncfac {

run_shape shape_of(const sync_training_config& cfg, const task_plan& tasks) {
  run_shape s;
  s.ps_tasks = cfg.ps_tasks;
  s.gradient_workers = tasks.gradient_workers;
  s.statistics_workers = tasks.statistics_workers;
  s.kfac = uses_kfac(cfg);
  s.dedicated_workers = cfg.kfac.strategy
                        == cov_inv_strategy::dedicated_workers;
  s.covariance_actors = cfg.kfac.covariance_actors;
  s.inverse_actors = cfg.kfac.inverse_actors;
  s.workers_per_task = cfg.workers_per_task;
  for (int32_t i = 0; i < tasks.worker_tasks(); ++i)
    s.sends_statistics.push_back(sends_statistics(cfg, tasks, i));
  return s;
}

node_wait_flags wait_flags_of(const sync_training_config& cfg,
                              std::chrono::milliseconds max_wait,
                              std::chrono::milliseconds request_timeout,
                              std::chrono::milliseconds connect_timeout) {
  node_wait_flags f;
  f.max_wait = max_wait;
  f.request_timeout = request_timeout;
  f.connect_timeout = connect_timeout;
  f.step_timeout = cfg.step_timeout;
  return f;
}

} // namespace syncfac
