#include "actors/topology.hpp"

#include <algorithm>
#include <cmath>

#include "actors/tower_device.hpp"
#include "kernels/backend_factory.hpp"
#include "runtime/base/error.hpp"
#include "runtime/sync/replica_counts.hpp"

namespace syncfac {

bool uses_kfac(const sync_training_config& cfg) {
  return cfg.base.optimizer.kind == optimizer_kind::kfac;
}

caf::expected<task_plan> plan_tasks(const sync_training_config& cfg) {
  task_plan p{cfg.worker_replicas, 0, cfg.replicas_to_aggregate};
  if (!uses_kfac(cfg)
      || cfg.kfac.strategy != cov_inv_strategy::dedicated_workers)
    return p;
  auto n = cfg.worker_replicas;
  auto g = kfac_gradient_tasks(n);
  auto stats = n - g - 1;
  if (stats < 1)
    return make_error(ec::invalid_config,
                      "cov_inv_op_strategy dedicated_workers needs at least 5 "
                      "worker tasks (ceil(0.6 N) gradient workers, at least "
                      "one statistics worker and one inverse worker), got "
                      "worker_replicas = "
                        + std::to_string(n));
  p.gradient_workers = g;
  p.statistics_workers = stats;
  p.replicas_to_aggregate = g;
  return p;
}

int64_t total_steps(const sync_training_config& cfg, const task_plan& tasks,
                    int64_t examples) {
  if (cfg.base.steps > 0)
    return cfg.base.steps;
  auto per_epoch = std::max<int64_t>(
    1, examples / (cfg.base.batch_size * tasks.replicas_to_aggregate));
  return cfg.base.num_epochs * per_epoch;
}

namespace {

/// Whether `entry` of variables_to_average names `var`: the variable
/// itself or its layer ("fc4" for "fc4/weights").
bool names_variable(const std::string& entry, const std::string& var) {
  return var == entry
         || (var.size() > entry.size() && var.compare(0, entry.size(), entry) == 0
             && var[entry.size()] == '/');
}

/// Per variable of `vars`, whether it keeps a moving average; an entry of
/// `wanted` that names no variable is ec::unknown_name.
caf::expected<std::vector<bool>>
averaged_variables(const std::vector<std::string>& wanted,
                   const parameter_set& vars) {
  std::vector<bool> result(vars.size(), wanted.empty());
  for (const auto& entry : wanted) {
    bool found = false;
    for (size_t i = 0; i < vars.size(); ++i)
      if (names_variable(entry, vars[i].name)) {
        result[i] = true;
        found = true;
      }
    if (!found) {
      std::string names;
      for (const auto& v : vars)
        names += (names.empty() ? "" : ", ") + v.name;
      return make_error(ec::unknown_name,
                        "--variables_to_average: '" + entry
                          + "' names no variable or layer of the model ("
                          + names + ")");
    }
  }
  return result;
}

} // namespace

caf::expected<shard_layout> layout_shards(const sync_training_config& cfg,
                                          const model& init) {
  const auto& vars = init.parameters();
  auto averaged = averaged_variables(cfg.variables_to_average, vars);
  if (!averaged)
    return averaged.error();
  auto placement = place_variables(vars, cfg.ps_tasks, cfg.placement);
  if (!placement)
    return placement.error();
  shard_layout result;
  for (int32_t s = 0; s < cfg.ps_tasks; ++s) {
    ps_shard_config sc;
    sc.index = s;
    sc.optimizer = cfg.base.optimizer;
    sc.moving_average_decay = cfg.moving_average_decay;
    auto sparse = init.sparse_gradient_rows();
    for (auto i : (*placement)[static_cast<size_t>(s)]) {
      sc.variables.push_back(vars[i]);
      // An embedding table takes its gradient as rows (a sparse push).
      for (const auto& x : sparse)
        if (x.variable == vars[i].name)
          sc.sparse_variables.push_back(vars[i].name);
      if (!(*averaged)[i])
        sc.unaveraged_variables.push_back(vars[i].name);
      result.shard_of[vars[i].name] = s;
    }
    result.shards.push_back(std::move(sc));
  }
  if (uses_kfac(cfg))
    for (const auto& l : init.kfac_collection().layers) {
      auto s = result.shard_of.find(l.weight_name);
      if (s != result.shard_of.end())
        result.shards[static_cast<size_t>(s->second)].kfac_layers.push_back(l);
    }
  return result;
}

kfac_layout layout_kfac(const sync_training_config& cfg,
                        const layer_collection& collection,
                        const task_plan& tasks) {
  const auto& kc = cfg.base.optimizer.kfac;
  const auto& topo = cfg.kfac;
  kfac_layout result;
  result.layers = collection.layers;
  result.request.fisher = kc.fisher;
  result.request.sampling = kc.sampling;
  result.request.sampling.seed = cfg.base.seed;
  result.inverse_of = place_layers(result.layers, topo.inverse_actors,
                                   topo.placement);
  result.covariance_of = place_layers(result.layers, topo.covariance_actors,
                                      topo.placement);
  for (size_t i = 0; i < result.layers.size(); ++i)
    result.covariance_by_name[result.layers[i].name] = result.covariance_of[i];
  if (topo.strategy == cov_inv_strategy::all_workers)
    result.contributions_per_step = tasks.gradient_workers;
  else if (topo.strategy == cov_inv_strategy::dedicated_workers)
    result.contributions_per_step = tasks.statistics_workers;
  return result;
}

inverse_config make_inverse_config(const sync_training_config& cfg,
                                   const kfac_layout& kfac,
                                   const shard_layout& layout, int32_t k,
                                   std::vector<ps_actor> shards,
                                   device_actor device) {
  inverse_config ic;
  ic.index = k;
  ic.kfac = cfg.base.optimizer.kfac;
  ic.request_timeout = cfg.base.request_timeout;
  ic.shards = std::move(shards);
  ic.device = std::move(device);
  for (size_t i = 0; i < kfac.layers.size(); ++i)
    if (kfac.inverse_of[i] == k) {
      ic.layers.push_back(kfac.layers[i]);
      ic.shard_of.push_back(layout.shard_of.at(kfac.layers[i].weight_name));
    }
  return ic;
}

caf::expected<device_actor>
spawn_inverse_device(caf::actor_system& sys, const sync_training_config& cfg,
                     owned_actors& top) {
  device_config dc = cfg.base.device;
  dc.threads = 1;
  auto dev = spawn_device(sys, dc);
  if (dev)
    top.own(*dev);
  return dev;
}

covariance_config make_covariance_config(const sync_training_config& cfg,
                                         const kfac_layout& kfac, int32_t c,
                                         std::vector<inverse_actor> inverses) {
  covariance_config cc;
  cc.index = c;
  cc.kfac = cfg.base.optimizer.kfac;
  cc.contributions_per_step = kfac.contributions_per_step;
  cc.inverses = std::move(inverses);
  cc.request_timeout = cfg.base.request_timeout;
  for (size_t i = 0; i < kfac.layers.size(); ++i)
    if (kfac.covariance_of[i] == c) {
      cc.layers.push_back(kfac.layers[i]);
      cc.inverse_of.push_back(kfac.inverse_of[i]);
    }
  return cc;
}

chief_config make_chief_config(const sync_training_config& cfg,
                               const task_plan& tasks, int64_t steps,
                               std::vector<ps_actor> shards) {
  chief_config cc;
  cc.worker_replicas = tasks.gradient_workers;
  cc.replicas_to_aggregate = tasks.replicas_to_aggregate;
  cc.num_tokens = cfg.num_tokens;
  cc.steps = steps;
  cc.shards = std::move(shards);
  cc.step_timeout = cfg.step_timeout;
  cc.clip_norm = cfg.base.optimizer.clip_norm;
  cc.request_timeout = cfg.base.request_timeout;
  return cc;
}

bool sends_statistics(const sync_training_config& cfg, const task_plan& tasks,
                      int32_t task) {
  if (!uses_kfac(cfg))
    return false;
  if (task >= tasks.gradient_workers)
    return true;
  switch (cfg.kfac.strategy) {
    case cov_inv_strategy::all_workers: return true;
    case cov_inv_strategy::chief_worker: return task == 0;
    case cov_inv_strategy::dedicated_workers: return false;
  }
  return false;
}

worker_config make_worker_config(const sync_training_config& cfg,
                                 const task_plan& tasks,
                                 const kfac_layout* kfac, int32_t task,
                                 std::shared_ptr<const dataset> data,
                                 device_actor device,
                                 std::vector<ps_actor> shards,
                                 chief_actor chief,
                                 std::vector<covariance_actor> covariance) {
  const auto& base = cfg.base;
  worker_config wc;
  wc.index = task;
  wc.num_workers = tasks.worker_tasks();
  wc.model = base.model;
  wc.seed = base.seed;
  wc.batch_size = base.batch_size;
  wc.data = std::move(data);
  wc.device = std::move(device);
  wc.shards = std::move(shards);
  wc.chief = std::move(chief);
  wc.request_timeout = base.request_timeout;
  wc.token_timeout = cfg.step_timeout;
  wc.push_part_bytes = cfg.push_part_bytes;
  wc.whole_pulls = cfg.whole_pulls;
  if (task >= tasks.gradient_workers)
    wc.role = worker_role::statistics;
  if (kfac != nullptr && sends_statistics(cfg, tasks, task)) {
    wc.covariance = std::move(covariance);
    wc.covariance_of = kfac->covariance_by_name;
    wc.stats = kfac->request;
    wc.push_after_stats
      = cfg.base.optimizer.kfac.cadence == kfac_cadence::exact;
  }
  return wc;
}

device_config worker_device_config(const sync_training_config& cfg,
                                   int32_t task, int32_t sharing_tasks,
                                   int32_t tower) {
  auto dc = cfg.base.device;
  dc.threads = std::max(1, dc.threads / (sharing_tasks * cfg.num_towers));
  dc.seed = cfg.base.seed * 1000003u
            + static_cast<uint64_t>(task * cfg.num_towers + tower) + 1;
  // Towers spread over the GPUs (gpu:0..N-1) when the device is a GPU.
  if (cfg.num_towers > 1)
    dc.backend = tower_device(dc.backend, tower);
  return dc;
}

caf::expected<device_actor> spawn_worker_device(caf::actor_system& sys,
                                                const sync_training_config& cfg,
                                                int32_t task,
                                                int32_t sharing_tasks,
                                                owned_actors& top) {
  std::vector<device_actor> towers;
  for (int32_t k = 0; k < cfg.num_towers; ++k) {
    auto dev = spawn_device(sys,
                            worker_device_config(cfg, task, sharing_tasks, k));
    if (!dev)
      return dev.error();
    top.own(*dev);
    towers.push_back(*dev);
  }
  if (cfg.num_towers == 1)
    return towers.front();
  auto dev = spawn_tower_device(sys, std::move(towers),
                                cfg.base.request_timeout);
  if (!dev)
    return dev.error();
  top.own(*dev);
  return dev;
}

} // namespace syncfac
