#define BOOST_TEST_MODULE examples_preemption
#include <boost/test/unit_test.hpp>

// Preemption without loss, through the real programs (docs/distributed.md,
// "Preemption"). cluster: every node of a loopback cluster is its own
// process, started here, and gets a real kill -TERM mid-run. The chief
// finishes the global step in flight, checkpoints it (even with
// --checkpoint_every 0), every node exits 143, and the same commands again
// resume there: with one worker and no initial tokens (a deterministic
// run) the parameters equal an uninterrupted run's. A second signal exits
// at once; without --checkpoint_dir the node says what is lost.
// every_role: the same for a SIGTERM to a PS shard, a covariance task and
// an inverse task, and to the launcher (the whole job) with
// --checkpoint_every 0: every node exits 143, the newest applied step is
// checkpointed, and a resume ends on an uninterrupted run's parameters; a
// node that cannot reach the chief exits 143 on its own, saying so. Each
// case logs the time from the signal to the last exit ("timing: ...").
// one_process: the same for the programs that train in one process
// (convnet_mnist_single, convnet_mnist_multi_tower, autoencoder_mnist, the
// plain loop), --requeue_signal and SIGHUP, a stop during an evaluation,
// and the evaluator.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/exit_codes.hpp"
#include "tests/examples/node_process.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// One worker without initial tokens: a deterministic run (as in the
/// checkpoint tests); long enough to be signalled mid-run on a fast
/// machine, logged every 10 steps so that the test sees the run going.
const std::string deterministic = deterministic_flags + " --log_every 10";
const int steps = 600;

/// The tasks of a cluster of `counts` tasks per job ("ps:0", ...).
std::vector<std::string> tasks_of(const std::map<std::string, int>& counts) {
  std::vector<std::string> out;
  for (const auto& [job, n] : counts)
    for (int i = 0; i < n; ++i)
      out.push_back(job + ":" + std::to_string(i));
  return out;
}

/// The newest "global_step: N" training line of `output` (-1: none yet),
/// each line after `prefix` (the launcher's "[chief:0] ").
long logged_step(const std::string& output, const std::string& prefix = "") {
  long last = -1;
  std::istringstream in{output};
  const std::string tag = prefix + "global_step: ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(tag, 0) == 0 && line.find("test_loss") == std::string::npos)
      last = std::stol(line.substr(tag.size()));
  return last;
}

/// A cluster, one process per task: by default chief:0, worker:0 and
/// ps:0.
struct cluster_run {
  const temp_dir& tmp;
  std::string cluster;
  std::string flags;
  std::vector<std::string> tasks{"ps:0", "chief:0", "worker:0"};
  std::map<std::string, node_process> nodes;

  cluster_run(const temp_dir& t, std::string file, std::string f)
    : tmp(t), cluster(std::move(file)), flags(std::move(f)) {
  }

  cluster_run(const temp_dir& t, std::string file, std::string f,
              std::vector<std::string> all)
    : tmp(t), cluster(std::move(file)), flags(std::move(f)),
      tasks(std::move(all)) {
  }

  ~cluster_run() {
    for (auto& [task, n] : nodes)
      if (n.running()) {
        n.signal(SIGKILL);
        n.wait(std::chrono::seconds{10});
      }
  }

  /// Starts every node (the log files get `round` in their names).
  void start(const std::string& round) {
    nodes.clear();
    for (const auto& task : tasks) {
      auto colon = task.find(':');
      auto args = std::string{" --cluster "} + cluster + " --job_name "
                  + task.substr(0, colon) + " --task "
                  + task.substr(colon + 1) + " --connect_timeout_ms 60000"
                  + flags;
      if (task == "chief:0")
        args += " --summary " + tmp.file(round + "-summary.json");
      auto n = start_process(distributed + args,
                             tmp.file(round + "-" + task.substr(0, colon)
                                      + "-" + task.substr(colon + 1)
                                      + ".log"));
      n.task = task;
      nodes[task] = n;
    }
  }

  node_process& node(const std::string& task) {
    return nodes.at(task);
  }

  /// The chief's newest logged global step (-1: none yet).
  long chief_step() {
    return logged_step(node("chief:0").output());
  }

  /// Waits until the chief logged global step `step` or later, bounded.
  void await_step(long step) {
    auto deadline = clock_type::now() + std::chrono::seconds{180};
    while (chief_step() < step) {
      BOOST_REQUIRE_MESSAGE(clock_type::now() < deadline,
                            "the chief did not log global step "
                              << step << " within 180 s:\n"
                              << node("chief:0").output());
      BOOST_REQUIRE_MESSAGE(node("chief:0").running(),
                            "the chief ended before global step "
                              << step << ":\n" << node("chief:0").output());
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }

  /// Waits for every node's exit (bounded) and requires `code` of each.
  void require_exits(int code) {
    for (auto& [task, n] : nodes) {
      bool ended = n.wait(std::chrono::seconds{180});
      case_output::keep(task, n.output());
      BOOST_REQUIRE_MESSAGE(ended, task << " did not exit within 180 s:\n"
                                        << n.output());
      BOOST_TEST(n.exit_code == code, task << " exited " << n.exit_code
                                           << ", expected " << code);
    }
  }

  std::string summary(const std::string& round) const {
    return read_file(tmp.file(round + "-summary.json"));
  }

  /// Seconds from `signalled` to the last node's exit (after
  /// require_exits).
  double seconds_to_last_exit(clock_type::time_point signalled) const {
    auto last = signalled;
    for (const auto& kvp : nodes)
      last = std::max(last, kvp.second.exited_at);
    return std::chrono::duration<double>(last - signalled).count();
  }

  /// Each node's seconds from `signalled` to its exit ("ps:0 0.05 s, ...").
  std::string exit_times(clock_type::time_point signalled) const {
    std::ostringstream out;
    for (const auto& [task, n] : nodes)
      out << (out.tellp() > 0 ? ", " : "") << task << " "
          << std::chrono::duration<double>(n.exited_at - signalled).count()
          << " s";
    return out.str();
  }
};

/// Logs the time from a stop signal to the last exit (the figures of
/// docs/distributed.md, "Preemption").
void log_stop_time(const std::string& what, size_t nodes, double seconds) {
  BOOST_TEST_MESSAGE("timing: " << what << ": the last of " << nodes
                                << " processes exited " << seconds
                                << " s after the signal");
}

/// The checkpoint of global step `step` exists in `dir`, and a chief's
/// summary `summary` names it as the last one written.
void check_checkpoint_of(const std::string& dir, long step,
                         const std::string& summary) {
  auto file = dir + "/ckpt-" + std::to_string(step) + ".safetensors";
  BOOST_TEST(std::filesystem::exists(file), file << " is missing");
  BOOST_TEST(json_string(summary, "last") == file, summary);
}

/// A chief's summary `summary` of a run that `task`'s SIGTERM ended says
/// so, and the checkpoint of its last global step is in `dir`; returns
/// that step.
long check_preempted_by(const std::string& task, const std::string& summary,
                        const std::string& dir) {
  BOOST_TEST(said(summary, "\"preempted\": \"" + task + ": SIGTERM\""),
             summary);
  auto step = static_cast<long>(json_numbers(summary, "global_step").at(0));
  check_checkpoint_of(dir, step, summary);
  return step;
}

/// Task 0 of `job` in a cluster of a chief, a worker and a shard, started
/// alone: it waits for peers that never come (up to `connect_ms`).
node_process start_alone(const temp_dir& tmp, const std::string& job,
                         const std::string& connect_ms) {
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  return start_process(distributed + " --cluster " + cluster + " --job_name "
                         + job + " --task 0 --connect_timeout_ms "
                         + connect_ms + deterministic + " --steps 10",
                       tmp.file(job + ".log"));
}

/// `n` exits within `limit`, with the preempted code.
void check_exits_preempted(node_process& n, std::chrono::seconds limit) {
  bool ended = n.wait(limit);
  case_output::keep("the node", n.output());
  BOOST_REQUIRE_MESSAGE(ended, "no exit within " << limit.count()
                                                  << " s of the signal:\n"
                                                  << n.output());
  BOOST_TEST(n.exit_code == exit_codes::preempted);
}

/// The digest of `steps` uninterrupted steps of the same run in one
/// process (one PS shard, as the cluster; `extra`: the run's own flags).
std::string uninterrupted_digest(const temp_dir& tmp,
                                 const std::string& extra = "") {
  auto summary = tmp.file("whole.json");
  auto res = run_ok(bin + "convnet_mnist_single" + deterministic + extra
                    + " --ps_tasks 1 --steps " + std::to_string(steps)
                    + " --summary " + summary);
  auto digest = json_string(read_file(summary), "params_digest");
  BOOST_REQUIRE(!digest.empty());
  return digest;
}

/// A cluster's jobs and the flags of its run.
struct cluster_kind {
  std::map<std::string, int> jobs;
  std::string flags;
};

/// A chief, one worker, one PS shard: momentum SGD.
const cluster_kind momentum_cluster{{{"chief", 1}, {"worker", 1}, {"ps", 1}},
                                    ""};

/// ... and a covariance and an inverse task: K-FAC whose statistics flow
/// and whose inverses never precondition (--min_cov_updates beyond the
/// run), so that the run stays deterministic (inverses ship as soon as
/// they are ready: docs/design.md §6) while every K-FAC role takes part.
const cluster_kind kfac_cluster{{{"chief", 1},
                                 {"worker", 1},
                                 {"ps", 1},
                                 {"covariance", 1},
                                 {"inverse", 1}},
                                " --optimizer kfac --learning_rate 0.01"
                                " --min_cov_updates 1000000"};

/// SIGTERM to `task` of a `kind` cluster mid-run: every node exits 143
/// with the newest applied step checkpointed (with --checkpoint_every
/// `every`, 0 by default: no periodic ones); the same commands again end
/// with the parameters of an uninterrupted run.
void preempt_and_resume(const std::string& task,
                        const cluster_kind& kind = momentum_cluster,
                        int every = 0) {
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  cluster_run run{tmp, write_cluster(tmp, kind.jobs),
                  deterministic + kind.flags + " --steps "
                    + std::to_string(steps) + " --checkpoint_every "
                    + std::to_string(every) + " --checkpoint_dir " + dir,
                  tasks_of(kind.jobs)};
  run.start("first");
  run.await_step(30);
  auto signalled = clock_type::now();
  run.node(task).signal(SIGTERM);
  run.require_exits(exit_codes::preempted);
  log_stop_time("SIGTERM to " + task, run.nodes.size(),
                run.seconds_to_last_exit(signalled));
  BOOST_TEST_MESSAGE("timing: each: " << run.exit_times(signalled));
  auto first = run.summary("first");
  auto stopped_at = check_preempted_by(task, first, dir);
  BOOST_TEST(stopped_at >= 30);
  BOOST_TEST(stopped_at < steps);
  BOOST_TEST(json_numbers(first, "written").at(0) >= 1);
  BOOST_TEST(said(run.node(task).output(),
                      "SIGTERM: stopping after the global step in flight"));
  if (task != "chief:0") // there the signal reaches the chief directly
    BOOST_TEST(said(run.node(task).output(), "told the chief, which ends "
                                             "the run after the global step"));
  run.start("second");
  run.require_exits(exit_codes::success);
  auto second = run.summary("second");
  check_counters(second, {{"restored_step", stopped_at},
                          {"global_step", steps}});
  BOOST_TEST(!said(second, "\"preempted\""));
  BOOST_TEST(json_string(second, "params_digest")
             == uninterrupted_digest(tmp, kind.flags));
}

} // namespace

BOOST_AUTO_TEST_SUITE(cluster)

BOOST_AUTO_TEST_CASE(sigterm_to_the_chief_resumes_without_loss) {
  preempt_and_resume("chief:0");
}

BOOST_AUTO_TEST_CASE(sigterm_to_a_worker_resumes_without_loss) {
  preempt_and_resume("worker:0");
}

BOOST_AUTO_TEST_CASE(without_a_checkpoint_dir_sigterm_says_what_is_lost) {
  temp_dir tmp;
  cluster_run run{tmp, write_cluster(tmp, {{"chief", 1}, {"worker", 1},
                                           {"ps", 1}}),
                  deterministic + " --steps " + std::to_string(steps)};
  run.start("first");
  run.await_step(20);
  run.node("worker:0").signal(SIGTERM);
  run.require_exits(exit_codes::preempted);
  BOOST_TEST(said(run.node("worker:0").output(),
                      "no --checkpoint_dir: every step of this run is lost"));
  BOOST_TEST(said(run.node("chief:0").output(),
                      "(no --checkpoint_dir: nothing to resume)"));
  BOOST_TEST(said(run.summary("first"), "\"preempted\""));
}

BOOST_AUTO_TEST_CASE(a_second_signal_exits_at_once) {
  // The chief alone: preempted while it waits for its peers, it keeps
  // waiting for them (bounded by --connect_timeout_ms; the preemption is
  // handed to the chief once it exists); a second signal ends it at once,
  // with the same code.
  temp_dir tmp;
  auto chief = start_alone(tmp, "chief", "120000");
  kill_on_exit guard{chief};
  // Up and waiting for the PS shard, which never comes.
  await_output(chief, "waiting for ps:0");
  chief.signal(SIGINT);
  // The first signal does not end it: its peers are still awaited.
  BOOST_TEST(!chief.wait(std::chrono::seconds{2}), chief.output());
  BOOST_TEST(said(chief.output(),
                      "SIGINT: stopping after the global step in flight"));
  chief.signal(SIGTERM);
  check_exits_preempted(chief, std::chrono::seconds{30});
  BOOST_TEST(said(chief.output(),
                      "SIGTERM again after SIGINT: exiting at once"));
}

BOOST_AUTO_TEST_CASE(a_node_stopped_while_it_connects_exits_preempted) {
  // A worker alone: SIGTERM while it waits for its peers; it goes on
  // waiting (bounded by --connect_timeout_ms), then ends with the
  // preempted code, saying why.
  temp_dir tmp;
  auto worker = start_alone(tmp, "worker", "8000");
  kill_on_exit guard{worker};
  await_output(worker, "waiting for");
  worker.signal(SIGTERM);
  check_exits_preempted(worker, std::chrono::seconds{60});
  BOOST_TEST(said(worker.output(),
                      "ended after SIGTERM before the run could end in order"));
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

/// The launcher on a `kind` cluster (every task's output prefixed with
/// its task, no timestamps), its log in `round`.log and the chief's
/// summary in `round`-summary.json.
node_process start_launcher(const temp_dir& tmp, const std::string& cluster,
                            const std::string& flags,
                            const std::string& round) {
  return start_process(bin + "syncfac-launch --no_log_timestamps --cluster "
                         + cluster + " -- --connect_timeout_ms 60000" + flags
                         + " --summary " + tmp.file(round + "-summary.json"),
                       tmp.file(round + ".log"));
}

} // namespace

BOOST_AUTO_TEST_SUITE(every_role)

BOOST_AUTO_TEST_CASE(sigterm_to_a_ps_shard_resumes_without_loss) {
  // The shard is connected to by the chief: it asks the chief's node for
  // the chief, tells it, and serves the step in flight until the chief's
  // word.
  preempt_and_resume("ps:0");
}

BOOST_AUTO_TEST_CASE(sigterm_to_a_covariance_task_resumes_without_loss) {
  preempt_and_resume("covariance:0", kfac_cluster);
}

BOOST_AUTO_TEST_CASE(sigterm_to_an_inverse_task_resumes_without_loss) {
  preempt_and_resume("inverse:0", kfac_cluster);
}

BOOST_AUTO_TEST_CASE(sigterm_to_an_inverse_task_under_task_bound_tls) {
  // With certificates bound to tasks the chief's node takes a hello only
  // over a connection verified for the task it claims: the inverse task's
  // question for the chief goes over the connection the chief opened,
  // verified on both sides, and is answered.
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  auto cluster = write_cluster(tmp, kfac_cluster.jobs);
  auto certs = write_cluster_certs(tmp, cluster);
  cluster_run run{tmp, cluster,
                  deterministic + kfac_cluster.flags + " --steps "
                    + std::to_string(steps) + " --tls_dir " + certs
                    + " --checkpoint_every 0 --checkpoint_dir " + dir,
                  tasks_of(kfac_cluster.jobs)};
  run.start("tls");
  run.await_step(30);
  auto signalled = clock_type::now();
  run.node("inverse:0").signal(SIGTERM);
  run.require_exits(exit_codes::preempted);
  log_stop_time("SIGTERM to inverse:0 under TLS", run.nodes.size(),
                run.seconds_to_last_exit(signalled));
  check_preempted_by("inverse:0", run.summary("tls"), dir);
  BOOST_TEST(said(run.node("inverse:0").output(), "told the chief"));
}

BOOST_AUTO_TEST_CASE(sigterm_to_the_launcher_checkpoints_the_newest_step) {
  // The whole job (a scheduler's scancel, a job deletion): the launcher
  // forwards SIGTERM to every task of a K-FAC cluster, with
  // --checkpoint_every 0. Every task exits 143, the newest applied step
  // is checkpointed, the launcher's message names that step, and the
  // launcher again with the same flags resumes there and ends on an
  // uninterrupted run's parameters.
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  auto cluster = write_cluster(tmp, kfac_cluster.jobs);
  auto flags = deterministic + kfac_cluster.flags + " --steps "
               + std::to_string(steps)
               + " --checkpoint_every 0 --checkpoint_dir " + dir;
  auto first = start_launcher(tmp, cluster, flags, "first");
  kill_on_exit guard{first};
  auto deadline = clock_type::now() + std::chrono::seconds{180};
  while (logged_step(first.output(), "[chief:0] ") < 30) {
    BOOST_REQUIRE_MESSAGE(clock_type::now() < deadline,
                          "no global step 30 within 180 s:\n"
                            << first.output());
    BOOST_REQUIRE_MESSAGE(first.running(), "the launcher ended before "
                                           "global step 30:\n"
                                             << first.output());
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  auto signalled = clock_type::now();
  first.signal(SIGTERM);
  check_exits_preempted(first, std::chrono::seconds{180});
  log_stop_time("SIGTERM to the launcher (the whole job)",
                tasks_of(kfac_cluster.jobs).size(),
                std::chrono::duration<double>(first.exited_at - signalled)
                  .count());
  auto out = first.output();
  for (const auto& task : tasks_of(kfac_cluster.jobs))
    BOOST_TEST(said(out, "syncfac-launch: " + task + " exited with code 143"),
               task);
  auto summary = read_file(tmp.file("first-summary.json"));
  BOOST_TEST(said(summary, "\"preempted\": \""), summary);
  auto stopped_at = static_cast<long>(json_numbers(summary, "global_step")
                                        .at(0));
  BOOST_TEST(stopped_at >= 30);
  BOOST_TEST(stopped_at < steps);
  check_checkpoint_of(dir, stopped_at, summary);
  BOOST_TEST(said(out, "the run can be requeued with the same flags, which "
                       "resume at global step "
                         + std::to_string(stopped_at)
                         + " (the newest checkpoint chief:0 reported)"));
  auto second = start_launcher(tmp, cluster, flags, "second");
  kill_on_exit guard2{second};
  bool ended = second.wait(std::chrono::seconds{300});
  case_output::keep("the second node", second.output());
  BOOST_REQUIRE_MESSAGE(ended, "the resumed run did not end in 300 s");
  BOOST_TEST(second.exit_code == 0);
  auto resumed = read_file(tmp.file("second-summary.json"));
  check_counters(resumed, {{"restored_step", stopped_at},
                           {"global_step", steps}});
  BOOST_TEST(json_string(resumed, "params_digest")
             == uninterrupted_digest(tmp, kfac_cluster.flags));
}

BOOST_AUTO_TEST_CASE(with_periodic_checkpoints_every_kind_resumes_without_loss) {
  // The same with a checkpoint every 25 steps: the preemption still
  // checkpoints the newest applied step, not only the last periodic one.
  for (const char* task : {"chief:0", "worker:0", "ps:0"})
    BOOST_TEST_CONTEXT(task) {
      preempt_and_resume(task, momentum_cluster, 25);
    }
  for (const char* task : {"covariance:0", "inverse:0"})
    BOOST_TEST_CONTEXT(task) {
      preempt_and_resume(task, kfac_cluster, 25);
    }
}

BOOST_AUTO_TEST_CASE(sigterm_while_the_chief_waits_for_a_lost_role_ends_the_run) {
  // The inverse task killed: the chief pauses the steps and would wait
  // --max_wait_ms (120 s here) for it. SIGTERM to the chief then ends the
  // run where it stands, with the newest applied step checkpointed (the
  // shards and the covariance task are there), and every node left exits
  // 143, long before that wait would have run out.
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  cluster_run run{tmp, write_cluster(tmp, kfac_cluster.jobs),
                  deterministic + kfac_cluster.flags
                    + " --steps 100000 --max_wait_ms 120000"
                      " --checkpoint_every 0 --checkpoint_dir " + dir,
                  tasks_of(kfac_cluster.jobs)};
  run.start("first");
  run.await_step(30);
  run.node("inverse:0").signal(SIGKILL);
  await_output(run.node("chief:0"), "chief:0: waiting up to");
  auto signalled = clock_type::now();
  run.node("chief:0").signal(SIGTERM);
  for (auto& [task, n] : run.nodes) {
    if (task == "inverse:0")
      continue;
    check_exits_preempted(n, std::chrono::seconds{60});
  }
  double took = 0;
  for (const auto& [task, n] : run.nodes)
    if (task != "inverse:0")
      took = std::max(took, std::chrono::duration<double>(n.exited_at
                                                          - signalled)
                              .count());
  log_stop_time("SIGTERM to the chief waiting for a lost inverse task",
                run.nodes.size() - 1, took);
  BOOST_TEST(took < 30.0);
  auto chief = run.node("chief:0").output();
  BOOST_TEST(said(chief, "while waiting for inverse:0; the run ends "
                         "without it"),
             chief);
  auto summary = run.summary("first");
  BOOST_TEST(said(summary, "\"preempted\""), summary);
  BOOST_TEST(json_numbers(summary, "written").at(0) >= 1, summary);
  BOOST_TEST(json_numbers(summary, "kfac_roles_lost").at(0) == 1, summary);
}

BOOST_AUTO_TEST_CASE(a_shard_that_cannot_reach_the_chief_exits_on_its_own) {
  // The chief frozen (SIGSTOP; its connections stay up): the preempted
  // shard's question to the chief's node goes unanswered, and after
  // --request_timeout_ms it says so and exits 143 by itself.
  temp_dir tmp;
  cluster_run run{tmp, write_cluster(tmp, momentum_cluster.jobs),
                  deterministic + " --steps 100000 --request_timeout_ms 3000"};
  run.start("first");
  run.await_step(20);
  run.node("chief:0").signal(SIGSTOP);
  auto signalled = clock_type::now();
  run.node("ps:0").signal(SIGTERM);
  check_exits_preempted(run.node("ps:0"), std::chrono::seconds{60});
  log_stop_time("SIGTERM to ps:0 with the chief frozen", 1,
                std::chrono::duration<double>(run.node("ps:0").exited_at
                                              - signalled)
                  .count());
  // The shard asks the chief's node for the chief and gets no answer; or,
  // where its node had learnt the chief's handle before (a reconnection
  // on a loaded machine), it tells the chief, hears nothing, and ends once
  // the chief's node is taken for dead. Either way it ends on its own,
  // saying why.
  const auto out = run.node("ps:0").output();
  bool unreached = said(out, "ps:0: preempted (SIGTERM); cannot reach the "
                             "chief (chief:0 at 127.0.0.1:")
                   && said(out, "the node ends without waiting for it");
  bool chief_gone = said(out, "ps:0: preempted (SIGTERM); told the chief")
                    && said(out, "after the preemption; ending now");
  BOOST_TEST((unreached || chief_gone), out);
  run.node("chief:0").signal(SIGCONT);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

/// Waits until `n` logged step `step` or later, bounded.
void await_logged_step(node_process& n, long step) {
  auto deadline = clock_type::now() + std::chrono::seconds{180};
  while (logged_step(n.output()) < step) {
    BOOST_REQUIRE_MESSAGE(clock_type::now() < deadline,
                          "no global step " << step << " within 180 s:\n"
                                            << n.output());
    BOOST_REQUIRE_MESSAGE(n.running(), "ended before global step "
                                         << step << ":\n" << n.output());
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
}

/// One run of a program in one process, its summary in `round`.json.
struct single_run {
  const temp_dir& tmp;
  std::string command;

  /// Starts the run; the caller signals and waits.
  node_process start(const std::string& round) const {
    return start_process(command + " --summary " + tmp.file(round + ".json"),
                         tmp.file(round + ".log"));
  }

  std::string summary(const std::string& round) const {
    return read_file(tmp.file(round + ".json"));
  }
};

/// The in-process runs' length: long enough that a signal sent at global
/// step 30 finds them still running on a fast, idle machine (they train
/// at ~1000 steps/s there), short enough for a busy one.
const int single_steps = 2000;

/// `signo` to `command` (a sync run of single_steps with
/// --checkpoint_dir, logging every 10 steps) at its global step 30: it
/// exits 143 with the step in flight checkpointed (why: `why`); started
/// again (unless `resume` is false) it resumes there and ends with exit 0.
/// Returns the second run's summary.
std::string stop_and_resume(const temp_dir& tmp, const std::string& command,
                            int signo, const std::string& why,
                            bool resume = true) {
  single_run run{tmp, command};
  auto first = run.start("first");
  kill_on_exit guard{first};
  await_logged_step(first, 30);
  first.signal(signo);
  check_exits_preempted(first, std::chrono::seconds{180});
  auto summary = run.summary("first");
  BOOST_TEST(said(summary, "\"preempted\": \"" + why + "\""), summary);
  auto stopped_at = json_numbers(summary, "global_step").at(0);
  BOOST_TEST(stopped_at >= 30);
  BOOST_TEST(stopped_at < single_steps);
  BOOST_TEST(json_numbers(summary, "written").at(0) >= 1);
  BOOST_TEST(said(first.output(),
                  why + ": stopping after the global step in flight"));
  BOOST_TEST(said(first.output(), "the step in flight is checkpointed into"));
  BOOST_TEST(said(first.output(),
                  "(restarted with the same flags it resumes there)"));
  if (!resume)
    return {};
  auto second = run.start("second");
  kill_on_exit guard2{second};
  bool ended = second.wait(std::chrono::seconds{300});
  case_output::keep("the second node", second.output());
  BOOST_REQUIRE_MESSAGE(ended, "the resumed run did not end in 300 s");
  BOOST_TEST(second.exit_code == 0, second.output());
  auto resumed = run.summary("second");
  check_counters(resumed, {{"restored_step", stopped_at},
                           {"global_step", single_steps}});
  BOOST_TEST(!said(resumed, "\"preempted\""));
  return resumed;
}

/// The params_digest of `command` run to its end, uninterrupted.
std::string digest_of(const temp_dir& tmp, const std::string& command) {
  auto summary = tmp.file("whole.json");
  run_ok(command + " --summary " + summary);
  auto digest = json_string(read_file(summary), "params_digest");
  BOOST_REQUIRE(!digest.empty());
  return digest;
}

/// The single-process run these cases stop and resume.
const std::string single_command = single + deterministic + " --ps_tasks 1"
                                   + " --steps "
                                   + std::to_string(single_steps);

} // namespace

BOOST_AUTO_TEST_SUITE(one_process)

BOOST_AUTO_TEST_CASE(sigterm_to_convnet_mnist_single_resumes_without_loss) {
  // --checkpoint_every 0: only the preemption's checkpoint is written.
  temp_dir tmp;
  auto resumed = stop_and_resume(
    tmp,
    single_command + " --checkpoint_every 0 --checkpoint_dir "
      + tmp.file("ckpt"),
    SIGTERM, "SIGTERM");
  BOOST_TEST(json_string(resumed, "params_digest")
             == digest_of(tmp, single_command));
}

BOOST_AUTO_TEST_CASE(a_stop_during_an_evaluation_ends_the_program) {
  // Small steps and a test set of 2,000 evaluated every 20 steps, signalled
  // at step 300 (after the first evaluations settled into the run): an
  // evaluation is in flight at most signals. The run ends after the step
  // in flight while the evaluator may still be finishing its last slice;
  // it used to write that result into the training log the driver had
  // already destroyed, and the program then hung at exit or failed (2-3
  // of these 12 tries with that code). Every try must exit 143 in time.
  for (int attempt = 1; attempt <= 12; ++attempt) {
    BOOST_TEST_CONTEXT("try " << attempt) {
      temp_dir tmp;
      single_run run{tmp, bin + "convnet_mnist_single --fake_data"
                            " --fake_train_size 2560 --batch_size 16"
                            " --log_every 5 --no_progress --steps 100000"
                            " --eval_every 20 --checkpoint_dir "
                            + tmp.file("ckpt")};
      auto n = run.start("run");
      kill_on_exit guard{n};
      await_logged_step(n, 300);
      n.signal(SIGTERM);
      check_exits_preempted(n, std::chrono::seconds{60});
    }
  }
}

BOOST_AUTO_TEST_CASE(the_requeue_signal_and_sighup_stop_it_as_sigterm) {
  // A site's requeue signal with --requeue_signal, and SIGHUP always; the
  // same signal without the flag is not ours to handle (the default
  // action ends the process: 128 + the signal).
  for (auto [signo, flag] : std::vector<std::pair<int, std::string>>{
         {SIGUSR1, " --requeue_signal USR1"},
         {SIGUSR2, " --requeue_signal USR2"},
         {SIGHUP, ""}}) {
    BOOST_TEST_CONTEXT("signal " << signo << flag) {
      temp_dir tmp;
      stop_and_resume(tmp, single_command + flag + " --checkpoint_dir "
                             + tmp.file("ckpt"),
                      signo, signo == SIGHUP   ? "SIGHUP"
                             : signo == SIGUSR1 ? "SIGUSR1"
                                                : "SIGUSR2",
                      false);
    }
  }
  temp_dir tmp;
  single_run run{tmp, bin + "convnet_mnist_single" + deterministic
                        + " --steps 100000"};
  auto plain_usr1 = run.start("unhandled");
  kill_on_exit guard{plain_usr1};
  await_logged_step(plain_usr1, 10);
  plain_usr1.signal(SIGUSR1);
  BOOST_REQUIRE(plain_usr1.wait(std::chrono::seconds{60}));
  BOOST_TEST(plain_usr1.exit_code == 128 + SIGUSR1, plain_usr1.output());
}

BOOST_AUTO_TEST_CASE(a_bad_requeue_signal_is_refused_by_name) {
  check_refused(single_command + " --requeue_signal KILL",
                {"--requeue_signal 'KILL': expected one of TERM, HUP, USR1, "
                 "USR2"});
}

BOOST_AUTO_TEST_CASE(the_multi_tower_program_resumes_without_loss) {
  temp_dir tmp;
  auto towers = bin + "convnet_mnist_multi_tower" + deterministic
                + " --num_towers 2 --ps_tasks 1 --steps "
                + std::to_string(single_steps);
  auto resumed = stop_and_resume(
    tmp, towers + " --checkpoint_every 0 --checkpoint_dir " + tmp.file("ckpt"),
    SIGTERM, "SIGTERM");
  BOOST_TEST(json_string(resumed, "params_digest") == digest_of(tmp, towers));
}

BOOST_AUTO_TEST_CASE(the_autoencoder_resumes_where_it_stopped) {
  // The sync runtime with its one initial token: not deterministic, so
  // the resume is checked by its step.
  temp_dir tmp;
  stop_and_resume(tmp, bin + "autoencoder_mnist --runtime sync --fake_data "
                           "--fake_train_size 2048 --hidden 64,16 "
                           "--eval_examples 200 --batch_size 32 --seed 3 "
                           "--threads 1 --no_progress --log_every 10 "
                           "--steps " + std::to_string(single_steps)
                           + " --checkpoint_dir " + tmp.file("ckpt"),
                  SIGTERM, "SIGTERM");
}

BOOST_AUTO_TEST_CASE(the_plain_loop_stops_after_its_step_and_says_what_is_lost) {
  temp_dir tmp;
  single_run run{tmp, bin + "convnet_mnist_single --runtime plain"
                        + deterministic + " --steps 100000"};
  auto n = run.start("plain");
  kill_on_exit guard{n};
  await_logged_step(n, 20);
  n.signal(SIGTERM);
  check_exits_preempted(n, std::chrono::seconds{60});
  BOOST_TEST(said(n.output(), "--runtime plain keeps no checkpoints: every "
                              "step of this run is lost"));
  BOOST_TEST(said(n.output(), "(no --checkpoint_dir: nothing to resume)"));
  auto summary = run.summary("plain");
  BOOST_TEST(said(summary, "\"preempted\": \"SIGTERM\""), summary);
  BOOST_TEST(json_numbers(summary, "steps").at(0) >= 20);
  BOOST_TEST(json_numbers(summary, "steps").at(0) < 100000);
}

BOOST_AUTO_TEST_CASE(a_second_signal_exits_at_once_and_no_dir_says_what_is_lost) {
  // Two signals back to back: the second comes while the first's step in
  // flight is still being finished, and ends the process at once. Both
  // may be pending together, and Linux then delivers the lower number
  // (SIGINT) first: either order is the same story.
  temp_dir tmp;
  single_run run{tmp, single_command};
  auto n = run.start("twice");
  kill_on_exit guard{n};
  await_logged_step(n, 20);
  n.signal(SIGTERM);
  n.signal(SIGINT);
  check_exits_preempted(n, std::chrono::seconds{30});
  BOOST_TEST((said(n.output(), "SIGINT again after SIGTERM: exiting at once")
              || said(n.output(),
                      "SIGTERM again after SIGINT: exiting at once")),
             n.output());
  BOOST_TEST(said(n.output(),
                  "no --checkpoint_dir: every step of this run is lost"));
}

namespace {

/// The evaluator's data: 200 fake test images.
const std::string fake_test_set = " --fake_data --fake_test_size 200";

/// chief:0, worker:0, ps:0 and evaluator:0 on loopback.
std::string cluster_with_evaluator(const temp_dir& tmp) {
  return write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1},
                             {"evaluator", 1}});
}

} // namespace

BOOST_AUTO_TEST_CASE(sigterm_to_the_evaluator_ends_the_run_in_order) {
  // A running cluster with the evaluator: SIGTERM to the evaluator once it
  // reported an evaluation. It passes the signal to the chief, which ends
  // the run after its step in flight, checkpointed (--checkpoint_every 0);
  // every process exits 143, the evaluator saying after which evaluation.
  temp_dir tmp;
  auto file = cluster_with_evaluator(tmp);
  auto dir = tmp.file("ckpt");
  auto eval = start_evaluator(tmp, file, 20, 60000, fake_test_set);
  kill_on_exit guard{eval};
  cluster_run run{tmp, file, deterministic + " --steps 100000 "
                               "--checkpoint_every 0 --checkpoint_dir " + dir};
  run.start("eval");
  await_output(eval, "[evaluator:0] global_step: ");
  auto signalled = clock_type::now();
  eval.signal(SIGTERM);
  check_exits_preempted(eval, std::chrono::seconds{120});
  run.require_exits(exit_codes::preempted);
  log_stop_time("SIGTERM to evaluator:0", run.nodes.size() + 1,
                std::max(run.seconds_to_last_exit(signalled),
                         std::chrono::duration<double>(eval.exited_at
                                                       - signalled)
                           .count()));
  BOOST_TEST(said(eval.output(), "SIGTERM: stopping after"));
  BOOST_TEST(said(eval.output(), "evaluator:0: preempted (SIGTERM); told the "
                                 "chief, which ends the run after the global "
                                 "step in flight"));
  BOOST_TEST(said(eval.output(), "syncfac_evaluator: stopped by SIGTERM after "
                                 "the evaluation of global step "));
  check_preempted_by("evaluator:0", run.summary("eval"), dir);
}

BOOST_AUTO_TEST_CASE(the_evaluator_stopped_while_it_connects_exits_preempted) {
  // The evaluator of a cluster whose peers never come: SIGTERM while it
  // waits for them; it ends with the preempted code, saying why.
  temp_dir tmp;
  auto n = start_evaluator(tmp, cluster_with_evaluator(tmp), 20, 8000,
                           fake_test_set);
  kill_on_exit guard{n};
  await_output(n, "waiting for");
  n.signal(SIGTERM);
  check_exits_preempted(n, std::chrono::seconds{60});
  BOOST_TEST(said(n.output(), "SIGTERM: stopping after"));
  BOOST_TEST(said(n.output(), "the evaluator keeps no state of its own"));
  BOOST_TEST(said(n.output(), "ended after SIGTERM before the run could end "
                              "in order; exit code 143"));
}

BOOST_AUTO_TEST_SUITE_END()
