// syncfac_evaluator: joins a running cluster as task evaluator:i and
// evaluates the PS shards' variables on the held-out set every K global
// steps, on its own device actor. It only reads from the shards, so the
// training step never waits for it. Each result goes to the chief's
// metrics sink (its log and --metrics file), to this program's log and, with
// --metrics FILE, to a JSON-lines file of its own. When the chief ends the
// run, it evaluates the final variables once more before it lets the chief
// go on (the shards are still up then); a preempted run's end skips that
// evaluation, and a stop signal here is passed to the chief, which ends
// the run for every node (docs/distributed.md, "Preemption"). The
// evaluator is the member role of its task (evaluator_member.hpp): the
// node's supervisor, as on the library's nodes, watches the shards and the
// chief, connects again to one that restarts on its address (bounded by
// --max_wait_ms) and tells the evaluator, whose states are behaviours.
// Given TF_CONFIG as TensorFlow writes it for its evaluator ("task":
// {"type": "evaluator", "index": 0}, no cluster.evaluator), it listens
// nowhere and finds the chief at chief:0, or at worker:0 in a cluster
// without a chief job (docs/cluster.md).
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
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <iostream>
#include <memory>
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
#include "evaluator_member.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model.hpp"
#include "runtime/model_file.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/exit_codes.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/stop_signals.hpp"
#include "runtime/system_shutdown.hpp"
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
  int64_t max_wait_ms = 300000;
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
           "longest wait for a shard's step (the next poll asks again)")
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
      .add(max_wait_ms, "max_wait_ms",
           "longest wait for a peer whose process went down to be back "
           "(restarted on its address)")
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
    limit("max_wait_ms", at_least(1));
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

/// The evaluator member role's configuration: the flags, and the handles
/// of the chief's metrics sink and of the `shards` PS shards as connected
/// at start.
caf::expected<evaluator_config>
evaluator_config_of(const evaluator_options& opts, const cluster_member& m,
                    const eval_role_actor& role, const task_id& chief,
                    int32_t shards) {
  evaluator_config ec;
  ec.me = m.me();
  ec.chief = chief.str();
  ec.role = role;
  ec.supervisor = m.supervisor();
  auto sink = m.role<metrics_actor>(chief, "metrics");
  if (!sink)
    return sink.error();
  ec.sink = *sink;
  for (int32_t s = 0; s < shards; ++s) {
    task_id shard{"ps", s};
    auto h = m.role<ps_actor>(shard, shard.str());
    if (!h)
      return h.error();
    ec.shards.push_back(*h);
  }
  ec.eval_every_steps = opts.eval_every_steps;
  ec.poll = std::chrono::milliseconds{opts.poll_ms};
  ec.poll_timeout = std::chrono::milliseconds{opts.poll_timeout_ms};
  ec.request_timeout = std::chrono::milliseconds{opts.request_timeout_ms};
  ec.max_wait = std::chrono::milliseconds{opts.max_wait_ms};
  ec.checkpoint_dir = opts.checkpoint_dir;
  ec.last_reported = std::make_shared<std::atomic<int64_t>>(-1);
  return ec;
}

/// The evaluator in `cluster`, on `sys`: joins, evaluates until the chief
/// ends the run and returns the exit code.
int evaluate_in_cluster(caf::actor_system& sys, evaluator_options& opts,
                        const cluster_spec& cluster,
                        stop_signal_watcher& stop);

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
  auto sys = std::make_unique<caf::actor_system>(opts);
  auto code = evaluate_in_cluster(*sys, opts, *cluster, stop);
  // Bounded, as every node's (runtime/system_shutdown.hpp).
  end_actor_system(std::move(sys), system_shutdown_limit,
                   cluster->task->str(), stop.exit_code_of(code), std::cerr);
  return code;
}

int evaluate_in_cluster(caf::actor_system& sys, evaluator_options& opts,
                        const cluster_spec& cluster,
                        stop_signal_watcher& stop) {
  member_config mc;
  mc.cluster = cluster;
  mc.task = *cluster.task;
  mc.connect.tls = !opts.tls_dir.empty();
  mc.bind = opts.bind;
  mc.insecure = opts.insecure;
  mc.connect.timeout = std::chrono::milliseconds{opts.connect_timeout_ms};
  mc.connect.request_timeout
    = std::chrono::milliseconds{opts.request_timeout_ms};
  for (int32_t s = 0; s < cluster.count("ps"); ++s)
    mc.peers.push_back({"ps", s});
  mc.max_wait = std::chrono::milliseconds{opts.max_wait_ms};
  // As a node's bound on the chief's word after a preemption: the chief's
  // bound on its step in flight (at most 20 s), its checkpoint, its word.
  mc.preempt_wait = std::chrono::milliseconds{20000}
                    + 2 * mc.connect.request_timeout
                    + std::chrono::milliseconds{10000};
  // The final evaluation: a poll and one evaluation (four requests' time).
  mc.finish_timeout = 5 * mc.connect.request_timeout;
  // From here on, a reason this evaluator cannot join is the run's too:
  // the chief hears it and ends the run, as for any task
  // (actors/join_refusal.hpp), unless it refused this evaluator itself.
  auto cannot_join = [&](const caf::error& err) {
    const auto chief = cluster.chief_task();
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
  // The chief (TensorFlow's rule: without a chief job, worker 0) is
  // always connected to; the shards are the peers.
  if (auto err = m.connect())
    return cannot_join(err);
  auto metrics = std::make_shared<std::ofstream>();
  if (!opts.metrics.empty()) {
    metrics->open(opts.metrics, std::ios::out | std::ios::trunc);
    if (!*metrics)
      return fail(make_error(ec::io_error, "cannot open metrics file '"
                                             + opts.metrics
                                             + "' for writing"));
  }
  auto ecfg = evaluator_config_of(opts, m, role, cluster.chief_task(),
                                cluster.count("ps"));
  if (!ecfg)
    return fail(ecfg.error());
  ecfg->metrics = metrics;
  auto last_reported = ecfg->last_reported;
  auto program = sys.spawn(evaluator, std::move(*ecfg));
  // A stop signal: after the evaluation in flight it goes to the node's
  // supervisor, which tells the chief (docs/distributed.md, "Preemption").
  stop.on_stop([program](const std::string& signal) {
    caf::anon_send(program, preempt_atom::value, signal);
  });
  std::cout << m.me() << ": evaluating " << input->data->count << " examples "
            << (opts.checkpoint_dir.empty()
                  ? "every " + std::to_string(opts.eval_every_steps)
                      + " global steps"
                  : "of each checkpoint in " + opts.checkpoint_dir)
            << std::endl;
  auto end = m.run(program, std::chrono::seconds{opts.max_run_s});
  stop.on_stop({});
  caf::anon_send_exit(program, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(role, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(spawned->device, caf::exit_reason::user_shutdown);
  if (!end)
    return fail(end.error());
  if (end->exit_code == exit_codes::failure)
    return fail(end->error ? end->error
                           : make_error(ec::internal, end->reason));
  if (auto signal = stop.received()) {
    auto last = last_reported->load();
    std::cerr << program_name << ": stopped by " << *signal << " after "
              << (last < 0 ? std::string{"no evaluation"}
                           : "the evaluation of global step "
                               + std::to_string(last))
              << "; exit code " << exit_codes::preempted << std::endl;
    return exit_codes::preempted;
  }
  // Another task was preempted: the chief's word says so, and every node
  // of the run exits with the same code.
  if (end->exit_code == exit_codes::preempted) {
    std::cerr << program_name << ": the chief ended the run: " << end->reason
              << "; exit code " << exit_codes::preempted << std::endl;
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
