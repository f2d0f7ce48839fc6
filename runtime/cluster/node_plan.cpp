#include "runtime/cluster/node_plan.hpp"

#include <algorithm>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

caf::error bad(const std::string& what) {
  return make_error(ec::invalid_config, what);
}

std::string count_of(int32_t n, const std::string& what) {
  return std::to_string(n) + " " + what;
}

/// The last worker task of a dedicated_workers run without an "inverse"
/// job: it hosts the inverse actors instead of a worker (the seeds' "the
/// last inverts").
bool dedicated_inverter(const run_shape& shape, const cluster_spec& cluster,
                        const task_id& t) {
  return shape.kfac && shape.dedicated_workers
         && cluster.count("inverse") == 0 && t.job == "worker"
         && t.index == cluster.count("worker") - 1;
}

/// --workers_per_task against the run's workers and optimizer.
caf::error check_workers_per_task(const run_shape& shape) {
  auto k = shape.workers_per_task;
  auto flag = "--workers_per_task " + std::to_string(k);
  if (k < 1)
    return bad(flag + " must be at least 1");
  if (k == 1)
    return caf::none;
  if (shape.kfac)
    return bad(flag + ": several workers per task are for first-order runs "
               "(K-FAC's statistics workers and inverters are one per task)");
  if (shape.workers() % k != 0)
    return bad(flag + " does not divide the run's "
               + count_of(shape.workers(), "worker(s)"));
  return caf::none;
}

/// " (N workers, --workers_per_task K)" where K > 1: what a count of worker
/// tasks came from.
std::string per_task_note(const run_shape& shape) {
  if (shape.workers_per_task == 1)
    return "";
  return " (" + count_of(shape.workers(), "workers") + ", --workers_per_task "
         + std::to_string(shape.workers_per_task) + ")";
}

/// The run's numbers against themselves and against the cluster's jobs.
caf::error check_shape(const run_shape& shape, const cluster_spec& cluster) {
  if (shape.ps_tasks < 1)
    return bad("the run needs at least one PS shard, got "
               + std::to_string(shape.ps_tasks));
  if (shape.gradient_workers < 1 || shape.statistics_workers < 0)
    return bad("the run needs at least one gradient worker, got "
               + std::to_string(shape.gradient_workers));
  if (auto err = check_workers_per_task(shape))
    return err;
  if (shape.sends_statistics.size() != static_cast<size_t>(shape.workers()))
    return bad("the run's statistics senders name "
               + count_of(static_cast<int32_t>(shape.sends_statistics.size()),
                          "worker(s)")
               + ", but it has " + count_of(shape.workers(), "worker(s)"));
  if (cluster.count("ps") != shape.ps_tasks)
    return bad("the run has " + count_of(shape.ps_tasks, "PS shard(s)")
               + ", but the cluster has "
               + count_of(cluster.count("ps"), "'ps' task(s)"));
  if (cluster.count("worker") < shape.worker_tasks())
    return bad("the run has " + count_of(shape.worker_tasks(),
                                         "worker task(s)")
               + per_task_note(shape) + ", but the cluster has "
               + count_of(cluster.count("worker"), "'worker' task(s)"));
  if (!shape.kfac) {
    if (cluster.count("covariance") > 0 || cluster.count("inverse") > 0)
      return bad("the cluster has covariance or inverse tasks, but the "
                 "optimizer is not kfac");
    return caf::none;
  }
  if (shape.covariance_actors < 1 || shape.inverse_actors < 1)
    return bad("K-FAC needs at least one covariance and one inverse actor, "
               "got " + std::to_string(shape.covariance_actors) + " and "
               + std::to_string(shape.inverse_actors));
  auto same = [&](const char* job, int32_t actors) -> caf::error {
    auto tasks = cluster.count(job);
    if (tasks == 0 || tasks == actors)
      return caf::none;
    return bad("the run has " + count_of(actors, std::string{job}
                                                   + " actor(s)")
               + ", but the cluster has "
               + count_of(tasks, "'" + std::string{job} + "' task(s)"));
  };
  if (auto err = same("covariance", shape.covariance_actors))
    return err;
  return same("inverse", shape.inverse_actors);
}

/// Every role of the run with its host; `host_all` (one process): every
/// role on that task.
void place_roles(node_plan& plan, const run_shape& shape,
                 const cluster_spec& cluster, const task_id* host_all) {
  auto at = [&](task_id t) { return host_all ? *host_all : std::move(t); };
  for (int32_t s = 0; s < shape.ps_tasks; ++s)
    plan.shards.push_back({role_type::shard, s, at({"ps", s})});
  for (int32_t i = 0; i < shape.workers(); ++i)
    (i < shape.gradient_workers ? plan.workers : plan.stats_workers)
      .push_back({role_type::worker, i,
                  at({"worker", i / shape.workers_per_task})});
  if (!shape.kfac)
    return;
  for (int32_t k = 0; k < shape.inverse_actors; ++k)
    plan.inverses.push_back(
      {role_type::inverse, k, at(inverse_host(shape, cluster, k))});
  for (int32_t c = 0; c < shape.covariance_actors; ++c)
    plan.covariance.push_back(
      {role_type::covariance, c, at(covariance_host(cluster, c))});
}

/// The roles on `plan.task`, in spawn order (node_plan::hosted).
void pick_hosted(node_plan& plan, bool with_metrics) {
  auto here = [&](const std::vector<planned_role>& roles) {
    for (const auto& r : roles)
      if (r.host == plan.task)
        plan.hosted.push_back(r);
  };
  here(plan.shards);
  here(plan.inverses);
  here(plan.covariance);
  if (plan.is_chief()) {
    if (with_metrics)
      plan.hosted.push_back({role_type::metrics, 0, plan.task});
    plan.hosted.push_back({role_type::chief, 0, plan.task});
  }
  here(plan.workers);
  here(plan.stats_workers);
}

/// This node's workers, if any: which ones and what they do (the first
/// one's: with several per task they are all gradient workers that send
/// no statistics, check_workers_per_task).
void pick_worker(node_plan& plan, const run_shape& shape) {
  for (const auto& r : plan.hosted)
    if (r.kind == role_type::worker) {
      if (plan.hosted_workers++ > 0)
        continue;
      plan.worker = r.index;
      plan.gradient_worker = r.index < shape.gradient_workers;
      plan.sends_statistics
        = shape.sends_statistics[static_cast<size_t>(r.index)];
    }
}

} // namespace

std::chrono::milliseconds node_waits::await_wait(bool restarted) const {
  if (restarted)
    return std::min<std::chrono::milliseconds>(connect_timeout,
                                               std::chrono::seconds{10});
  return connect_timeout;
}

std::chrono::milliseconds node_waits::end_wait(int64_t steps) const {
  if (steps <= 0)
    return std::chrono::hours{24 * 365};
  return max_wait * 2 + step_timeout * (steps + 1);
}

node_waits make_node_waits(const node_wait_flags& flags) {
  node_waits w;
  w.max_wait = flags.max_wait;
  w.request_timeout = flags.request_timeout;
  w.connect_timeout = flags.connect_timeout;
  w.step_timeout = flags.step_timeout;
  using std::chrono::milliseconds;
  w.connect_attempt = milliseconds{1000}
                      + 2 * std::min(flags.request_timeout,
                                     milliseconds{2000})
                      + milliseconds{1000};
  w.preempt_wait = std::min(flags.step_timeout, milliseconds{20000})
                   + 2 * flags.request_timeout + milliseconds{10000};
  return w;
}

const char* job_of(role_type kind) noexcept {
  switch (kind) {
    case role_type::shard: return "ps";
    case role_type::inverse: return "inverse";
    case role_type::covariance: return "covariance";
    case role_type::metrics: return "metrics";
    case role_type::chief: return "chief";
    case role_type::worker: return "worker";
  }
  return "?";
}

std::string planned_role::name() const {
  if (kind == role_type::chief || kind == role_type::metrics)
    return job_of(kind);
  return task_id{job_of(kind), index}.str();
}

bool operator==(const planned_role& x, const planned_role& y) {
  return x.kind == y.kind && x.index == y.index && x.host == y.host;
}

std::vector<planned_role> node_plan::hosted_of(role_type kind) const {
  std::vector<planned_role> out;
  for (const auto& r : hosted)
    if (r.kind == kind)
      out.push_back(r);
  return out;
}

std::vector<task_id>
node_plan::hosts_of(const std::vector<planned_role>& roles) {
  std::vector<task_id> out;
  for (const auto& r : roles)
    out.push_back(r.host);
  return out;
}

task_id covariance_host(const cluster_spec& cluster, int32_t c) {
  if (cluster.count("covariance") > 0)
    return {"covariance", c};
  return cluster.chief_task();
}

task_id inverse_host(const run_shape& shape, const cluster_spec& cluster,
                     int32_t k) {
  if (cluster.count("inverse") > 0)
    return {"inverse", k};
  if (shape.dedicated_workers)
    return {"worker", cluster.count("worker") - 1};
  return cluster.chief_task();
}

bool connects_to_chief(const run_shape& shape, const cluster_spec& cluster,
                       const task_id& t) {
  if (t.job == "worker")
    return !dedicated_inverter(shape, cluster, t);
  if (t.job == "covariance" && shape.kfac)
    for (int32_t k = 0; k < shape.inverse_actors; ++k)
      if (inverse_host(shape, cluster, k) == cluster.chief_task())
        return true;
  return false;
}

caf::expected<node_plan> make_node_plan(const cluster_spec& cluster,
                                        const task_id& task,
                                        const run_shape& shape,
                                        const node_wait_flags& flags,
                                        int32_t metrics_port_base) {
  if (!cluster.contains(task))
    return bad("task " + task.str() + " is not in the cluster");
  if (flags.max_wait.count() <= 0 || flags.request_timeout.count() <= 0
      || flags.connect_timeout.count() <= 0 || flags.step_timeout.count() <= 0)
    return bad("task " + task.str() + ": max_wait, the request, connect and "
               "step timeouts must be positive");
  if (auto err = check_shape(shape, cluster))
    return err;
  node_plan plan;
  plan.task = task;
  plan.chief = cluster.chief_task();
  static const std::vector<std::string> jobs{"ps", "worker", "covariance",
                                             "inverse"};
  if (!plan.is_chief()
      && std::find(jobs.begin(), jobs.end(), task.job) == jobs.end())
    return bad("task " + task.str() + ": this program has no role for job '"
               + task.job + "'");
  if (task.job == "worker" && task.index >= shape.worker_tasks()
      && !dedicated_inverter(shape, cluster, task))
    return bad("task " + task.str() + ": no worker role for it ("
               + count_of(shape.worker_tasks(), "worker tasks")
               + per_task_note(shape) + ")");
  place_roles(plan, shape, cluster, nullptr);
  pick_hosted(plan, true);
  pick_worker(plan, shape);
  plan.connects_to_chief = connects_to_chief(shape, cluster, task);
  plan.loads_data = plan.is_chief() || plan.worker >= 0;
  if (plan.is_chief()) {
    for (const auto& t : cluster.tasks())
      if (t != task && t.job != "evaluator")
        (connects_to_chief(shape, cluster, t) ? plan.passive : plan.active)
          .push_back(t);
  } else {
    // The hosts of the roles this node's roles talk to, once each, in
    // task order (the supervisor's peers).
    std::vector<task_id> peers;
    auto watch = [&](const std::vector<planned_role>& roles) {
      for (const auto& r : roles)
        if (r.host != task && r.host != plan.chief)
          peers.push_back(r.host);
    };
    watch(plan.shards);
    watch(plan.covariance);
    watch(plan.inverses);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    plan.watched = std::move(peers);
  }
  if (metrics_port_base > 0) {
    auto all = cluster.tasks();
    auto pos = std::find(all.begin(), all.end(), task) - all.begin();
    auto port = static_cast<int64_t>(metrics_port_base) + pos;
    if (port > 65535)
      return bad("--metrics_port " + std::to_string(metrics_port_base)
                 + ": task " + task.str() + " would listen on "
                 + std::to_string(port) + ", above 65535");
    plan.metrics_port = static_cast<int32_t>(port);
  }
  plan.waits = make_node_waits(flags);
  return plan;
}

caf::expected<node_plan> single_process_plan(const run_shape& shape) {
  // The cluster such a process would have: one task per role, so that
  // check_shape holds it to the same rules.
  cluster_spec cluster;
  cluster.jobs["chief"].resize(1);
  cluster.jobs["ps"].resize(static_cast<size_t>(shape.ps_tasks));
  cluster.jobs["worker"].resize(static_cast<size_t>(shape.worker_tasks()));
  if (auto err = check_shape(shape, cluster))
    return err;
  node_plan plan;
  plan.task = {"chief", 0};
  plan.chief = plan.task;
  place_roles(plan, shape, cluster, &plan.task);
  pick_hosted(plan, false);
  plan.loads_data = true;
  return plan;
}

} // namespace syncfac
