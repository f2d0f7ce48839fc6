#include "actors/sync_trainer.hpp"

#include <cmath>
#include <map>
#include <optional>

#include <caf/scoped_actor.hpp>

#include "actors/chief.hpp"
#include "actors/chief_driver.hpp"
#include "actors/covariance.hpp"
#include "actors/evaluator.hpp"
#include "actors/inverse.hpp"
#include "actors/owned_actors.hpp"
#include "actors/ps_shard.hpp"
#include "actors/role_metrics.hpp"
#include "actors/run_shape_of.hpp"
#include "actors/topology.hpp"
#include "actors/tower_device.hpp"
#include "actors/worker.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/least_counts.hpp"
#include "runtime/base/parse_enum.hpp"
#include "runtime/model.hpp"
#include "runtime/model_footprint.hpp"
#include "runtime/observe/metrics_endpoint.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// The PS shards, spawned, and which shard holds each variable.
struct shard_plan {
  std::vector<ps_actor> shards;
  std::map<std::string, int32_t> shard_of;
  shard_layout layout;
};

caf::expected<shard_plan> spawn_shards(caf::actor_system& sys,
                                       const sync_training_config& cfg,
                                       const model& init, owned_actors& top) {
  auto layout = layout_shards(cfg, init);
  if (!layout)
    return layout.error();
  shard_plan result;
  for (const auto& sc : layout->shards) {
    auto shard = spawn_ps_shard(sys, sc);
    if (!shard)
      return shard.error();
    top.own(*shard);
    result.shards.push_back(*shard);
  }
  result.shard_of = layout->shard_of;
  result.layout = std::move(*layout);
  return result;
}

/// K-FAC's covariance and inverse actors and what workers need of them.
struct kfac_plan {
  kfac_layout layout;
  std::vector<covariance_actor> covariance;
  std::vector<inverse_actor> inverses;
};

caf::expected<kfac_plan>
spawn_kfac(caf::actor_system& sys, const sync_training_config& cfg,
           const layer_collection& collection, const shard_plan& shards,
           const task_plan& tasks, device_actor inverse_device,
           owned_actors& top) {
  const auto& topo = cfg.kfac;
  kfac_plan result;
  result.layout = layout_kfac(cfg, collection, tasks);
  // Inverse actors first: the covariance actors hand factors to them.
  for (int32_t k = 0; k < topo.inverse_actors; ++k) {
    auto device = inverse_device;
    if (!device) {
      auto dev = spawn_inverse_device(sys, cfg, top);
      if (!dev)
        return dev.error();
      device = *dev;
    }
    auto inv = spawn_inverse(sys, make_inverse_config(cfg, result.layout,
                                                      shards.layout, k,
                                                      shards.shards, device));
    if (!inv)
      return inv.error();
    top.own(*inv);
    result.inverses.push_back(*inv);
  }
  for (int32_t c = 0; c < topo.covariance_actors; ++c) {
    auto cov = spawn_covariance(sys,
                                make_covariance_config(cfg, result.layout, c,
                                                       result.inverses));
    if (!cov)
      return cov.error();
    top.own(*cov);
    result.covariance.push_back(*cov);
  }
  return result;
}

} // namespace

const char* to_string(cov_inv_strategy x) noexcept {
  switch (x) {
    case cov_inv_strategy::chief_worker: return "chief_worker";
    case cov_inv_strategy::dedicated_workers: return "dedicated_workers";
    case cov_inv_strategy::all_workers: return "all_workers";
  }
  return "?";
}

caf::expected<cov_inv_strategy>
parse_cov_inv_strategy(const std::string& str) {
  return parse_enum(str,
                    {cov_inv_strategy::chief_worker,
                     cov_inv_strategy::dedicated_workers,
                     cov_inv_strategy::all_workers},
                    "cov_inv_op_strategy");
}

caf::error sync_training_config::validate() const {
  if (auto err = base.validate())
    return err;
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, what);
  };
  if (auto why = first_below_least(
        {{"worker_replicas", worker_replicas, 1},
         {"replicas_to_aggregate", replicas_to_aggregate, 1},
         {"ps_tasks", ps_tasks, 1},
         {"num_towers", num_towers, 1},
         {"checkpoint_every", checkpoint.every, 0},
         {"keep_checkpoints", checkpoint.keep, 1}});
      !why.empty())
    return bad(why);
  if (kfac.covariance_actors < 1 || kfac.inverse_actors < 1)
    return bad("K-FAC needs at least one covariance and one inverse actor, "
               "got " + std::to_string(kfac.covariance_actors) + " and "
               + std::to_string(kfac.inverse_actors));
  // Workers send statistics every step and the covariance actors fold what
  // they get (kfac_cadence): folding every k-th step is the plain
  // runtime's (kfac_config::stats_every).
  if (uses_kfac(*this) && base.optimizer.kfac.stats_every != 1)
    return bad("kfac: stats_every " + std::to_string(
                 base.optimizer.kfac.stats_every)
               + " is for --runtime plain; the sync runtime folds the "
                 "statistics of every step (stats_every 1)");
  if (step_timeout.count() <= 0)
    return bad("step timeout must be positive");
  if (role_probe_timeout.count() < 0)
    return bad("role_probe_timeout must be >= 0 (0: no probe), got "
               + std::to_string(role_probe_timeout.count()) + " ms");
  if (!variables_to_average.empty() && moving_average_decay <= 0)
    return bad("--variables_to_average needs --moving_average_decay > 0 "
               "(no moving averages are kept without it)");
  for (const auto& name : variables_to_average)
    if (name.empty())
      return bad("--variables_to_average has an empty name");
  return caf::none;
}

caf::expected<training_summary>
train_sync(caf::actor_system& sys, const sync_training_config& cfg,
           std::shared_ptr<const dataset> train,
           std::shared_ptr<const dataset> test, std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  const auto& base = cfg.base;
  auto tasks = plan_tasks(cfg);
  if (!tasks)
    return tasks.error();
  // The plan a node of a cluster would have, for one process that hosts
  // every role: the roles' names below come from it.
  auto node = single_process_plan(shape_of(cfg, *tasks));
  if (!node)
    return node.error();
  auto steps = total_steps(cfg, *tasks, train->count);
  // What can refuse the run comes before the first file is written
  // (docs/robustness.md, "Refuse before writing"): the sizes against this
  // machine, the model, the shards' variables.
  auto num_devices = static_cast<uint64_t>(tasks->gradient_workers
                                           + tasks->statistics_workers)
                     * static_cast<uint64_t>(cfg.num_towers);
  auto tower_batch = (base.batch_size + cfg.num_towers - 1) / cfg.num_towers;
  if (auto err = check_local_run(
        base.model, num_devices, static_cast<uint64_t>(tower_batch),
        uses_kfac(cfg), static_cast<uint64_t>(base.device.threads),
        "--worker_replicas " + std::to_string(cfg.worker_replicas)))
    return err;
  training_log out{log, steps, base.progress};
  out.metrics_sink(base.on_metrics);
  caf::scoped_actor self{sys};
  owned_actors top{self};
  auto init = model::make(base.model, base.seed);
  if (!init)
    return init.error();
  auto plan = spawn_shards(sys, cfg, **init, top);
  if (!plan)
    return plan.error();
  auto shards = &plan->shards;
  if (auto err = out.open_outputs(base.metrics_path, base.logdir, base.hparams))
    return err;

  auto driver = chief_driver::make(sys, top, cfg, *tasks, steps,
                                   *shards, test, out);
  if (!driver)
    return driver.error();
  auto chief = (*driver)->chief();
  // The hook hears of the chief's end before the actors go: nothing is
  // sent to them after that (a signal may come at any time).
  struct chief_hook {
    const std::function<void(const chief_actor&)>& f;
    ~chief_hook() {
      if (f)
        f(chief_actor{});
    }
  } hook{cfg.on_chief};
  if (cfg.on_chief)
    cfg.on_chief(chief);

  // Worker tasks: gradient workers first, then statistics workers (each
  // with its own data shard, as every TF worker task has).
  auto num_tasks = tasks->gradient_workers + tasks->statistics_workers;
  std::vector<device_actor> devices;
  for (int32_t i = 0; i < num_tasks; ++i) {
    auto dev = spawn_worker_device(sys, cfg, i, num_tasks, top);
    if (!dev)
      return dev.error();
    devices.push_back(*dev);
  }
  std::optional<kfac_plan> kfac;
  if (uses_kfac(cfg)) {
    // Multi-tower: inverses go round-robin over the towers of worker 0,
    // as the seeds place them over the devices.
    device_actor inverse_device;
    if (cfg.num_towers > 1)
      inverse_device = devices.front();
    auto made = spawn_kfac(sys, cfg, (*init)->kfac_collection(), *plan,
                           *tasks, inverse_device, top);
    if (!made)
      return made.error();
    kfac = std::move(*made);
  }
  run_roles roles;
  for (int32_t i = 0; i < num_tasks; ++i) {
    auto w = spawn_worker(
      sys, make_worker_config(cfg, *tasks, kfac ? &kfac->layout : nullptr, i,
                              train, devices[static_cast<size_t>(i)], *shards,
                              chief,
                              kfac ? kfac->covariance
                                   : std::vector<covariance_actor>{}));
    if (!w)
      return w.error();
    top.own(*w);
    (i >= tasks->gradient_workers ? roles.stats_workers : roles.workers)
      .push_back(*w);
  }
  if (kfac) {
    roles.covariance = kfac->covariance;
    roles.inverses = kfac->inverses;
  }
  out.line("optimizer: " + describe(base.optimizer)
           + (kfac ? std::string{"; cov_inv_op_strategy "}
                       + to_string(cfg.kfac.strategy)
                   : std::string{}));
  // --metrics_port: the run's figures and every role's counters.
  auto directory = std::make_shared<role_directory>();
  auto handle_of = [&](const planned_role& r) -> caf::actor {
    auto at = static_cast<size_t>(r.index);
    switch (r.kind) {
      case role_type::shard: return caf::actor_cast<caf::actor>((*shards)[at]);
      case role_type::chief: return caf::actor_cast<caf::actor>(chief);
      case role_type::worker:
        return caf::actor_cast<caf::actor>(
          at < roles.workers.size()
            ? roles.workers[at]
            : roles.stats_workers[at - roles.workers.size()]);
      case role_type::covariance:
        return caf::actor_cast<caf::actor>(roles.covariance[at]);
      case role_type::inverse:
        return caf::actor_cast<caf::actor>(roles.inverses[at]);
      case role_type::metrics: break;
    }
    return caf::actor{};
  };
  for (const auto& r : node->hosted)
    if (auto h = handle_of(r))
      directory->set(r.name(), h);
  for (const auto& kvp : directory->snapshot())
    out.status()->task(kvp.first, "up", "in this process");
  auto endpoint = observe::serve_metrics(
    base.metrics_port, base.metrics_bind, "chief", 0, out.status(),
    {role_metrics(sys, directory, std::chrono::seconds{2})});
  if (!endpoint)
    return endpoint.error();
  if (*endpoint)
    out.line("metrics: serving " + (*endpoint)->url("/metrics"));
  out.line("sync replicas: " + std::to_string(tasks->gradient_workers)
           + " worker(s), replicas_to_aggregate "
           + std::to_string(tasks->replicas_to_aggregate) + ", "
           + std::to_string(cfg.ps_tasks) + " PS shard(s), "
           + std::to_string(steps) + " global steps of "
           + std::to_string(base.batch_size) + " examples per worker from "
           + train->source);
  if (cfg.num_towers > 1)
    out.line("multi-tower: " + std::to_string(cfg.num_towers)
             + " towers per worker, "
             + std::to_string(std::max(1, base.device.threads
                                            / (num_tasks * cfg.num_towers)))
             + " thread(s) each");
  if (kfac)
    out.line("K-FAC: cov_inv_op_strategy " + std::string{to_string(
               cfg.kfac.strategy)}
             + ", " + std::to_string(tasks->statistics_workers)
             + " statistics worker(s), "
             + std::to_string(cfg.kfac.covariance_actors)
             + " covariance and " + std::to_string(cfg.kfac.inverse_actors)
             + " inverse actor(s), layers placed "
             + to_string(cfg.kfac.placement) + ", "
             + std::to_string((*init)->kfac_collection().layers.size())
             + " layers");

  return (*driver)->run(self, roles);
}

} // namespace syncfac
