#include "actors/sync_trainer.hpp"

#include <cmath>

#include <caf/scoped_actor.hpp>

#include "actors/chief.hpp"
#include "actors/evaluator.hpp"
#include "actors/owned_actors.hpp"
#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "runtime/error.hpp"
#include "runtime/model.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

caf::expected<std::vector<ps_actor>>
spawn_shards(caf::actor_system& sys, const sync_training_config& cfg,
             owned_actors& top) {
  auto init = model::make(cfg.base.model, cfg.base.seed);
  if (!init)
    return init.error();
  const auto& vars = (*init)->parameters();
  auto placement = place_variables(vars, cfg.ps_tasks, cfg.placement);
  if (!placement)
    return placement.error();
  std::vector<ps_actor> shards;
  for (int32_t s = 0; s < cfg.ps_tasks; ++s) {
    ps_shard_config sc;
    sc.index = s;
    sc.optimizer = cfg.base.optimizer;
    for (auto i : (*placement)[static_cast<size_t>(s)])
      sc.variables.push_back(vars[i]);
    auto shard = spawn_ps_shard(sys, std::move(sc));
    if (!shard)
      return shard.error();
    top.own(*shard);
    shards.push_back(*shard);
  }
  return shards;
}

caf::expected<device_actor> spawn_worker_device(caf::actor_system& sys,
                                                const sync_training_config& cfg,
                                                owned_actors& top) {
  auto dc = cfg.base.device;
  dc.threads = std::max(1, dc.threads / cfg.worker_replicas);
  auto dev = spawn_device(sys, dc);
  if (!dev)
    return dev.error();
  top.own(*dev);
  return dev;
}

} // namespace

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
  // Each global step consumes R batches, so an epoch has this many steps.
  auto steps_per_epoch = std::max<int64_t>(
    1, train->count / (base.batch_size * cfg.replicas_to_aggregate));
  auto total_steps = base.steps > 0 ? base.steps
                                    : base.num_epochs * steps_per_epoch;
  training_log out{log, total_steps, base.progress};
  if (auto err = out.open_metrics(base.metrics_path))
    return err;
  caf::scoped_actor self{sys};
  owned_actors top{self};
  auto shards = spawn_shards(sys, cfg, top);
  if (!shards)
    return shards.error();

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
  cc.worker_replicas = cfg.worker_replicas;
  cc.replicas_to_aggregate = cfg.replicas_to_aggregate;
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

  std::vector<worker_actor> workers;
  for (int32_t i = 0; i < cfg.worker_replicas; ++i) {
    auto dev = spawn_worker_device(sys, cfg, top);
    if (!dev)
      return dev.error();
    worker_config wc;
    wc.index = i;
    wc.num_workers = cfg.worker_replicas;
    wc.model = base.model;
    wc.seed = base.seed;
    wc.batch_size = base.batch_size;
    wc.data = train;
    wc.device = *dev;
    wc.shards = *shards;
    wc.chief = *chief;
    wc.request_timeout = base.request_timeout;
    wc.token_timeout = cfg.step_timeout;
    auto w = spawn_worker(sys, std::move(wc));
    if (!w)
      return w.error();
    top.own(*w);
    workers.push_back(*w);
  }
  out.line("sync replicas: " + std::to_string(cfg.worker_replicas)
           + " worker(s), replicas_to_aggregate "
           + std::to_string(cfg.replicas_to_aggregate) + ", "
           + std::to_string(cfg.ps_tasks) + " PS shard(s), "
           + std::to_string(total_steps) + " global steps of "
           + std::to_string(base.batch_size) + " examples per worker from "
           + train->source);

  training_summary summary;
  summary.runtime = "sync";
  summary.backend = base.device.backend;
  summary.threads = base.device.threads;
  summary.workers = cfg.worker_replicas;
  summary.replicas_to_aggregate = cfg.replicas_to_aggregate;
  summary.ps_tasks = cfg.ps_tasks;
  auto t0 = clock_type::now();
  for (auto& w : workers)
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
