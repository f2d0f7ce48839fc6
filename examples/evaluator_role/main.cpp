// syncfac_evaluator: joins a running cluster as task evaluator:i and
// evaluates the PS shards' variables on the held-out set every K global
// steps, on its own device actor. It only reads from the shards, so the
// training step never waits for it. Each result goes to the chief's
// metrics sink (its log and --metrics file), to this program's log and, with
// --metrics FILE, to a JSON-lines file of its own. When the chief ends the
// run, it evaluates the final variables once more before it lets the chief
// go on (the shards are still up then); a preempted run's end skips that
// evaluation, and a stop signal here is passed to the chief, which ends
// the run for every node (docs/distributed.md, "Preemption"). A shard or
// the chief that restarts
// (its process comes back on the same address) is reconnected to, a
// bounded number of times. Given TF_CONFIG as TensorFlow writes it for
// its evaluator ("task": {"type": "evaluator", "index": 0}, no
// cluster.evaluator), it listens nowhere and finds the chief at chief:0,
// or at worker:0 in a cluster without a chief job (docs/cluster.md).
//
// With --checkpoint_dir DIR (the run's, on a file system both see) it
// evaluates each checkpoint the chief writes instead of pulling every K
// steps: exactly the variables of that checkpoint. --evaluate_checkpoint
// FILE evaluates one checkpoint file offline, without a cluster, and
// prints the same record.
//
//   syncfac_evaluator --cluster cluster.json --task 0 --eval_every_steps 100
//       --fake_data --fake_test_size 500
//   syncfac_evaluator --evaluate_checkpoint ckpt/ckpt-300.safetensors
//
// Built only against the installed syncfac package (find_package(syncfac)).

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/config_option_adder.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/cluster_member.hpp"
#include "actors/device_actor.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/join_refusal.hpp"
#include "actors/preemption.hpp"
#include "actors/run_fingerprint.hpp"
#include "eval_role.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/base/error.hpp"
#include "runtime/json.hpp"
#include "runtime/model.hpp"
#include "runtime/model_file.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/exit_codes.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/stop_signals.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;
using namespace evaluator_role;

namespace {

constexpr const char* program_name = "syncfac_evaluator";

struct evaluator_options : program_config {
  std::string cluster;
  std::string job_name = "evaluator";
  int32_t task = 0;
  int64_t eval_every_steps = 100;
  int64_t poll_ms = 200;
  int64_t poll_timeout_ms = 2000;
  std::string data_dir = default_mnist_dir;
  std::string data;
  bool fake_data = false;
  int64_t fake_test_size = 2000;
  std::string model = "convnet";
  std::string model_file;
  int32_t threads = 1;
  int64_t eval_batch = 500;
  std::string metrics;
  std::string tls_dir;
  std::string bind;
  bool insecure = false;
  int64_t connect_timeout_ms = 120000;
  int64_t request_timeout_ms = 60000;
  int32_t max_reconnects = 5;
  int64_t max_run_s = 86400;
  int64_t heartbeat_ms = 1000;
  int64_t connection_timeout_ms = 10000;
  std::string checkpoint_dir;
  std::string evaluate_checkpoint;
  std::string requeue_signal = "TERM";

  evaluator_options() {
    caf::config_option_adder{custom_options_, "global"}
      .add(cluster, "cluster", "cluster file (TF_CONFIG's shape); else the "
                               "TF_CONFIG environment variable")
      .add(job_name, "job_name", "this task's job")
      .add(task, "task", "this task's index")
      .add(eval_every_steps, "eval_every_steps",
           "evaluate every K global steps")
      .add(eval_every_steps, "eval_every",
           "--eval_every_steps, spelt as the trainers'")
      .add(poll_ms, "poll_ms", "how often to ask the shards for their step")
      .add(poll_timeout_ms, "poll_timeout_ms",
           "longest wait for a shard's step (then it is reconnected to)")
      .add(data_dir, "data_dir", "MNIST-format IDX files (the test split)")
      .add(data, "data", "a NumPy .npz file (its x_test, y_test) instead "
                         "of --data_dir")
      .add(fake_data, "fake_data", "the deterministic synthetic test set")
      .add(fake_test_size, "fake_test_size", "test examples of --fake_data")
      .add(model, "model", "convnet or mlp (as the cluster trains)")
      .add(model_file, "model_file",
           "the model description the cluster trains (docs/models.md); "
           "wins over --model")
      .add(threads, "threads", "compute threads of the device actor")
      .add(eval_batch, "eval_batch", "examples per device request")
      .add(metrics, "metrics", "this evaluator's own JSON-lines file")
      .add(tls_dir, "tls_dir", "TLS with mutual authentication: directory "
                               "with ca.pem, node.pem, node.key")
      .add(bind, "bind", "listen on this address instead of the cluster "
                         "entry's host (e.g. 0.0.0.0)")
      .add(insecure, "insecure", "allow plaintext when the cluster reaches "
                                 "beyond loopback (docs/tls.md)")
      .add(connect_timeout_ms, "connect_timeout_ms",
           "longest wait for a peer to be reachable")
      .add(request_timeout_ms, "request_timeout_ms",
           "longest wait for one request")
      .add(max_reconnects, "max_reconnects",
           "most times one peer may restart and be reconnected to")
      .add(max_run_s, "max_run_s", "longest wait for the end of the run")
      .add(heartbeat_ms, "heartbeat_ms",
           "middleman heartbeat interval (0: off)")
      .add(connection_timeout_ms, "dead_peer_timeout_ms",
           "a peer silent this long is taken for dead (0: never)")
      .add(connection_timeout_ms, "connection_timeout_ms",
           "the old spelling of --dead_peer_timeout_ms (not "
           "--connect_timeout_ms, the wait for peers at the start)")
      .add(checkpoint_dir, "checkpoint_dir",
           "evaluate each checkpoint the chief writes here instead of "
           "pulling every --eval_every_steps")
      .add(evaluate_checkpoint, "evaluate_checkpoint",
           "evaluate this checkpoint file offline, print its record, exit")
      .add(requeue_signal, "requeue_signal",
           "the scheduler's stop signal besides TERM, INT and HUP: the "
           "first ends the evaluator after the evaluation in flight; exit "
           "code 143");
    allow_values("requeue_signal", {std::begin(requeue_signal_names),
                                    std::end(requeue_signal_names)});
    // Every numeric flag's range (actors/program_config.hpp).
    limit("task", at_least(0));
    limit("eval_every_steps", at_least(1));
    limit("eval_every", at_least(1));
    limit("poll_ms", at_least(1));
    limit("poll_timeout_ms", at_least(1));
    limit("fake_test_size", at_least(1));
    limit("threads", at_least(1));
    limit("eval_batch", at_least(1));
    limit("connect_timeout_ms", at_least(1));
    limit("request_timeout_ms", at_least(1));
    limit("max_reconnects", at_least(0));
    limit("max_run_s", at_least(1));
    limit("heartbeat_ms", at_least(0));
    limit("dead_peer_timeout_ms", at_least(0));
    limit("connection_timeout_ms", at_least(0));
  }
};

int fail(const caf::error& err) {
  std::cerr << program_name << ": " << render(err) << std::endl;
  return EXIT_FAILURE;
}

/// Asks the role and waits (bounded) for its record.
template <class... Ts>
caf::expected<metrics_record> ask_role(caf::scoped_actor& self,
                                       const eval_role_actor& role,
                                       std::chrono::milliseconds timeout,
                                       Ts&&... xs) {
  caf::expected<metrics_record> rec{caf::error{}};
  self->request(role, timeout, std::forward<Ts>(xs)...)
    .receive([&](metrics_record& r) { rec = std::move(r); },
             [&](caf::error& e) { rec = std::move(e); });
  return rec;
}

/// A record as one JSON line (the --metrics format).
std::string record_json(const metrics_record& rec) {
  json_object obj;
  obj.add("source", rec.source).add("step", rec.step);
  for (const auto& kvp : rec.fields)
    obj.add(kvp.first, kvp.second);
  return obj.str();
}

caf::expected<std::shared_ptr<const dataset>>
load_test_set(const evaluator_options& opts, const model_spec& model) {
  if (opts.fake_data) {
    if (opts.fake_test_size < 1)
      return make_error(ec::invalid_config,
                        "--fake_test_size must be positive");
    // The same test set the example trainers use with --fake_data.
    return std::make_shared<const dataset>(
      make_fake_dataset(opts.fake_test_size, 2));
  }
  auto test = opts.data.empty() ? load_mnist(opts.data_dir, split::test)
                                : load_npz(opts.data, split::test,
                                           npz_inputs_for(model));
  if (!test)
    return test.error();
  return std::make_shared<const dataset>(std::move(*test));
}

/// The evaluator's loop: handles, the shards' step, evaluations, reports.
class evaluator_program {
public:
  /// `chief`: the task hosting the chief (chief:0, or worker:0 in a
  /// cluster without a chief job).
  evaluator_program(const evaluator_options& opts, cluster_member& member,
                    eval_role_actor role, int32_t shards, task_id chief)
    : opts_(opts),
      member_(member),
      role_(std::move(role)),
      count_(shards),
      chief_(std::move(chief)) {
  }

  caf::error open_metrics() {
    if (opts_.metrics.empty())
      return caf::none;
    metrics_.open(opts_.metrics, std::ios::out | std::ios::trunc);
    if (!metrics_)
      return make_error(ec::io_error, "cannot open metrics file '"
                                        + opts_.metrics + "' for writing");
    return caf::none;
  }

  /// (Re)reads the role handles of the connected chief and shards.
  caf::error refresh() {
    auto sink = member_.role<metrics_actor>(chief_, "metrics");
    if (!sink)
      return sink.error();
    sink_ = *sink;
    shards_.clear();
    for (int32_t s = 0; s < count_; ++s) {
      auto name = task_id{"ps", s}.str();
      auto h = member_.role<ps_actor>({"ps", s}, name);
      if (!h)
        return h.error();
      shards_.push_back(*h);
    }
    return caf::none;
  }

  /// The lowest global step of the shards; on failure the shard that
  /// failed in `bad`.
  caf::expected<int64_t> poll_step(caf::scoped_actor& self, int32_t& bad) {
    int64_t step = -1;
    caf::error err;
    for (int32_t s = 0; s < count_ && !err; ++s)
      // Short: a request in flight when a peer's connection breaks may
      // go unanswered (CAF 0.17) and would stall the loop until it ends.
      self->request(shards_[static_cast<size_t>(s)],
                    std::chrono::milliseconds{opts_.poll_timeout_ms},
                    status_atom::value)
        .receive(
          [&](shard_status& st) {
            step = step < 0 ? st.global_step
                            : std::min(step, st.global_step);
          },
          [&](caf::error& e) {
            bad = s;
            err = std::move(e);
          });
    if (err)
      return err;
    return step;
  }

  /// Evaluates now and reports; false when the shards were mid-update.
  caf::expected<bool> evaluate(caf::scoped_actor& self, bool final) {
    // The role works through the whole held-out set: give it the time of
    // one request per slice.
    auto rec = ask_role(self, role_, timeout() * 4, eval_atom::value, shards_);
    if (!rec) {
      if (rec.error().category() == error_category
          && rec.error().code() == static_cast<uint8_t>(ec::unavailable))
        return false;
      return rec.error();
    }
    if (final)
      rec->fields["final"] = 1;
    report(*rec);
    return true;
  }

  /// Evaluates the checkpoints of --checkpoint_dir not evaluated yet, in
  /// step order; one that does not read (corrupt, or removed as too old
  /// meanwhile) is reported and skipped.
  caf::error evaluate_checkpoints(caf::scoped_actor& self, bool final) {
    checkpoint_store store{opts_.checkpoint_dir};
    auto steps = store.list_steps();
    if (!steps)
      return steps.error();
    for (auto step : *steps) {
      if (step <= last_)
        continue;
      last_ = step;
      auto ckpt = store.load(step);
      if (!ckpt) {
        std::cout << member_.me() << ": checkpoint of step " << step
                  << " skipped: " << render(ckpt.error()) << std::endl;
        continue;
      }
      auto rec = ask_role(self, role_, timeout() * 4, eval_atom::value, step,
                          checkpoint_variables(*ckpt));
      if (!rec)
        return with_context(rec.error(), ckpt->path);
      rec->fields["checkpoint"] = 1;
      if (final && step == steps->back())
        rec->fields["final"] = 1;
      report(*rec);
    }
    return caf::none;
  }

  /// To the chief's metrics sink, the log and --metrics.
  void report(const metrics_record& rec) {
    last_ = rec.step;
    // One-way: the chief never makes the evaluator wait, nor the reverse.
    caf::anon_send(sink_, metrics_atom::value, rec);
    std::cout << to_log_line(rec) << std::endl;
    if (metrics_.is_open()) {
      metrics_ << record_json(rec) << '\n';
      metrics_.flush();
    }
  }

  /// Until the chief ends the run: poll, evaluate every K steps. A stop
  /// signal (`stop`) is passed to the chief after the evaluation in
  /// flight, as every node passes it on (docs/distributed.md,
  /// "Preemption"): the chief ends the run after its global step in
  /// flight, checkpointed, and this program waits for its word (no more
  /// evaluations), bounded; a chief it cannot reach or that stays silent
  /// ends it at once, or at the bound, saying so.
  caf::error run(const stop_signal_watcher& stop) {
    auto& self = member_.self();
    auto deadline = std::chrono::steady_clock::now()
                    + std::chrono::seconds{opts_.max_run_s};
    std::optional<std::chrono::steady_clock::time_point> told_until;
    for (;;) {
      if (!told_until && stop.received()) {
        if (!tell_chief(*stop.received()))
          return caf::none;
        told_until = std::chrono::steady_clock::now() + preempt_wait();
      }
      auto over = member_.wait(std::chrono::milliseconds{opts_.poll_ms});
      if (!over)
        return over.error();
      if (*over)
        return error_;
      if (told_until) {
        if (std::chrono::steady_clock::now() < *told_until)
          continue;
        std::cout << member_.me() << ": no word from the chief ("
                  << chief_.str() << ") within " << preempt_wait().count()
                  << " ms after the preemption; ending without it"
                  << std::endl;
        return caf::none;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return make_error(ec::timeout,
                          member_.me() + ": the chief did not end the run "
                                         "within --max_run_s "
                            + std::to_string(opts_.max_run_s) + " s");
      if (!member_.take_reconnected().empty())
        if (auto err = refresh())
          return err;
      if (!opts_.checkpoint_dir.empty()) {
        if (auto err = evaluate_checkpoints(self, false))
          return err;
        continue;
      }
      int32_t bad = -1;
      auto step = poll_step(self, bad);
      if (!step) {
        // A shard that does not answer may be restarting: reconnect
        // (bounded); its node going down is handled by wait() as well.
        std::cout << member_.me() << ": ps:" << bad << " did not answer ("
                  << render(step.error()) << ")" << std::endl;
        if (auto err = member_.reconnect({"ps", bad}))
          return err;
        if (auto err = refresh())
          return err;
        continue;
      }
      if (*step < last_) {
        std::cout << member_.me() << ": the global step went back from "
                  << last_ << " to " << *step << " (a shard restarted)"
                  << std::endl;
        last_ = -1;
      }
      auto due = (std::max<int64_t>(last_, 0) / opts_.eval_every_steps + 1)
                 * opts_.eval_every_steps;
      if (*step < due)
        continue;
      if (auto done = evaluate(self, false); !done) {
        // A shard that went away mid-evaluation: the next poll finds it
        // and reconnects. Anything that keeps failing ends the program.
        std::cout << member_.me() << ": evaluation at step " << *step
                  << " failed: " << render(done.error()) << std::endl;
        if (++failures_ >= max_failures)
          return with_context(done.error(),
                              std::to_string(max_failures)
                                + " evaluations in a row failed");
      } else if (*done) {
        failures_ = 0;
      }
    }
  }

  /// The chief ended the run: evaluate the final variables unless done.
  void finish() {
    caf::scoped_actor self{member_.system()};
    if (!opts_.checkpoint_dir.empty()) {
      // The chief wrote its last checkpoint before it ended the run.
      error_ = evaluate_checkpoints(self, true);
      return;
    }
    int32_t bad = -1;
    auto step = poll_step(self, bad);
    if (!step) {
      error_ = with_context(step.error(), "final evaluation: ps:"
                                            + std::to_string(bad));
      return;
    }
    if (*step == last_)
      return;
    auto done = evaluate(self, true);
    if (!done)
      error_ = with_context(done.error(), "final evaluation");
    else if (!*done)
      error_ = make_error(ec::internal, "final evaluation: the shards are "
                                        "at different steps after the run");
  }

  /// The global step of the last evaluation reported (-1: none).
  int64_t last_step() const {
    return last_;
  }

private:
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds{opts_.request_timeout_ms};
  }

  /// The bound on the chief's word after a preemption was passed on: as a
  /// node's (the chief's bound on its step in flight, at most 20 s, its
  /// checkpoint and its word).
  std::chrono::milliseconds preempt_wait() const {
    return std::chrono::milliseconds{20000} + 2 * timeout()
           + std::chrono::milliseconds{10000};
  }

  /// Passes the stop signal `signal` to the chief; false (said) when the
  /// chief cannot be reached.
  bool tell_chief(const std::string& signal) {
    auto chief = member_.role<chief_actor>(chief_, "chief");
    if (!chief) {
      std::cout << member_.me() << ": preempted (" << signal
                << "); cannot reach the chief (" << chief_.str() << ": "
                << render(chief.error())
                << "); the evaluator ends without waiting for it"
                << std::endl;
      return false;
    }
    caf::anon_send(*chief, preempt_atom::value, member_.me() + ": " + signal);
    std::cout << member_.me() << ": preempted (" << signal
              << "); told the chief, which ends the run after the global "
                 "step in flight"
              << std::endl;
    return true;
  }

  const evaluator_options& opts_;
  cluster_member& member_;
  eval_role_actor role_;
  int32_t count_;
  task_id chief_;
  metrics_actor sink_;
  std::vector<ps_actor> shards_;
  int64_t last_ = -1;
  static constexpr int max_failures = 3;
  int failures_ = 0;
  std::ofstream metrics_;
  caf::error error_;
};

caf::error configure(evaluator_options& opts, const cluster_spec& cluster) {
  if (opts.eval_every_steps < 1 || opts.poll_ms < 1
      || opts.poll_timeout_ms < 1 || opts.threads < 1 || opts.eval_batch < 1
      || opts.max_run_s < 1)
    return make_error(ec::invalid_config,
                      "--eval_every_steps, --poll_ms, --poll_timeout_ms, "
                      "--threads, --eval_batch and --max_run_s must be "
                      "positive");
  if (opts.heartbeat_ms < 0 || opts.connection_timeout_ms < 0)
    return make_error(ec::invalid_config,
                      "--heartbeat_ms and --connection_timeout_ms must be "
                      ">= 0");
  opts.set("middleman.heartbeat-interval",
           caf::timespan{std::chrono::milliseconds{opts.heartbeat_ms}});
  opts.set("middleman.connection-timeout",
           caf::timespan{
             std::chrono::milliseconds{opts.connection_timeout_ms}});
  if (opts.tls_dir.empty())
    return caf::none;
  return net::configure_node_tls(opts, opts.tls_dir, *cluster.task, cluster);
}

/// --evaluate_checkpoint FILE: the role on a device of its own, without a
/// cluster; prints the record as --metrics would.
/// The model of --model_file, or of --model.
caf::expected<model_spec> model_of(const evaluator_options& opts) {
  if (!opts.model_file.empty()) {
    auto desc = load_model_file(opts.model_file);
    if (!desc)
      return desc.error();
    return described_spec(std::move(*desc));
  }
  auto arch = parse_model_arch(opts.model);
  if (!arch)
    return arch.error();
  model_spec spec;
  spec.arch = *arch;
  return spec;
}

/// What is evaluated: the model the cluster trains and the test set,
/// checked against it (runtime/model_fit.hpp).
struct evaluation_input {
  model_spec model;
  std::shared_ptr<const dataset> data;
};

caf::expected<evaluation_input>
load_evaluation_input(const evaluator_options& opts) {
  auto spec = model_of(opts);
  if (!spec)
    return spec.error();
  auto data = load_test_set(opts, *spec);
  if (!data)
    return data.error();
  if (auto err = check_data_fits(*spec, **data))
    return err;
  return evaluation_input{std::move(*spec), std::move(*data)};
}

/// The role on a device actor of its own, evaluating `input` and signing
/// its records as `source`.
struct role_on_device {
  device_actor device;
  eval_role_actor role;
};

caf::expected<role_on_device>
spawn_role_on_device(caf::actor_system& sys, const evaluator_options& opts,
                     const evaluation_input& input, std::string source) {
  device_config dc;
  dc.threads = opts.threads;
  auto dev = spawn_device(sys, dc);
  if (!dev)
    return dev.error();
  eval_role_config rc;
  rc.source = std::move(source);
  rc.model = input.model;
  rc.data = input.data;
  rc.device = *dev;
  rc.slice_size = opts.eval_batch;
  rc.request_timeout = std::chrono::milliseconds{opts.request_timeout_ms};
  auto role = spawn_eval_role(sys, rc);
  if (!role) {
    caf::anon_send_exit(*dev, caf::exit_reason::user_shutdown);
    return role.error();
  }
  return role_on_device{*dev, *role};
}

int evaluate_offline(evaluator_options& opts, const evaluation_input& input) {
  auto ckpt = read_checkpoint_file(opts.evaluate_checkpoint);
  if (!ckpt)
    return fail(ckpt.error());
  caf::actor_system sys{opts};
  auto spawned = spawn_role_on_device(sys, opts, input, "offline");
  if (!spawned)
    return fail(spawned.error());
  caf::scoped_actor self{sys};
  auto rec = ask_role(self, spawned->role,
                      std::chrono::milliseconds{opts.request_timeout_ms} * 4,
                      eval_atom::value, ckpt->global_step,
                      checkpoint_variables(*ckpt));
  self->send_exit(spawned->role, caf::exit_reason::user_shutdown);
  self->send_exit(spawned->device, caf::exit_reason::user_shutdown);
  if (!rec)
    return fail(with_context(rec.error(), ckpt->path));
  rec->fields["checkpoint"] = 1;
  std::cout << record_json(*rec) << std::endl;
  return EXIT_SUCCESS;
}

int run(evaluator_options& opts, stop_signal_watcher& stop) {
  if (!opts.evaluate_checkpoint.empty()) {
    auto input = load_evaluation_input(opts);
    if (!input)
      return fail(input.error());
    return evaluate_offline(opts, *input);
  }
  auto cluster = resolve_cluster(opts.cluster, opts.job_name, opts.task);
  if (!cluster)
    return fail(cluster.error());
  if (cluster->count("ps") < 1)
    return fail(make_error(ec::invalid_config,
                           "the cluster has no 'ps' task to evaluate"));
  if (auto err = configure(opts, *cluster))
    return fail(err);
  caf::actor_system sys{opts};
  member_config mc;
  mc.cluster = *cluster;
  mc.task = *cluster->task;
  mc.connect.tls = !opts.tls_dir.empty();
  mc.bind = opts.bind;
  mc.insecure = opts.insecure;
  mc.connect.timeout = std::chrono::milliseconds{opts.connect_timeout_ms};
  mc.connect.request_timeout
    = std::chrono::milliseconds{opts.request_timeout_ms};
  mc.max_reconnects = opts.max_reconnects;
  // From here on, a reason this evaluator cannot join is the run's too:
  // the chief hears it and ends the run, as for any task
  // (actors/join_refusal.hpp), unless it refused this evaluator itself.
  auto cannot_join = [&](const caf::error& err) {
    const auto chief = cluster->chief_task();
    if (chief_must_hear(err, chief)) {
      join_route route{mc.cluster, mc.task, mc.bind, mc.connect,
                       [&stop](const caf::actor& whom) {
                         stop.on_stop([whom](const std::string& signal) {
                           caf::anon_send(whom, preempt_atom::value, signal);
                         });
                       }};
      caf::scoped_actor self{sys};
      refuse_to_join(sys, self, route, chief, true, render(err), std::cout);
    }
    return fail(err);
  };
  auto input = load_evaluation_input(opts);
  if (!input)
    return cannot_join(input.error());
  // The model it evaluates is what it must agree on with the chief.
  auto built = model::make(input->model, 0);
  if (!built)
    return cannot_join(built.error());
  mc.fingerprint = make_model_fingerprint(**built);
  auto member = cluster_member::make(sys, mc, std::cout);
  if (!member)
    return cannot_join(member.error());
  auto& m = **member;
  auto spawned = spawn_role_on_device(sys, opts, *input, m.me());
  if (!spawned)
    return cannot_join(spawned.error());
  const auto& role = spawned->role;
  // Peers find the role by the task's name, as the library's roles.
  m.host(m.me(), caf::actor_cast<caf::actor>(role));
  if (auto err = m.publish())
    return cannot_join(err);
  // TensorFlow's rule: without a chief job, worker 0 is the chief.
  std::vector<task_id> peers{cluster->chief_task()};
  for (int32_t s = 0; s < cluster->count("ps"); ++s)
    peers.push_back({"ps", s});
  if (auto err = m.connect(peers))
    return cannot_join(err);
  evaluator_program prog{opts, m, role, cluster->count("ps"),
                         cluster->chief_task()};
  if (auto err = prog.open_metrics())
    return fail(err);
  if (auto err = prog.refresh())
    return fail(err);
  // A preempted run has its grace period to end in: no final evaluation
  // (the chief skips its own too).
  m.on_shutdown = [&prog](const std::string& reason) {
    if (!is_preempted_run(reason))
      prog.finish();
  };
  std::cout << m.me() << ": evaluating " << input->data->count << " examples "
            << (opts.checkpoint_dir.empty()
                  ? "every " + std::to_string(opts.eval_every_steps)
                      + " global steps"
                  : "of each checkpoint in " + opts.checkpoint_dir)
            << std::endl;
  auto err = prog.run(stop);
  m.self()->send_exit(role, caf::exit_reason::user_shutdown);
  m.self()->send_exit(spawned->device, caf::exit_reason::user_shutdown);
  if (err)
    return fail(err);
  if (auto signal = stop.received()) {
    std::cerr << program_name << ": stopped by " << *signal << " after "
              << (prog.last_step() < 0 ? std::string{"no evaluation"}
                                      : "the evaluation of global step "
                                          + std::to_string(prog.last_step()))
              << "; exit code " << exit_codes::preempted << std::endl;
    return exit_codes::preempted;
  }
  // Another task was preempted: the chief's word says so, and every node
  // of the run exits with the same code.
  if (m.ended() && is_preempted_run(m.end_reason())) {
    std::cerr << program_name << ": the chief ended the run: "
              << m.end_reason() << "; exit code " << exit_codes::preempted
              << std::endl;
    return exit_codes::preempted;
  }
  return EXIT_SUCCESS;
}

} // namespace

int main(int argc, char** argv) {
  evaluator_options opts;
  if (auto err = opts.parse_cli(argc, argv))
    return fail(err);
  if (opts.help_printed)
    return EXIT_SUCCESS;
  // SIGTERM, SIGINT, SIGHUP or --requeue_signal: after the evaluation in
  // flight the signal is passed to the chief, which ends the run (every
  // node then exits with exit_codes::preempted, this one too); it keeps
  // no state of its own, so a restart goes on at the run's step then.
  auto requeue = parse_requeue_signal(opts.requeue_signal);
  if (!requeue)
    return fail(requeue.error());
  auto stop = stop_signal_watcher::install(program_name, *requeue);
  if (!stop)
    return fail(stop.error());
  (*stop)->say_on_stop("the evaluator keeps no state of its own: restarted, "
                       "it evaluates the run from its step then");
  auto code = run(opts, **stop);
  // Stopped before it could end in order (e.g. still connecting):
  // preempted, not failed.
  if (code == EXIT_FAILURE)
    return (*stop)->failure_exit_code();
  return code;
}
