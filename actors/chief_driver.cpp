#include "actors/chief_driver.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <optional>

#include <caf/exit_reason.hpp>

#include "actors/checkpoint_writer.hpp"
#include "actors/gather.hpp"
#include "actors/role_names.hpp"
#include "actors/role_totals.hpp"
#include "actors/shard_steps.hpp"
#include "actors/transfer_report.hpp"
#include "runtime/base/error.hpp"
#include "runtime/json.hpp"
#include "runtime/observe/window_figures.hpp"
#include "runtime/process_stats.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// Every role's status at the end of the run, folded for the summary
/// (actors/role_totals.hpp), and the variables K-FAC leaves to the
/// shards' first-order update (embedding tables). Unset roles (not back
/// after a restart of the chief) are skipped; one that cannot answer
/// within `timeout` is left out.
struct role_report {
  role_totals totals;
  std::vector<std::string> first_order;
};

role_report ask_roles(caf::scoped_actor& self, const chief_actor& chief,
                      const std::vector<ps_actor>& shards,
                      const run_roles& roles,
                      std::chrono::milliseconds timeout) {
  role_report r;
  auto ignore = [](size_t, const caf::error&) {};
  ask_each<chief_status>(
    self, std::vector<chief_actor>{chief}, timeout,
    [&](size_t, const chief_status& cs) { r.totals.add(cs); }, ignore,
    status_atom::value);
  ask_each<shard_status>(
    self, shards, timeout,
    [&](size_t, const shard_status& ss) {
      r.totals.add(ss);
      r.first_order.insert(r.first_order.end(),
                           ss.first_order_variables.begin(),
                           ss.first_order_variables.end());
    },
    ignore, status_atom::value);
  std::sort(r.first_order.begin(), r.first_order.end());
  ask_each<worker_status>(
    self, roles.workers, timeout,
    [&](size_t, const worker_status& ws) { r.totals.add(ws); }, ignore,
    status_atom::value);
  // K-FAC's statistics workers compute no gradients: their figures are
  // kept apart from the gradient workers' (steps, transfers).
  ask_each<worker_status>(
    self, roles.stats_workers, timeout,
    [&](size_t, const worker_status& ws) { r.totals.add(ws, "stats_worker"); },
    ignore, status_atom::value);
  ask_each<covariance_status>(
    self, roles.covariance, timeout,
    [&](size_t, const covariance_status& cs) { r.totals.add(cs); }, ignore,
    status_atom::value);
  ask_each<inverse_status>(
    self, roles.inverses, timeout,
    [&](size_t, const inverse_status& is) { r.totals.add(is); }, ignore,
    status_atom::value);
  return r;
}

/// The summary's "kfac": how K-FAC ran, and its figures from every role.
json_object kfac_report(const sync_training_config& cfg,
                        const role_report& roles) {
  json_object obj;
  obj.add("strategy", to_string(cfg.kfac.strategy))
    .add("covariance_actors", cfg.kfac.covariance_actors)
    .add("inverse_actors", cfg.kfac.inverse_actors)
    .merge(roles.totals.kfac_json())
    .add("first_order_variables", roles.first_order);
  return obj;
}

} // namespace

/// Throughput after the warm-up steps, as the plain trainer measures it.
struct chief_driver::warm_mark {
  clock_type::time_point when;
  int64_t examples = 0;
  /// round_report's token_wait_s, preconditioned_steps and inverse_sets
  /// then: what the log window adds.
  double token_wait_s = 0;
  int64_t preconditioned_steps = 0;
  int64_t inverse_sets = 0;
  bool set = false;
};

caf::expected<std::unique_ptr<chief_driver>>
chief_driver::make(caf::actor_system& sys, owned_actors& top,
                   const sync_training_config& cfg, const task_plan& tasks,
                   int64_t steps, std::vector<ps_actor> shards,
                   std::shared_ptr<const dataset> test, training_log& out) {
  const auto& base = cfg.base;
  std::unique_ptr<chief_driver> d{new chief_driver};
  d->cfg_ = cfg;
  d->tasks_ = tasks;
  d->steps_ = steps;
  d->shards_ = shards;
  d->out_ = &out;
  d->warm_ = std::make_shared<warm_mark>();
  // The evaluator: its own device, all threads (it runs between steps or
  // at the end).
  auto eval_dev = spawn_device(sys, base.device);
  if (!eval_dev)
    return eval_dev.error();
  top.own(*eval_dev);
  evaluator_config ec_cfg;
  ec_cfg.model = base.model;
  ec_cfg.data = std::move(test);
  ec_cfg.device = *eval_dev;
  ec_cfg.shards = shards;
  ec_cfg.slice_size = base.eval_batch;
  ec_cfg.use_averages = cfg.moving_average_decay > 0;
  ec_cfg.request_timeout = base.request_timeout;
  auto log = &out;
  ec_cfg.on_result = [log](int64_t step, const eval_result& res) {
    log->eval(step, res);
  };
  // One periodic evaluation at a time: one due while the last still runs
  // is skipped, since it would only evaluate later variables behind it
  // (and the final evaluation would wait behind every one).
  auto evaluating = std::make_shared<std::atomic<bool>>(false);
  ec_cfg.on_answered = [evaluating] { *evaluating = false; };
  auto eval = spawn_evaluator(sys, std::move(ec_cfg));
  if (!eval)
    return eval.error();
  top.own(*eval);
  d->evaluator_ = *eval;

  {
    caf::scoped_actor self{sys};
    auto kept = d->kept_step(self);
    if (!kept)
      return kept.error();
    d->kept_step_ = *kept;
    d->restarted_ = d->shards_kept();
    d->resumed_at_ = d->kept_step_;
  }
  if (auto err = d->prepare_checkpoints(sys, top))
    return err;
  if (d->shards_kept() && cfg.checkpoint.directory.empty())
    out.resume(0, d->kept_step_);
  auto cc = make_chief_config(cfg, tasks, steps, std::move(shards));
  if (d->shards_kept()) {
    cc.start_step = std::min(d->kept_step_, steps);
    out.line("chief: the PS shards are at global step "
             + std::to_string(d->kept_step_)
             + " of a run under way; going on from there (a restarted "
               "chief)");
  } else if (d->restored_) {
    cc.start_step = d->restored_->global_step;
    if (cc.start_step >= steps)
      out.line("checkpoint: global step " + std::to_string(cc.start_step)
               + " is not below the run's " + std::to_string(steps)
               + " steps: nothing left to train");
    cc.steps = std::max(steps, cc.start_step);
    d->steps_ = cc.steps;
  }
  cc.on_event = [log](const std::string& line) { log->fault(line); };
  cc.preempt_wait = std::min(cc.preempt_wait, cfg.step_timeout);
  if (d->checkpointer_) {
    cc.checkpointer = d->checkpointer_;
    cc.checkpoint_every = cfg.checkpoint.every;
    cc.on_checkpoint = [log](const caf::expected<checkpoint_written>& w) {
      if (w) {
        log->checkpoint_written(w->path, w->global_step);
        log->line("checkpoint: wrote " + w->path + " ("
                  + std::to_string(w->bytes) + " bytes in "
                  + std::to_string(w->write_s) + " s)");
      } else {
        log->checkpoint_failed();
        log->line("checkpoint failed (the previous one stays): "
                  + render(w.error()));
      }
    };
  }
  auto eval_handle = *eval;
  auto log_every = base.log_every;
  auto eval_every = base.eval_every;
  auto warm = d->warm_;
  auto warmup = std::max<int64_t>(base.warmup, 0);
  // A round can be applied before any worker has reported its loss (with
  // more tokens than R the reports of a step come after its apply): a log
  // line due then waits for the first round with reports instead of
  // printing "loss: 0". Once a report has come (the round's examples so
  // far are not 0), a line comes at its step with the last loss reported:
  // a step's reports race with its apply (the token request goes right
  // behind the push, docs/protocol.md), so a round can close without one,
  // and its line must not move to the next step. The last step's line
  // comes in any case.
  auto log_due = std::make_shared<bool>(false);
  // The previous log line's time and examples: its examples/s figure.
  auto window = std::make_shared<warm_mark>();
  window->when = clock_type::now();
  auto workers = std::max<int32_t>(tasks.gradient_workers, 1);
  // Under K-FAC every log line also carries the damping and what the
  // preconditioner did in its window (inverse sets installed, steps
  // preconditioned): counts per window, so that a resumed run, whose
  // shards count from 0 again, still draws one continuous curve.
  std::optional<float> damping;
  if (uses_kfac(cfg))
    damping = base.optimizer.kfac.damping;
  // The learning rate the shards applied the round with, as scheduled
  // (every shard computes the same from the global step).
  auto rates = base.optimizer;
  auto skipped = std::make_shared<int64_t>(0);
  cc.on_round = [log, eval_handle, log_every, eval_every, steps, warm,
                 warmup, log_due, window, workers, damping, rates, evaluating,
                 skipped](const round_report& r) {
    if (!warm->set && r.global_step >= warmup) {
      warm->when = clock_type::now();
      warm->examples = r.examples;
      warm->set = true;
    }
    if (r.global_step % log_every == 0 || r.global_step == steps)
      *log_due = true;
    if (*log_due && (r.examples > 0 || r.global_step == steps)) {
      *log_due = false;
      namespace line = observe::window;
      json_object extra;
      extra.add(line::stale_pushes.key, r.stale_pushes);
      extra.add(line::refused_pushes.key, r.refused_pushes);
      extra.add(line::learning_rate.key,
                static_cast<double>(
                  rates.rate_at(std::max<int64_t>(r.global_step - 1, 0))));
      // Measured only when clipping (--clip_norm): the norm before it.
      if (std::isfinite(r.gradient_norm))
        extra.add(line::gradient_norm.key, r.gradient_norm);
      auto now = clock_type::now();
      double window_s = std::chrono::duration<double>(now - window->when)
                          .count();
      if (window->set && window_s > 0) {
        extra.add(line::examples_per_s.key,
                  static_cast<double>(r.examples - window->examples)
                    / window_s);
        // The share of the window the workers' token requests waited.
        extra.add(line::token_wait_share.key,
                  (r.token_wait_s - window->token_wait_s)
                    / (window_s * workers));
      }
      if (damping) {
        extra.add(line::damping.key, static_cast<double>(*damping));
        extra.add(line::inverse_sets.key,
                  r.inverse_sets - window->inverse_sets);
        extra.add(line::preconditioned_steps.key,
                  r.preconditioned_steps - window->preconditioned_steps);
      }
      window->when = now;
      window->examples = r.examples;
      window->token_wait_s = r.token_wait_s;
      window->inverse_sets = r.inverse_sets;
      window->preconditioned_steps = r.preconditioned_steps;
      window->set = true;
      log->train(r.global_step, r.mean_loss, r.accuracy, extra);
    }
    if (eval_every > 0 && r.global_step % eval_every == 0
        && r.global_step < steps) {
      if (!evaluating->exchange(true))
        caf::anon_send(eval_handle, eval_atom::value, r.global_step);
      else if ((*skipped)++ == 0)
        log->line("evaluator: the evaluation due at global step "
                  + std::to_string(r.global_step)
                  + " is skipped, the last one still runs (--eval_every "
                  + std::to_string(eval_every)
                  + " steps is shorter than an evaluation); so is every "
                    "such one after it");
    }
    log->progress(r.global_step);
  };
  auto chief = spawn_chief(sys, std::move(cc));
  if (!chief)
    return chief.error();
  top.own(*chief);
  d->chief_ = *chief;
  return d;
}

namespace {

run_identity identity_of(const sync_training_config& cfg,
                         const task_plan& tasks) {
  return make_run_identity(cfg.base.model, cfg.base.optimizer,
                           tasks.gradient_workers, tasks.replicas_to_aggregate,
                           cfg.ps_tasks,
                           uses_kfac(cfg) ? to_string(cfg.kfac.strategy) : "",
                           cfg.moving_average_decay > 0);
}

/// Asks `target` for its current snapshot (which names its variables or
/// layers), fills that from the checkpoint and sends it back to restore.
template <class Snapshot, class Handle>
caf::error restore_one(caf::scoped_actor& self, const Handle& target,
                       const restored_run& run, std::chrono::milliseconds timeout,
                       const std::string& who) {
  caf::error err;
  Snapshot snap;
  self->request(target, timeout, checkpoint_atom::value)
    .receive([&](Snapshot& x) { snap = std::move(x); },
             [&](caf::error& e) {
               err = make_error(ec::peer_down,
                                "restore: snapshot of " + who + ": "
                                  + render(e));
             });
  if (err)
    return err;
  if (auto e = fill_snapshot(run, snap))
    return e;
  self->request(target, timeout, restore_atom::value, std::move(snap))
    .receive([](caf::ok_atom) {}, [&](caf::error& e) { err = e; });
  return err;
}

} // namespace

caf::error chief_driver::prepare_checkpoints(caf::actor_system& sys,
                                             owned_actors& top) {
  const auto& opts = cfg_.checkpoint;
  if (opts.directory.empty())
    return caf::none;
  auto id = identity_of(cfg_, tasks_);
  auto newest = newest_checkpoint();
  if (!newest)
    return newest.error();
  if (*newest && shards_kept()) {
    factors_from_ = *newest;
    if (uses_kfac(cfg_))
      out_->line("checkpoint: the K-FAC factors come from " + (*newest)->path
                 + " (global step " + std::to_string((*newest)->global_step)
                 + ")");
  } else if (*newest) {
    auto run = *newest;
    caf::scoped_actor self{sys};
    if (auto err = restore_shards(self, *run))
      return err;
    const auto& was = run->written_under;
    out_->line("checkpoint: restored " + run->path + " at global step "
               + std::to_string(run->global_step) + " (written with "
               + std::to_string(was.workers) + " worker(s), "
               + std::to_string(was.ps_tasks) + " PS shard(s)"
               + (was.workers == tasks_.gradient_workers
                    ? std::string{"; data order resumes where it was)"}
                    : std::string{"; data order starts the next epoch)"}));
    restored_ = run;
    out_->checkpoint_restored(run->global_step);
  }
  // A continued run appends to its metrics and TensorBoard curves and
  // counts wall time from the run's first start; the checkpoints it writes
  // record that start again.
  if (restored_)
    out_->resume(restored_->written_under.started_unix,
                 restored_->global_step);
  else if (shards_kept())
    out_->resume(factors_from_ ? factors_from_->written_under.started_unix : 0,
                 kept_step_);
  id.started_unix = out_->started_unix();
  checkpoint_writer_config wc;
  wc.directory = opts.directory;
  wc.keep_last = static_cast<size_t>(opts.keep);
  wc.run = id;
  auto writer = spawn_checkpoint_writer(sys, std::move(wc));
  if (!writer)
    return writer.error();
  top.own(*writer);
  checkpointer_ = *writer;
  return caf::none;
}

caf::expected<std::shared_ptr<const restored_run>>
chief_driver::newest_checkpoint() {
  const auto& opts = cfg_.checkpoint;
  if (opts.directory.empty())
    return std::shared_ptr<const restored_run>{};
  checkpoint_store store{opts.directory, static_cast<size_t>(opts.keep)};
  auto latest = store.load_latest();
  if (!latest)
    return with_context(latest.error(), "checkpoint directory");
  for (const auto& w : latest->warnings)
    out_->line("checkpoint: " + w);
  if (!latest->latest)
    return std::shared_ptr<const restored_run>{};
  auto run = decode_run_checkpoint(*latest->latest, identity_of(cfg_, tasks_));
  if (!run)
    return run.error();
  return std::make_shared<const restored_run>(std::move(*run));
}

caf::error chief_driver::restore_shards(caf::scoped_actor& self,
                                        const restored_run& run) {
  size_t restored = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (auto err = restore_one<shard_snapshot>(self, shards_[i], run,
                                               cfg_.base.request_timeout,
                                               shard_role(i)))
      return err;
    self->request(shards_[i], cfg_.base.request_timeout, pull_atom::value)
      .receive([&](shard_params& p) { restored += p.values.size(); },
               [](caf::error&) {});
  }
  return check_all_restored(run, restored);
}

caf::expected<int64_t> chief_driver::kept_step(caf::scoped_actor& self) {
  shard_step_waits waits;
  waits.request_timeout = cfg_.base.request_timeout;
  waits.step_timeout = cfg_.step_timeout;
  waits.replicas_to_aggregate = cfg_.replicas_to_aggregate;
  auto* out = out_;
  auto found = find_shard_steps(self, shards_, waits,
                                [out](const std::string& line) {
                                  out->line(line);
                                });
  if (!found)
    return found.error();
  round_completed_on_shards_ = static_cast<int64_t>(found->completed.size());
  if (found->disagreement.empty())
    return found->step;
  if (cfg_.checkpoint.directory.empty())
    return make_error(ec::invalid_config,
                      "the PS shards disagree on the global step ("
                        + found->disagreement
                        + ") and the run writes no checkpoints to roll back "
                          "to (--checkpoint_dir)");
  out_->line("chief: the PS shards disagree on the global step ("
             + found->disagreement
             + "): rolling back to the newest checkpoint");
  return int64_t{-1};
}

json_object chief_driver::checkpoint_report(const sync_summary& run) const {
  json_object obj;
  if (cfg_.checkpoint.directory.empty())
    return obj;
  obj.add("directory", cfg_.checkpoint.directory)
    .add("every", cfg_.checkpoint.every)
    .add("restored_step", restored_ ? restored_->global_step : int64_t{-1})
    .add("restored_from", restored_ ? restored_->path : std::string{})
    .add("written", run.checkpoints_written)
    .add("last", run.last_checkpoint)
    .add("failed", static_cast<int64_t>(run.checkpoint_errors.size()));
  if (!run.checkpoint_errors.empty())
    obj.add("last_error", run.checkpoint_errors.back());
  return obj;
}

caf::expected<std::string>
chief_driver::final_digest(caf::scoped_actor& self, shard_values what) {
  const bool averages = what == shard_values::moving_averages;
  parameter_set all;
  caf::error err;
  auto take = [&](shard_params& p) {
    for (auto& x : p.values)
      all.push_back(std::move(x));
  };
  auto fail = [&](caf::error& e) {
    err = make_error(ec::peer_down, std::string{averages
                                                  ? "final moving averages: "
                                                  : "final parameters: "}
                                      + render(e));
  };
  for (auto& sh : shards_)
    if (averages)
      self->request(sh, cfg_.base.request_timeout, pull_atom::value,
                    average_atom::value)
        .receive(take, fail);
    else
      self->request(sh, cfg_.base.request_timeout, pull_atom::value)
        .receive(take, fail);
  if (err)
    return err;
  return parameter_digest(std::move(all));
}

caf::expected<training_summary>
chief_driver::run(caf::scoped_actor& self, const run_roles& roles) {
  // In one process no role can come back: the supervisor has no
  // placement, and a lost role ends the run naming it.
  chief_supervisor_config sc;
  sc.me = "chief";
  sc.request_timeout = cfg_.base.request_timeout;
  sc.probe_timeout = cfg_.role_probe_timeout;
  auto sup = spawn_chief_supervisor(self->system(), std::move(sc));
  if (!sup)
    return sup.error();
  chief_run run;
  run.roles = roles;
  run.roles.shards = shards_;
  return this->run(self, *sup, std::move(run), std::chrono::minutes{1});
}

caf::expected<training_summary>
chief_driver::run(caf::scoped_actor& self, const chief_supervisor_actor& sup,
                  chief_run wiring, std::chrono::milliseconds slack) {
  const auto& base = cfg_.base;
  auto& out = *out_;
  training_summary summary;
  summary.runtime = "sync";
  summary.backend = base.device.backend;
  summary.threads = base.device.threads;
  summary.workers = tasks_.gradient_workers;
  summary.replicas_to_aggregate = tasks_.replicas_to_aggregate;
  summary.ps_tasks = cfg_.ps_tasks;
  wiring.chief = chief_;
  wiring.evaluator = evaluator_;
  wiring.restored = restored_;
  wiring.factors_from = factors_from_;
  wiring.kept_step = kept_step_;
  wiring.writes_checkpoints = !cfg_.checkpoint.directory.empty();
  wiring.newest_checkpoint = [this] { return newest_checkpoint(); };
  // Bounded: every step is bounded by step_timeout.
  wiring.run_timeout = cfg_.step_timeout * (steps_ + 1);
  wiring.out = out_;
  // The supervisor bounds each of its waits; this bounds the whole run:
  // the start, every step and `slack` (the losses' waits, the caller's).
  auto bound = wiring.await_wait + wiring.run_timeout + slack;
  auto t0 = clock_type::now();
  std::optional<chief_run_end> end;
  caf::error err;
  self->request(sup, bound, run_atom::value, std::move(wiring))
    .receive([&](chief_run_end& e) { end = std::move(e); },
             [&](caf::error& e) {
               err = with_context(e, "waiting " + std::to_string(bound.count())
                                       + " ms for the end of the run");
             });
  if (err) {
    // It has not ended: a run that outlived its bound does not go on.
    self->send_exit(sup, caf::exit_reason::user_shutdown);
    return err;
  }
  roles_ = end->roles;
  if (!roles_.shards.empty())
    shards_ = roles_.shards;
  nodes_ = end->nodes;
  hellos_ = end->hellos;
  shards_lost_ = end->shards_lost;
  kfac_roles_lost_ = end->kfac_roles_lost;
  rolled_back_steps_ = end->rolled_back_steps;
  if (end->restored != restored_) {
    restored_ = end->restored;
    kept_step_ = -1;
  }
  if (end->error)
    return end->error;
  auto run = std::move(end->summary);
  summary.train_s = std::chrono::duration<double>(clock_type::now() - t0)
                      .count();
  summary.global_step = run.global_step;
  summary.steps = run.global_step;
  summary.accepted_pushes = run.accepted_pushes;
  summary.stale_pushes = run.stale_pushes;
  summary.refused_pushes = run.refused_pushes;
  summary.last_loss = run.last_loss;
  summary.last_accuracy = run.last_accuracy;
  summary.examples = run.examples;
  summary.checkpoints = checkpoint_report(run);
  summary.preempted = run.preempted;
  summary.faults.add("workers_lost", run.worker_losses)
    .add("workers_rejoined", run.worker_rejoins)
    .add("ps_lost", shards_lost_)
    .add("kfac_roles_lost", kfac_roles_lost_)
    .add("rolled_back_steps", rolled_back_steps_)
    .add("chief_restarted", restarted_)
    .add("resumed_at", restarted_ ? resumed_at_ : int64_t{-1})
    .add("round_completed_on_shards", round_completed_on_shards_)
    .add("updates_inherited", run.updates_inherited)
    .add("updates_applied", run.updates_applied)
    .add("updates_rolled_back", run.updates_rolled_back)
    .add("updates_redone", run.updates_redone);
  if (warm_->set) {
    auto timed = std::chrono::duration<double>(clock_type::now()
                                               - warm_->when)
                   .count();
    if (timed > 0)
      summary.examples_per_s = static_cast<double>(run.examples
                                                   - warm_->examples)
                               / timed;
  }
  auto report = ask_roles(self, chief_, shards_, roles_,
                          counters_timeout(cfg_));
  const auto& totals = report.totals;
  auto step_s = totals.value("worker", "step_s");
  auto compute_s = totals.value("worker", "compute_s");
  summary.token_wait_share
    = step_s > 0 ? totals.value("worker", "token_wait_s") / step_s : 0.0;
  if (compute_s > 0)
    summary.runtime_overhead = (step_s - compute_s) / compute_s;
  if (uses_kfac(cfg_))
    summary.kfac = kfac_report(cfg_, report);
  summary.roles = totals.roles_json();
  summary.transfers = tally_transfers(self, totals, shards_,
                                      counters_timeout(cfg_))
                        .to_json();
  auto digest = final_digest(self, shard_values::variables);
  if (!digest)
    return digest.error();
  summary.params_digest = *digest;
  if (cfg_.moving_average_decay > 0) {
    auto averages = final_digest(self, shard_values::moving_averages);
    if (!averages)
      return averages.error();
    summary.averages_digest = *averages;
  }
  out.line("stale gradient pushes dropped: " + std::to_string(run.stale_pushes)
           + " (accepted " + std::to_string(run.accepted_pushes)
           + ", refused " + std::to_string(run.refused_pushes) + ")");
  // A preempted run has its grace period to end in: no final evaluation
  // (the resumed run makes it).
  if (!base.skip_final_eval && run.preempted.empty()) {
    caf::expected<eval_result> res{caf::error{}};
    self->request(evaluator_, base.request_timeout * 4, eval_atom::value,
                  run.global_step)
      .receive([&](eval_result& r) { res = r; },
               [&](caf::error& err) { res = err; });
    if (!res)
      return make_error(ec::peer_down,
                        "final evaluation: " + render(res.error()));
    summary.test = *res;
  }
  summary.wall_s = out.elapsed();
  summary.peak_rss_mib = peak_rss_mib();
  return summary;
}

} // namespace syncfac
