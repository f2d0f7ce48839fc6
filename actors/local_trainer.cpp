#include "actors/local_trainer.hpp"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include <caf/scoped_actor.hpp>

#include "actors/owned_actors.hpp"

#include "runtime/data/batcher.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/model_footprint.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/least_counts.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/observe/metrics_endpoint.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// Sends one request and waits for its answer, turning a timeout into an
/// error that says what was awaited.
template <class Result, class... Ts>
caf::expected<Result> ask(caf::scoped_actor& self, const device_actor& dev,
                          std::chrono::milliseconds timeout,
                          const std::string& what, Ts&&... xs) {
  caf::expected<Result> result{caf::error{}};
  self->request(dev, timeout, std::forward<Ts>(xs)...)
    .receive([&](Result& x) { result = std::move(x); },
             [&](caf::error& err) {
               if (err == caf::sec::request_timeout)
                 result = make_error(ec::timeout,
                                     "device did not answer " + what
                                       + " within "
                                       + std::to_string(timeout.count())
                                       + " ms");
               else
                 result = make_error(static_cast<ec>(
                                       err.category() == error_category
                                         ? err.code()
                                         : static_cast<uint8_t>(ec::internal)),
                                     what + ": " + render(err));
             });
  return result;
}

/// Full pass over `data` in slices of cfg.eval_batch.
caf::expected<eval_result> evaluate(caf::scoped_actor& self,
                                    const device_actor& dev,
                                    const local_training_config& cfg,
                                    const dataset& data) {
  eval_result total;
  batch b;
  for (int64_t begin = 0; begin < data.count; begin += cfg.eval_batch) {
    auto end = std::min(data.count, begin + cfg.eval_batch);
    slice(data, begin, end, b);
    auto part = ask<eval_result>(self, dev, cfg.request_timeout,
                                 "evaluation of " + data.source + " examples "
                                   + std::to_string(begin) + ".."
                                   + std::to_string(end),
                                 eval_atom::value, b);
    if (!part)
      return part.error();
    total += *part;
  }
  return total;
}

} // namespace

caf::error local_training_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, what);
  };
  if (auto err = model.validate())
    return err;
  if (auto err = optimizer.validate())
    return err;
  if (auto err = device.validate())
    return err;
  if (auto why = first_below_least({{"batch_size", batch_size, 1},
                                     {"steps", steps, 0},
                                     {"log_every", log_every, 1},
                                     {"eval_every", eval_every, 0},
                                     {"eval_batch", eval_batch, 1},
                                     {"warmup", warmup, 0}});
      !why.empty())
    return bad(why);
  if (steps == 0 && num_epochs < 1)
    return bad("num_epochs must be at least 1 when steps is 0, got "
               + std::to_string(num_epochs));
  if (request_timeout.count() <= 0)
    return bad("request timeout must be positive");
  return caf::none;
}

json_object training_summary::to_json() const {
  json_object obj;
  obj.add("steps", steps)
    .add("examples", examples)
    .add("last_loss", last_loss)
    .add("last_train_accuracy", last_accuracy)
    .add("test_examples", test.count)
    .add("test_loss", test.count > 0 ? test.mean_loss() : NAN)
    .add("test_accuracy", test.count > 0 ? test.accuracy() : NAN)
    .add("wall_s", wall_s)
    .add("train_s", train_s)
    .add("examples_per_s", examples_per_s)
    .add("peak_rss_mib", peak_rss_mib)
    .add("backend", backend)
    .add("threads", threads)
    .add("isa", isa)
    .add("runtime", runtime)
    .add("global_step", global_step)
    .add("workers", workers)
    .add("replicas_to_aggregate", replicas_to_aggregate)
    .add("ps_tasks", ps_tasks)
    .add("accepted_pushes", accepted_pushes)
    .add("stale_pushes", stale_pushes)
    .add("refused_pushes", refused_pushes)
    .add("token_wait_share", token_wait_share)
    .add("runtime_overhead", runtime_overhead);
  // The parts a run may lack stay out of the summary when empty.
  auto add_given = [&obj](const std::string& key, const auto& part) {
    if (!part.empty())
      obj.add(key, part);
  };
  add_given("params_digest", params_digest);
  add_given("averages_digest", averages_digest);
  add_given("kfac", kfac);
  add_given("checkpoints", checkpoints);
  add_given("faults", faults);
  add_given("transfers", transfers);
  add_given("roles", roles);
  add_given("preempted", preempted);
  return obj;
}

caf::expected<training_summary>
train_locally(caf::actor_system& sys, const local_training_config& cfg,
              const dataset& train, const dataset& test, std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  auto t_start = clock_type::now();
  auto batches = batcher::make(train, cfg.batch_size, cfg.seed);
  if (!batches)
    return batches.error();
  auto total_steps = cfg.steps > 0 ? cfg.steps
                                   : cfg.num_epochs
                                       * batches->steps_per_epoch();
  // Everything that can refuse the run comes before the first file is
  // written (docs/robustness.md, "Refuse before writing"): the sizes, the
  // device, the model and the optimizer on it.
  if (auto err = check_local_run(cfg.model, 1,
                                 static_cast<uint64_t>(cfg.batch_size),
                                 cfg.optimizer.kind == optimizer_kind::kfac,
                                 static_cast<uint64_t>(cfg.device.threads),
                                 "--batch_size "
                                   + std::to_string(cfg.batch_size)))
    return err;
  training_log out{log, total_steps, cfg.progress};
  out.metrics_sink(cfg.on_metrics);
  auto dev = spawn_device(sys, cfg.device);
  if (!dev)
    return dev.error();
  caf::scoped_actor self{sys};
  owned_actors owned{self};
  owned.own(*dev);
  auto info = ask<model_info>(self, *dev, cfg.request_timeout,
                              "load_model", load_model_atom::value, cfg.model,
                              cfg.seed);
  if (!info)
    return info.error();
  auto opt_ok = ask<caf::ok_atom>(self, *dev, cfg.request_timeout,
                                  "optimizer", optimizer_atom::value,
                                  cfg.optimizer);
  if (!opt_ok)
    return opt_ok.error();
  auto dinfo = ask<device_info>(self, *dev, cfg.request_timeout, "info",
                                info_atom::value);
  if (!dinfo)
    return dinfo.error();
  if (auto err = out.open_outputs(cfg.metrics_path, cfg.logdir, cfg.hparams))
    return err;
  auto endpoint = observe::serve_metrics(cfg.metrics_port, cfg.metrics_bind,
                                        "chief", 0, out.status(), {});
  if (!endpoint)
    return endpoint.error();
  if (*endpoint)
    out.line("metrics: serving " + (*endpoint)->url("/metrics"));
  out.line("model: " + info->summary);
  out.line("device: " + dinfo->backend + ", " + std::to_string(dinfo->threads)
           + " thread(s); training " + std::to_string(total_steps)
           + " steps of " + std::to_string(cfg.batch_size)
           + " examples from " + train.source);

  training_summary summary;
  summary.runtime = "plain";
  summary.backend = dinfo->backend;
  summary.threads = dinfo->threads;
  auto run_eval = [&](int64_t step) -> caf::error {
    auto res = evaluate(self, *dev, cfg, test);
    if (!res)
      return res.error();
    out.eval(step, *res);
    if (cfg.model.reconstructs()) {
      std::ostringstream line;
      line << "global_step: " << step << " | reconstruction_error: "
           << std::setprecision(6) << res->reconstruction_error() << " ("
           << res->count << " examples) | train_s: " << summary.train_s
           << " | wall_s: " << out.elapsed();
      out.line(line.str());
    }
    summary.test = *res;
    return caf::none;
  };

  batch b;
  double window_loss = 0;
  int64_t window_correct = 0;
  int64_t window_count = 0;
  int64_t window_steps = 0;
  double timed_s = 0;
  double timed_compute_s = 0;
  int64_t timed_examples = 0;
  for (int64_t step = 1; step <= total_steps; ++step) {
    auto t0 = clock_type::now();
    batches->next(b);
    auto res = ask<step_result>(self, *dev, cfg.request_timeout,
                                "training step " + std::to_string(step),
                                train_atom::value, b);
    if (!res)
      return res.error();
    auto dt = seconds_since(t0);
    summary.train_s += dt;
    if (step > cfg.warmup) {
      timed_s += dt;
      timed_compute_s += res->compute_s;
      timed_examples += res->count;
    }
    if (!std::isfinite(res->loss))
      return make_error(ec::non_finite,
                        "training diverged: loss is " + std::to_string(res->loss)
                          + " at step " + std::to_string(step)
                          + " (try a smaller learning rate)");
    summary.steps = step;
    summary.examples += res->count;
    window_loss += res->loss;
    window_correct += res->correct;
    window_count += res->count;
    ++window_steps;
    if (step % cfg.log_every == 0 || step == total_steps) {
      summary.last_loss = window_loss / static_cast<double>(window_steps);
      summary.last_accuracy = static_cast<double>(window_correct)
                              / static_cast<double>(window_count);
      out.train(step, summary.last_loss, summary.last_accuracy);
      window_loss = 0;
      window_correct = window_count = window_steps = 0;
    }
    if (cfg.eval_every > 0 && step % cfg.eval_every == 0 && step < total_steps)
      if (auto err = run_eval(step))
        return err;
    out.progress(step);
    if (!cfg.stop_requested || step == total_steps)
      continue;
    if (auto why = cfg.stop_requested(); !why.empty()) {
      // The step in flight is done; the plain loop keeps no checkpoint.
      summary.preempted = why;
      out.line("preempted (" + why + ") after step " + std::to_string(step)
               + " of " + std::to_string(total_steps));
      break;
    }
  }
  // A preempted run has its grace period to end in: no final evaluation.
  if (!cfg.skip_final_eval && summary.preempted.empty())
    if (auto err = run_eval(summary.steps))
      return err;
  summary.wall_s = seconds_since(t_start);
  summary.examples_per_s = timed_s > 0 ? static_cast<double>(timed_examples)
                                           / timed_s
                                       : 0.0;
  summary.peak_rss_mib = peak_rss_mib();
  if (timed_compute_s > 0)
    summary.runtime_overhead = (timed_s - timed_compute_s) / timed_compute_s;
  return summary;
}

} // namespace syncfac
