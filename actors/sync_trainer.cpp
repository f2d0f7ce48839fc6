#include "actors/sync_trainer.hpp"

#include <cmath>
#include <map>
#include <optional>

#include <caf/scoped_actor.hpp>

#include "actors/chief.hpp"
#include "actors/covariance.hpp"
#include "actors/evaluator.hpp"
#include "actors/inverse.hpp"
#include "actors/owned_actors.hpp"
#include "actors/ps_shard.hpp"
#include "actors/tower_device.hpp"
#include "actors/worker.hpp"
#include "runtime/error.hpp"
#include "runtime/model.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

bool uses_kfac(const sync_training_config& cfg) {
  return cfg.base.optimizer.kind == optimizer_kind::kfac;
}

/// The PS shards, and which shard holds each variable.
struct shard_plan {
  std::vector<ps_actor> shards;
  std::map<std::string, int32_t> shard_of;
};

caf::expected<shard_plan> spawn_shards(caf::actor_system& sys,
                                       const sync_training_config& cfg,
                                       const model& init, owned_actors& top) {
  const auto& vars = init.parameters();
  auto placement = place_variables(vars, cfg.ps_tasks, cfg.placement);
  if (!placement)
    return placement.error();
  shard_plan result;
  for (int32_t s = 0; s < cfg.ps_tasks; ++s) {
    ps_shard_config sc;
    sc.index = s;
    sc.optimizer = cfg.base.optimizer;
    for (auto i : (*placement)[static_cast<size_t>(s)]) {
      sc.variables.push_back(vars[i]);
      result.shard_of[vars[i].name] = s;
    }
    if (uses_kfac(cfg))
      for (const auto& l : init.kfac_collection().layers)
        if (result.shard_of.count(l.weight_name) > 0
            && result.shard_of[l.weight_name] == s)
          sc.kfac_layers.push_back(l);
    auto shard = spawn_ps_shard(sys, std::move(sc));
    if (!shard)
      return shard.error();
    top.own(*shard);
    result.shards.push_back(*shard);
  }
  return result;
}

/// Worker tasks by role under the K-FAC strategy.
struct task_plan {
  int32_t gradient_workers = 1;
  int32_t statistics_workers = 0;
  int32_t replicas_to_aggregate = 1;
};

caf::expected<task_plan> plan_tasks(const sync_training_config& cfg) {
  task_plan p{cfg.worker_replicas, 0, cfg.replicas_to_aggregate};
  if (!uses_kfac(cfg) || cfg.kfac.strategy != cov_inv_strategy::dedicated_workers)
    return p;
  auto n = cfg.worker_replicas;
  auto g = static_cast<int32_t>(std::ceil(0.6 * n));
  // The seeds' split: the first ceil(0.6 N) tasks compute gradients, the
  // next ones statistics, the last inverts.
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

/// K-FAC's covariance and inverse actors and what workers need of them.
struct kfac_plan {
  std::vector<covariance_actor> covariance;
  std::map<std::string, int32_t> covariance_of;
  std::vector<inverse_actor> inverses;
  stats_request request;
};

caf::expected<kfac_plan>
spawn_kfac(caf::actor_system& sys, const sync_training_config& cfg,
           const layer_collection& collection, const shard_plan& shards,
           const task_plan& tasks, device_actor inverse_device,
           owned_actors& top) {
  const auto& kc = cfg.base.optimizer.kfac;
  const auto& topo = cfg.kfac;
  const auto& layers = collection.layers;
  kfac_plan result;
  result.request.fisher = kc.fisher;
  result.request.sampling = kc.sampling;
  result.request.sampling.seed = cfg.base.seed;
  // Inverse actors first: the covariance actors hand factors to them.
  auto inv_owner = place_layers(layers, topo.inverse_actors, topo.placement);
  for (int32_t k = 0; k < topo.inverse_actors; ++k) {
    inverse_config ic;
    ic.index = k;
    ic.kfac = kc;
    ic.request_timeout = cfg.base.request_timeout;
    ic.shards = shards.shards;
    ic.device = inverse_device;
    if (!ic.device) {
      device_config dc = cfg.base.device;
      dc.threads = 1; // the inverse kernels run on the calling thread
      auto dev = spawn_device(sys, dc);
      if (!dev)
        return dev.error();
      top.own(*dev);
      ic.device = *dev;
    }
    for (size_t i = 0; i < layers.size(); ++i)
      if (inv_owner[i] == k) {
        ic.layers.push_back(layers[i]);
        ic.shard_of.push_back(shards.shard_of.at(layers[i].weight_name));
      }
    auto inv = spawn_inverse(sys, std::move(ic));
    if (!inv)
      return inv.error();
    top.own(*inv);
    result.inverses.push_back(*inv);
  }
  auto cov_owner = place_layers(layers, topo.covariance_actors,
                                topo.placement);
  int32_t contributions = 1;
  if (topo.strategy == cov_inv_strategy::all_workers)
    contributions = tasks.gradient_workers;
  else if (topo.strategy == cov_inv_strategy::dedicated_workers)
    contributions = tasks.statistics_workers;
  for (int32_t c = 0; c < topo.covariance_actors; ++c) {
    covariance_config cc;
    cc.index = c;
    cc.kfac = kc;
    cc.contributions_per_step = contributions;
    cc.inverses = result.inverses;
    cc.request_timeout = cfg.base.request_timeout;
    for (size_t i = 0; i < layers.size(); ++i)
      if (cov_owner[i] == c) {
        cc.layers.push_back(layers[i]);
        cc.inverse_of.push_back(inv_owner[i]);
        result.covariance_of[layers[i].name] = c;
      }
    auto cov = spawn_covariance(sys, std::move(cc));
    if (!cov)
      return cov.error();
    top.own(*cov);
    result.covariance.push_back(*cov);
  }
  return result;
}

/// K-FAC's counters for the summary, from every role involved.
json_object kfac_report(caf::scoped_actor& self,
                        const sync_training_config& cfg,
                        const kfac_plan& kfac, const shard_plan& shards,
                        const std::vector<worker_actor>& workers) {
  auto timeout = cfg.base.request_timeout;
  int64_t received = 0, folded = 0, stale = 0, refused = 0, handed = 0;
  for (auto& c : kfac.covariance)
    self->request(c, timeout, status_atom::value)
      .receive(
        [&](covariance_status& cs) {
          received += cs.received;
          folded = std::max(folded, cs.cov_updates);
          stale += cs.stale;
          refused += cs.refused;
          handed += cs.factor_sets_sent;
        },
        [&](caf::error&) {});
  int64_t inversions = 0, too_early = 0, failed = 0, raised = 0;
  double invert_s = 0;
  for (auto& inv : kfac.inverses)
    self->request(inv, timeout, status_atom::value)
      .receive(
        [&](inverse_status& is) {
          inversions += is.inversions;
          too_early += is.too_early;
          failed += is.failed;
          raised += is.damping_raised;
          invert_s += is.invert_s;
        },
        [&](caf::error&) {});
  int64_t ready = 0, layers = 0, preconditioned = 0;
  for (auto& sh : shards.shards)
    self->request(sh, timeout, status_atom::value)
      .receive(
        [&](shard_status& ss) {
          ready += ss.kfac_ready;
          layers += ss.kfac_layers;
          preconditioned = std::max(preconditioned, ss.preconditioned_applies);
        },
        [&](caf::error&) {});
  int64_t skipped = 0, send_failed = 0;
  for (auto& w : workers)
    self->request(w, timeout, status_atom::value)
      .receive(
        [&](worker_status& ws) {
          skipped += ws.stats_skipped;
          send_failed += ws.stats_failed;
        },
        [&](caf::error&) {});
  json_object obj;
  obj.add("strategy", to_string(cfg.kfac.strategy))
    .add("covariance_actors", cfg.kfac.covariance_actors)
    .add("inverse_actors", cfg.kfac.inverse_actors)
    .add("stats_received", received)
    .add("cov_updates", folded)
    .add("stats_stale", stale)
    .add("stats_refused", refused)
    .add("stats_skipped", skipped)
    .add("stats_send_failures", send_failed)
    .add("factor_sets", handed)
    .add("layer_inversions", inversions)
    .add("inversions_too_early", too_early)
    .add("inversions_failed", failed)
    .add("damping_raised", raised)
    .add("invert_s", invert_s)
    .add("layers_ready", ready)
    .add("layers", layers)
    .add("preconditioned_steps", preconditioned);
  return obj;
}

/// A worker task's device: one device actor, or with num_towers > 1 a
/// tower device over that many (threads split between them).
caf::expected<device_actor> spawn_worker_device(caf::actor_system& sys,
                                                const sync_training_config& cfg,
                                                int32_t task,
                                                int32_t num_tasks,
                                                owned_actors& top) {
  auto dc = cfg.base.device;
  dc.threads = std::max(1, dc.threads / (num_tasks * cfg.num_towers));
  std::vector<device_actor> towers;
  for (int32_t k = 0; k < cfg.num_towers; ++k) {
    // Distinct sampled-Fisher targets on every device of the run.
    dc.seed = cfg.base.seed * 1000003u
              + static_cast<uint64_t>(task * cfg.num_towers + k) + 1;
    auto dev = spawn_device(sys, dc);
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
  for (auto x : {cov_inv_strategy::chief_worker,
                 cov_inv_strategy::dedicated_workers,
                 cov_inv_strategy::all_workers})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown cov_inv_op_strategy '" + str
                      + "' (expected chief_worker, dedicated_workers or "
                        "all_workers)");
}

caf::error sync_training_config::validate() const {
  if (auto err = base.validate())
    return err;
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, what);
  };
  if (worker_replicas < 1)
    return bad("worker_replicas must be at least 1, got "
               + std::to_string(worker_replicas));
  if (replicas_to_aggregate < 1)
    return bad("replicas_to_aggregate must be at least 1, got "
               + std::to_string(replicas_to_aggregate));
  if (ps_tasks < 1)
    return bad("ps_tasks must be at least 1, got " + std::to_string(ps_tasks));
  if (kfac.covariance_actors < 1 || kfac.inverse_actors < 1)
    return bad("K-FAC needs at least one covariance and one inverse actor, "
               "got " + std::to_string(kfac.covariance_actors) + " and "
               + std::to_string(kfac.inverse_actors));
  if (num_towers < 1)
    return bad("num_towers must be at least 1, got "
               + std::to_string(num_towers));
  if (step_timeout.count() <= 0)
    return bad("step timeout must be positive");
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
  // Each global step consumes R batches, so an epoch has this many steps.
  auto steps_per_epoch = std::max<int64_t>(
    1, train->count / (base.batch_size * tasks->replicas_to_aggregate));
  auto total_steps = base.steps > 0 ? base.steps
                                    : base.num_epochs * steps_per_epoch;
  training_log out{log, total_steps, base.progress};
  if (auto err = out.open_metrics(base.metrics_path))
    return err;
  caf::scoped_actor self{sys};
  owned_actors top{self};
  auto init = model::make(base.model, base.seed);
  if (!init)
    return init.error();
  auto plan = spawn_shards(sys, cfg, **init, top);
  if (!plan)
    return plan.error();
  auto shards = &plan->shards;

  // The evaluator: its own device, all threads (it runs between steps or
  // at the end).
  auto eval_dev = spawn_device(sys, base.device);
  if (!eval_dev)
    return eval_dev.error();
  top.own(*eval_dev);
  evaluator_config ec_cfg;
  ec_cfg.model = base.model;
  ec_cfg.data = test;
  ec_cfg.device = *eval_dev;
  ec_cfg.shards = *shards;
  ec_cfg.slice_size = base.eval_batch;
  ec_cfg.use_averages = cfg.moving_average_decay > 0;
  ec_cfg.request_timeout = base.request_timeout;
  ec_cfg.on_result = [&out](int64_t step, const eval_result& res) {
    out.eval(step, res);
  };
  auto eval = spawn_evaluator(sys, std::move(ec_cfg));
  if (!eval)
    return eval.error();
  top.own(*eval);

  chief_config cc;
  cc.worker_replicas = tasks->gradient_workers;
  cc.replicas_to_aggregate = tasks->replicas_to_aggregate;
  cc.num_tokens = cfg.num_tokens;
  cc.steps = total_steps;
  cc.shards = *shards;
  cc.step_timeout = cfg.step_timeout;
  cc.moving_average_decay = cfg.moving_average_decay;
  cc.request_timeout = base.request_timeout;
  auto eval_handle = *eval;
  auto log_every = base.log_every;
  auto eval_every = base.eval_every;
  // Throughput after the warm-up steps, as the plain trainer measures it.
  struct warm_mark {
    clock_type::time_point when;
    int64_t examples = 0;
    bool set = false;
  };
  auto warm = std::make_shared<warm_mark>();
  auto warmup = std::max<int64_t>(base.warmup, 0);
  cc.on_round = [&out, eval_handle, log_every, eval_every, total_steps, warm,
                 warmup](const round_report& r) {
    if (!warm->set && r.global_step >= warmup) {
      warm->when = clock_type::now();
      warm->examples = r.examples;
      warm->set = true;
    }
    if (r.global_step % log_every == 0 || r.global_step == total_steps) {
      json_object extra;
      extra.add("stale_pushes", r.stale_pushes);
      out.train(r.global_step, r.mean_loss, r.accuracy, extra);
    }
    if (eval_every > 0 && r.global_step % eval_every == 0
        && r.global_step < total_steps)
      caf::anon_send(eval_handle, eval_atom::value, r.global_step);
    out.progress(r.global_step);
  };
  auto chief = spawn_chief(sys, std::move(cc));
  if (!chief)
    return chief.error();
  top.own(*chief);

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
  std::vector<worker_actor> workers;
  std::vector<worker_actor> stats_workers;
  for (int32_t i = 0; i < num_tasks; ++i) {
    worker_config wc;
    wc.index = i;
    wc.num_workers = num_tasks;
    wc.model = base.model;
    wc.seed = base.seed;
    wc.batch_size = base.batch_size;
    wc.data = train;
    wc.device = devices[static_cast<size_t>(i)];
    wc.shards = *shards;
    wc.chief = *chief;
    wc.request_timeout = base.request_timeout;
    wc.token_timeout = cfg.step_timeout;
    bool statistics = i >= tasks->gradient_workers;
    if (statistics)
      wc.role = worker_role::statistics;
    if (kfac) {
      auto strategy = cfg.kfac.strategy;
      bool sends = statistics
                   || strategy == cov_inv_strategy::all_workers
                   || (strategy == cov_inv_strategy::chief_worker && i == 0);
      if (sends) {
        wc.covariance = kfac->covariance;
        wc.covariance_of = kfac->covariance_of;
        wc.stats = kfac->request;
      }
    }
    auto w = spawn_worker(sys, std::move(wc));
    if (!w)
      return w.error();
    top.own(*w);
    (statistics ? stats_workers : workers).push_back(*w);
  }
  out.line("sync replicas: " + std::to_string(tasks->gradient_workers)
           + " worker(s), replicas_to_aggregate "
           + std::to_string(tasks->replicas_to_aggregate) + ", "
           + std::to_string(cfg.ps_tasks) + " PS shard(s), "
           + std::to_string(total_steps) + " global steps of "
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

  training_summary summary;
  summary.runtime = "sync";
  summary.backend = base.device.backend;
  summary.threads = base.device.threads;
  summary.workers = tasks->gradient_workers;
  summary.replicas_to_aggregate = tasks->replicas_to_aggregate;
  summary.ps_tasks = cfg.ps_tasks;
  auto t0 = clock_type::now();
  for (auto& w : workers)
    self->send(w, run_atom::value);
  for (auto& w : stats_workers)
    self->send(w, run_atom::value);
  // Bounded: every step is bounded by step_timeout.
  auto run_timeout = cfg.step_timeout * (total_steps + 1);
  caf::expected<sync_summary> run{caf::error{}};
  self->request(*chief, run_timeout, run_atom::value)
    .receive([&](sync_summary& s) { run = std::move(s); },
             [&](caf::error& err) {
               run = make_error(err == caf::sec::request_timeout
                                  ? ec::timeout
                                  : ec::peer_down,
                                "training run: " + render(err));
             });
  if (!run)
    return run.error();
  summary.train_s = std::chrono::duration<double>(clock_type::now() - t0)
                      .count();
  summary.global_step = run->global_step;
  summary.steps = run->global_step;
  summary.accepted_pushes = run->accepted_pushes;
  summary.stale_pushes = run->stale_pushes;
  summary.refused_pushes = run->refused_pushes;
  summary.last_loss = run->last_loss;
  summary.last_accuracy = run->last_accuracy;
  summary.examples = run->examples;
  if (warm->set) {
    auto timed = std::chrono::duration<double>(clock_type::now() - warm->when)
                   .count();
    if (timed > 0)
      summary.examples_per_s = static_cast<double>(run->examples
                                                   - warm->examples)
                               / timed;
  }
  double step_s = 0;
  double wait_s = 0;
  double compute_s = 0;
  for (auto& w : workers)
    self->request(w, base.request_timeout, status_atom::value)
      .receive(
        [&](worker_status& ws) {
          step_s += ws.step_s;
          wait_s += ws.token_wait_s;
          compute_s += ws.compute_s;
        },
        [&](caf::error&) {
          // A worker that cannot report does not change the result.
        });
  summary.token_wait_share = step_s > 0 ? wait_s / step_s : 0.0;
  if (kfac) {
    auto all = workers;
    all.insert(all.end(), stats_workers.begin(), stats_workers.end());
    summary.kfac = kfac_report(self, cfg, *kfac, *plan, all);
  }
  if (compute_s > 0)
    summary.runtime_overhead = (step_s - compute_s) / compute_s;
  out.line("stale gradient pushes dropped: " + std::to_string(run->stale_pushes)
           + " (accepted " + std::to_string(run->accepted_pushes)
           + ", refused " + std::to_string(run->refused_pushes) + ")");
  if (!base.skip_final_eval) {
    caf::expected<eval_result> res{caf::error{}};
    self->request(*eval, base.request_timeout * 4, eval_atom::value,
                  run->global_step)
      .receive([&](eval_result& r) { res = r; },
               [&](caf::error& err) { res = err; });
    if (!res)
      return make_error(ec::peer_down, "final evaluation: " + render(res.error()));
    summary.test = *res;
  }
  summary.wall_s = out.elapsed();
  summary.peak_rss_mib = peak_rss_mib();
  return summary;
}

} // namespace syncfac
