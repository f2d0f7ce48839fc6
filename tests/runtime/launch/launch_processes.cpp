#define BOOST_TEST_MODULE launch_processes
#include <boost/test/unit_test.hpp>

// The launcher with real processes: build/bin/syncfac-launch runs a small
// stand-in node program (fake_node.cpp) for every task of a cluster file.

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ctime>
#include <regex>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/launch/launcher.hpp"

namespace fs = std::filesystem;

namespace {

using namespace std::chrono_literals;

const std::string launcher_path = SYNCFAC_BINARY_DIR "/bin/syncfac-launch";
const std::string fake_node_path = SYNCFAC_BINARY_DIR "/tests/fake_node";

/// A chief, two workers and a PS on ports nobody binds (the fake node
/// does not listen).
const char* cluster_text = R"({"cluster": {
  "chief": ["localhost:47990"],
  "worker": ["localhost:47991", "localhost:47992"],
  "ps": ["localhost:47993"]}})";

std::string slurp(const fs::path& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto pos = text.find(part); pos != std::string::npos;
       pos = text.find(part, pos + 1))
    ++n;
  return n;
}

/// A temporary directory with a cluster file in it.
struct fixture {
  fs::path dir;
  std::string cluster;

  fixture() {
    static int counter = 0;
    dir = fs::temp_directory_path()
          / ("syncfac_launch_" + std::to_string(::getpid()) + "_"
             + std::to_string(++counter));
    fs::remove_all(dir);
    fs::create_directories(dir / "pids");
    cluster = write("cluster.json", cluster_text);
  }

  ~fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream out{dir / name};
    out << text;
    return (dir / name).string();
  }

  std::string pids() const {
    return (dir / "pids").string();
  }

  /// The pids a task wrote (one per start).
  std::vector<pid_t> pids_of(const std::string& file) const {
    std::ifstream in{dir / "pids" / (file + ".pid")};
    std::vector<pid_t> result;
    pid_t p;
    while (in >> p)
      result.push_back(p);
    return result;
  }
};

/// A launcher run: its exit code and output.
struct run_result {
  int status = -1;
  bool timed_out = false;
  std::string out;
  std::string err;

  int code() const {
    if (WIFEXITED(status))
      return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
      return 128 + WTERMSIG(status);
    return -1;
  }
};

std::ostream& operator<<(std::ostream& os, const run_result& r) {
  return os << "exit " << r.code() << (r.timed_out ? " (timed out)" : "")
            << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

/// Checks that the launcher's stderr has every one of `parts`.
void check_err(const run_result& r, const std::vector<std::string>& parts) {
  for (const auto& part : parts)
    BOOST_CHECK_MESSAGE(contains(r.err, part), "no '" << part << "' in\n"
                                                          << r);
}

/// Checks the launcher's exit code and that its stderr has every one of
/// `parts`.
void check_exit(const run_result& r, int code,
                const std::vector<std::string>& parts) {
  BOOST_CHECK_MESSAGE(r.code() == code, r);
  check_err(r, parts);
}

/// Runs `args` (the program first) in place of this process, a child
/// just forked; exits 127 when that fails.
[[noreturn]] void exec_or_exit(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

/// Starts the launcher with `args`, its stdout and stderr in files.
pid_t spawn_launcher(const fixture& fx, const std::vector<std::string>& args) {
  std::vector<std::string> all = {launcher_path};
  all.insert(all.end(), args.begin(), args.end());
  auto out = (fx.dir / "launcher.out").string();
  auto err = (fx.dir / "launcher.err").string();
  auto pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec_or_exit(all);
  }
  return pid;
}

/// Waits at most `limit` for the launcher; kills it (and fails) past that.
run_result wait_launcher(const fixture& fx, pid_t pid,
                         std::chrono::seconds limit = 60s) {
  run_result r;
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto w = ::waitpid(pid, &r.status, WNOHANG);
    if (w == pid)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &r.status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  r.out = slurp(fx.dir / "launcher.out");
  r.err = slurp(fx.dir / "launcher.err");
  return r;
}

run_result launch(const fixture& fx, std::vector<std::string> args,
                  std::chrono::seconds limit = 60s) {
  std::vector<std::string> all = {"--cluster", fx.cluster, "--program",
                                  fake_node_path};
  all.insert(all.end(), args.begin(), args.end());
  auto r = wait_launcher(fx, spawn_launcher(fx, all), limit);
  BOOST_CHECK_MESSAGE(!r.timed_out, "the launcher did not finish: " << r);
  return r;
}

/// A launcher and the pids of its tasks.
struct started_tasks {
  pid_t launcher;
  std::vector<pid_t> tasks;
};

/// Starts the launcher on tasks that idle for a minute and waits (30 s at
/// most) until all four have started.
started_tasks start_idle_tasks(const fixture& fx) {
  auto pid = spawn_launcher(fx, {"--cluster", fx.cluster, "--program",
                                 fake_node_path, "--pid_dir", fx.pids(),
                                 "--steps", "0", "--chief_ms", "60000",
                                 "--worker_ms", "60000"});
  std::vector<pid_t> tasks;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    tasks.clear();
    for (auto file : {"chief-0", "worker-0", "worker-1", "ps-0"})
      for (auto p : fx.pids_of(file))
        tasks.push_back(p);
    if (tasks.size() == 4 || std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(10ms);
  }
  BOOST_REQUIRE_MESSAGE(tasks.size() == 4u,
                        "waited 30 s for the four tasks to start; "
                          << tasks.size() << " did");
  return {pid, tasks};
}

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

} // namespace

BOOST_AUTO_TEST_CASE(collects_prefixed_output_and_returns_the_chiefs_code) {
  fixture fx;
  auto logs = (fx.dir / "logs").string();
  auto r = launch(fx, {"--log_dir", logs, "--steps", "3", "--worker_ms", "0",
                       "--partial", "--exit_code", "3"});
  BOOST_CHECK_MESSAGE(r.code() == 3, r);
  // Every task ran with the launcher's flags and the program's flags.
  for (auto task : {"chief:0", "worker:0", "worker:1", "ps:0"}) {
    auto label = std::string{"["} + task + "] ";
    BOOST_CHECK_MESSAGE(contains(r.out, label + "hello from " + task), r);
    BOOST_CHECK_MESSAGE(contains(r.err, label + "note from " + task
                                          + " on stderr"),
                        r);
    BOOST_CHECK_MESSAGE(contains(r.out, label + "partial line from " + task
                                          + "\n"),
                        r);
  }
  BOOST_CHECK_MESSAGE(
    contains(r.out, "[worker:1] args: --cluster " + fx.cluster
                      + " --job_name worker --task 1 --steps 3 --worker_ms 0 "
                        "--partial --exit_code 3\n"),
    r);
  BOOST_CHECK_MESSAGE(
    contains(r.out, "[chief:0] global_step: 3 | loss: 0.5 | accuracy: 0.8\n"),
    r);
  BOOST_CHECK_MESSAGE(contains(r.err, "syncfac-launch: chief:0 exited with "
                                      "code 3"),
                      r);
  // The per-task logs hold the task's lines without the prefix.
  auto chief_log = slurp(fs::path{logs} / "chief-0.log");
  BOOST_CHECK_MESSAGE(contains(chief_log, "\nglobal_step: 2 | loss"),
                      chief_log);
  BOOST_CHECK_MESSAGE(contains(chief_log, "note from chief:0 on stderr\n"),
                      chief_log);
  BOOST_CHECK(!contains(chief_log, "[chief:0]"));
  auto ps_log = slurp(fs::path{logs} / "ps-0.log");
  BOOST_CHECK_MESSAGE(contains(ps_log, "hello from ps:0"), ps_log);
  BOOST_CHECK(fs::exists(fs::path{logs} / "worker-0.log"));
  BOOST_CHECK(fs::exists(fs::path{logs} / "worker-1.log"));
}

BOOST_AUTO_TEST_CASE(a_job_can_run_its_own_program_with_its_own_flags) {
  // E.g. an evaluator written outside the library: /bin/echo stands in and
  // shows the arguments it was given.
  fixture fx;
  auto r = launch(fx, {"--job_program", "ps=/bin/echo", "--job_flags",
                       "ps=--eval_every 5", "--steps", "2", "--worker_ms",
                       "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(contains(r.out, "[ps:0] --cluster " + fx.cluster
                                        + " --job_name ps --task 0"
                                          " --eval_every 5\n"),
                      r);
  BOOST_CHECK_MESSAGE(
    contains(r.out, "[worker:0] args: --cluster " + fx.cluster
                      + " --job_name worker --task 0 --steps 2 "
                        "--worker_ms 0\n"),
    r);
}

BOOST_AUTO_TEST_CASE(a_job_program_for_an_unknown_job_is_refused) {
  fixture fx;
  auto r = launch(fx, {"--job_program", "evaluator=/bin/echo"});
  check_exit(r, 2, {"no job \"evaluator\" in the cluster"});
}

BOOST_AUTO_TEST_CASE(chief_exit_code_zero) {
  fixture fx;
  auto r = launch(fx, {"--steps", "2", "--worker_ms", "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(!contains(r.err, "SIGTERM"), r);
}

BOOST_AUTO_TEST_CASE(a_failing_worker_is_reported_and_the_chief_decides) {
  fixture fx;
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--fail", "worker:1=5",
                       "--steps", "3", "--worker_ms", "200"});
  check_exit(r, 0, {"worker:1 exited with code 5 before the chief"});
  BOOST_CHECK_MESSAGE(contains(r.out, "[chief:0] global_step: 3"), r);
}

BOOST_AUTO_TEST_CASE(the_report_has_every_tasks_exit_code_and_last_word) {
  // run_launcher in this process, as syncfac.launch calls it
  // (python/python_launch.cpp): without taking the signals, and with the
  // report of how every task ended.
  fixture fx;
  syncfac::launch_options opts;
  opts.cluster_file = fx.cluster;
  opts.program = fake_node_path;
  opts.take_signals = false;
  opts.program_args = {"--fail", "worker:1=5", "--steps", "3",
                       "--worker_ms", "200", "--exit_code", "4",
                       "--checkpoint_every", "2"};
  auto spec = syncfac::cluster_spec::load(fx.cluster);
  BOOST_REQUIRE(spec);
  std::ostringstream out;
  std::ostringstream err;
  syncfac::launch_report report;
  auto code = syncfac::run_launcher(opts, *spec, out, err, &report);
  BOOST_TEST(code == 4);
  std::vector<std::string> tasks;
  for (const auto& t : report.tasks)
    tasks.push_back(t.task.str() + " " + std::to_string(t.exit_code) + " "
                    + t.status + " | " + t.last_error_line);
  std::vector<std::string> expected = {
    "chief:0 4 exited with code 4 | note from chief:0 on stderr",
    "worker:0 0 exited with code 0 | note from worker:0 on stderr",
    "worker:1 5 exited with code 5 | note from worker:1 on stderr",
    "ps:0 0 exited with code 0 | note from ps:0 on stderr"};
  BOOST_TEST(tasks == expected, boost::test_tools::per_element());
  for (const auto& t : report.tasks)
    BOOST_TEST(t.starts == 1);
  BOOST_TEST(report.forwarded_signal == 0);
  // The chief's last progress record: step 3, the checkpoint of step 2.
  BOOST_TEST(report.chief_step == 3);
  BOOST_TEST(report.resume_step == 2);
  BOOST_TEST(contains(out.str(), "[chief:0] global_step: 3"), out.str());
  BOOST_TEST(contains(err.str(), "worker:1 exited with code 5"), err.str());
  // Python's handler stays: no signal was taken.
  struct sigaction now;
  ::sigaction(SIGINT, nullptr, &now);
  BOOST_TEST((now.sa_handler == SIG_DFL));
}

BOOST_AUTO_TEST_CASE(a_chief_killed_by_a_signal_gives_128_plus_the_signal) {
  fixture fx;
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--kill", "chief:0@2",
                       "--steps", "200", "--step_ms", "20", "--worker_ms",
                       "100", "--grace_ms", "2000"});
  check_exit(r, 128 + SIGKILL, {"chief:0 killed by SIGKILL (--kill)"});
}

BOOST_AUTO_TEST_CASE(stragglers_get_sigterm_after_the_grace_period) {
  fixture fx;
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--steps", "2", "--worker_ms",
                       "60000", "--grace_ms", "300"});
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  for (auto task : {"worker:0", "worker:1", "ps:0"}) {
    BOOST_CHECK_MESSAGE(contains(r.err, std::string{task}
                                          + " still running 300 ms after the "
                                            "chief exited: sending SIGTERM"),
                        r);
    BOOST_CHECK_MESSAGE(contains(r.err, std::string{task}
                                          + " killed by SIGTERM"),
                        r);
  }
  BOOST_CHECK_MESSAGE(!contains(r.err, "SIGKILL"), r);
  BOOST_CHECK(took < 30s);
  for (auto file : {"worker-0", "worker-1", "ps-0"})
    for (auto pid : fx.pids_of(file))
      BOOST_CHECK_MESSAGE(!alive(pid), file << " pid " << pid << " alive");
}

BOOST_AUTO_TEST_CASE(stragglers_ignoring_sigterm_get_sigkill) {
  fixture fx;
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--steps", "1", "--worker_ms",
                       "60000", "--ignore_term", "--grace_ms", "200",
                       "--term_ms", "300"});
  check_exit(r, 0, {"worker:0 did not exit 300 ms after "
                    "SIGTERM: sending SIGKILL"});
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGKILL") == 3, r);
  for (auto file : {"worker-0", "worker-1", "ps-0"})
    for (auto pid : fx.pids_of(file))
      BOOST_CHECK_MESSAGE(!alive(pid), file << " pid " << pid << " alive");
}

BOOST_AUTO_TEST_CASE(kill_at_a_step_sends_the_signal) {
  fixture fx;
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--kill", "worker:1@3",
                       "--steps", "10", "--worker_ms", "60000", "--grace_ms",
                       "200"});
  check_exit(r, 0, {"worker:1 gets SIGKILL at global_step 3 "
                    "(--kill worker:1@3:KILL)",
                    "worker:1 killed by SIGKILL (--kill)"});
  // ... and only that task; the others end after the chief.
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGKILL") == 1, r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGTERM") == 2, r);
}

BOOST_AUTO_TEST_CASE(kill_with_term_and_stop) {
  fixture fx;
  // worker:0 gets SIGTERM at step 2; ps:0 is stopped at step 3 and, once
  // the chief is done, terminated (SIGTERM and SIGCONT) after the grace.
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--kill", "worker:0@2:TERM",
                       "--kill", "ps:0@3:STOP", "--steps", "6",
                       "--worker_ms", "60000", "--grace_ms", "300"});
  check_exit(r, 0, {"worker:0 killed by SIGTERM (--kill)",
                    "ps:0 gets SIGSTOP at global_step 3",
                    "ps:0 still running 300 ms after the chief exited: "
                    "sending SIGTERM",
                    "ps:0 killed by SIGTERM"});
}

BOOST_AUTO_TEST_CASE(kill_for_a_task_that_is_gone_is_skipped) {
  fixture fx;
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--fail", "ps:0=0", "--kill",
                       "ps:0@4", "--steps", "6", "--worker_ms", "0"});
  check_exit(r, 0, {"--kill ps:0@4:KILL: ps:0 is not running; skipped"});
}

BOOST_AUTO_TEST_CASE(restart_starts_a_dead_task_again) {
  fixture fx;
  // worker:1 is killed at step 2 and restarted 100 ms later; the chief
  // waits until it has started twice.
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--kill", "worker:1@2",
                       "--restart", "worker:1@100", "--steps", "3",
                       "--wait_starts", "worker:1=2", "--worker_ms",
                       "60000", "--grace_ms", "200"});
  check_exit(r, 0, {"worker:1 killed by SIGKILL (--kill)",
                    "worker:1 restarts in 100 ms (--restart worker:1@100)",
                    "worker:1 restarted (pid "});
  BOOST_CHECK_MESSAGE(contains(r.out, "[chief:0] worker:1 started 2 times"), r);
  BOOST_CHECK_MESSAGE(count_of(r.out, "[worker:1] hello from worker:1") == 2,
                      r);
  auto pids = fx.pids_of("worker-1");
  BOOST_REQUIRE_EQUAL(pids.size(), 2u);
  BOOST_CHECK_NE(pids[0], pids[1]);
  for (auto pid : pids)
    BOOST_CHECK(!alive(pid));
}

BOOST_AUTO_TEST_CASE(restart_is_used_once_per_flag) {
  fixture fx;
  // worker:0 exits at once every time: one restart, then it stays down.
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--fail", "worker:0=4",
                       "--restart", "worker:0@50", "--steps", "3",
                       "--wait_starts", "worker:0=2", "--chief_ms", "300",
                       "--worker_ms", "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "worker:0 exited with code 4") == 2, r);
  BOOST_CHECK_EQUAL(fx.pids_of("worker-0").size(), 2u);
}

BOOST_AUTO_TEST_CASE(a_bad_cluster_file_is_refused_before_anything_starts) {
  fixture fx;
  auto bad = fx.write("bad.json", R"({"cluster": {"chief": ["localhost:1"],
    "worker": ["localhost:47001", "localhost:99999"]}})");
  auto r = wait_launcher(fx, spawn_launcher(fx, {"--cluster", bad,
                                                 "--program",
                                                 fake_node_path}),
                         30s);
  BOOST_CHECK_MESSAGE(r.code() == 2, r);
  BOOST_CHECK_MESSAGE(contains(r.err, "cluster file '" + bad
                                        + "': cluster.worker[1] "
                                          "\"localhost:99999\": port out of "
                                          "range (1..65535)"),
                      r);
  BOOST_CHECK_MESSAGE(!contains(r.err, "started"), r);
  r = wait_launcher(fx, spawn_launcher(fx, {"--cluster",
                                            (fx.dir / "none.json").string()}),
                    30s);
  check_exit(r, 2, {"cannot be read"});
  r = wait_launcher(fx, spawn_launcher(fx, {"--cluster", fx.cluster, "--kill",
                                            "worker:7@1"}),
                    30s);
  check_exit(r, 2, {"no task worker:7 in the cluster"});
  r = wait_launcher(fx, spawn_launcher(fx, {"--steps", "3"}), 30s);
  check_exit(r, 2, {"--cluster FILE is required"});
}

BOOST_AUTO_TEST_CASE(a_missing_program_exits_127) {
  fixture fx;
  auto r = wait_launcher(fx, spawn_launcher(fx, {"--cluster", fx.cluster,
                                                 "--program",
                                                 "/nonexistent/node"}),
                         30s);
  check_exit(r, 127, {"'/nonexistent/node': not an executable file"});
}

BOOST_AUTO_TEST_CASE(sigterm_to_the_launcher_reaches_every_task) {
  fixture fx;
  auto [pid, tasks] = start_idle_tasks(fx);
  ::kill(pid, SIGTERM);
  auto r = wait_launcher(fx, pid, 30s);
  BOOST_CHECK_MESSAGE(!r.timed_out, r);
  check_exit(r, 128 + SIGTERM, {"got SIGTERM: forwarding it to every task"});
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGTERM") == 4, r);
  for (auto p : tasks)
    BOOST_CHECK_MESSAGE(!alive(p), "pid " << p << " alive");
}

BOOST_AUTO_TEST_CASE(sigint_is_forwarded_too) {
  fixture fx;
  auto pid = start_idle_tasks(fx).launcher;
  ::kill(pid, SIGINT);
  auto r = wait_launcher(fx, pid, 30s);
  BOOST_CHECK_MESSAGE(r.code() == 128 + SIGINT, r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGINT") == 4, r);
}

BOOST_AUTO_TEST_CASE(max_wall_s_stops_everything) {
  fixture fx;
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch(fx, {"--pid_dir", fx.pids(), "--steps", "0", "--chief_ms",
                       "60000", "--worker_ms", "60000", "--max_wall_s", "1"});
  auto took = std::chrono::steady_clock::now() - t0;
  check_exit(r, 124, {"--max_wall_s 1 reached: stopping every task"});
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGTERM") == 4, r);
  BOOST_CHECK(took < 30s);
}

// -- the launcher's output: timestamps, records, the progress line -----------

BOOST_AUTO_TEST_CASE(every_prefixed_line_has_an_iso_8601_utc_timestamp) {
  fixture fx;
  auto before = std::chrono::system_clock::now();
  auto r = launch(fx, {"--steps", "3", "--worker_ms", "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  const std::regex stamped{
    R"(^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.\d{3}Z (\[\w+:\d\] |syncfac-launch: ))"};
  int lines = 0;
  for (const auto* text : {&r.out, &r.err}) {
    std::istringstream in{*text};
    for (std::string line; std::getline(in, line); ++lines) {
      std::smatch m;
      BOOST_REQUIRE_MESSAGE(std::regex_search(line, m, stamped),
                            "no timestamp: '" << line << "'\n" << r);
      // UTC and now: the date of the run, as gmtime gives it.
      std::tm parts{};
      auto secs = std::chrono::system_clock::to_time_t(before);
      ::gmtime_r(&secs, &parts);
      BOOST_CHECK_EQUAL(std::stoi(m[1]), parts.tm_year + 1900);
      BOOST_CHECK_EQUAL(std::stoi(m[2]), parts.tm_mon + 1);
    }
  }
  BOOST_CHECK_MESSAGE(lines >= 12, r); // 4 tasks x 3 lines, and reports
  // The hour is UTC's, not local time's: compare with gmtime at the end.
  auto secs = std::chrono::system_clock::to_time_t(
    std::chrono::system_clock::now());
  std::tm parts{};
  ::gmtime_r(&secs, &parts);
  char hour[8];
  std::snprintf(hour, sizeof(hour), "T%02d:", parts.tm_hour);
  BOOST_CHECK_MESSAGE(contains(r.err, hour), "no " << hour << " in\n" << r);
}

BOOST_AUTO_TEST_CASE(no_log_timestamps_gives_the_bare_prefixed_lines) {
  fixture fx;
  auto r = launch(fx, {"--no_log_timestamps", "--steps", "3", "--worker_ms",
                       "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(r.out.rfind("[", 0) == 0, r);
  BOOST_CHECK_MESSAGE(contains(r.out, "\n[chief:0] global_step: 3 | loss"),
                      r);
  BOOST_CHECK_MESSAGE(r.err.rfind("syncfac-launch: starting", 0) == 0, r);
}

BOOST_AUTO_TEST_CASE(kill_hooks_follow_the_progress_records_not_the_log) {
  // The chief logs "global_step: N" but writes no records: the launcher no
  // longer reads steps from log text, so the hook never fires.
  fixture fx;
  auto r = launch(fx, {"--no_records", "--kill", "worker:1@3", "--steps", "6",
                       "--worker_ms", "60000", "--grace_ms", "200"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(contains(r.out, "[chief:0] global_step: 6"), r);
  BOOST_CHECK_MESSAGE(!contains(r.err, "gets SIGKILL"), r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGTERM") == 3, r);
}

BOOST_AUTO_TEST_CASE(no_progress_line_when_stdout_is_not_a_terminal) {
  fixture fx;
  auto r = launch(fx, {"--steps", "20", "--step_ms", "20", "--worker_ms",
                       "0"});
  BOOST_CHECK_MESSAGE(r.code() == 0, r);
  BOOST_CHECK_MESSAGE(!contains(r.out, "\033[K"), r);
  BOOST_CHECK_MESSAGE(!contains(r.out, "steps/s"), r);
}

BOOST_AUTO_TEST_CASE(a_terminal_shows_the_progress_line) {
  // The launcher's stdout and stderr on a real pseudo-terminal.
  fixture fx;
  std::vector<std::string> all = {launcher_path, "--cluster", fx.cluster,
                                  "--program",   fake_node_path,
                                  "--steps",     "60",
                                  "--step_ms",   "25",
                                  "--worker_ms", "0"};
  int master = -1;
  auto pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    exec_or_exit(all);
  }
  std::string screen;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  int status = 0;
  bool exited = false;
  for (;;) {
    pollfd pfd{master, POLLIN, 0};
    if (::poll(&pfd, 1, 100) > 0) {
      char buf[4096];
      auto n = ::read(master, buf, sizeof(buf));
      if (n > 0) {
        screen.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (exited || n < 0) // EIO once the launcher closed its side
        break;
    }
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid)
      exited = true;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  if (!exited)
    ::waitpid(pid, &status, 0);
  ::close(master);
  BOOST_TEST_MESSAGE("terminal:\n" << screen);
  BOOST_CHECK_MESSAGE(WIFEXITED(status) && WEXITSTATUS(status) == 0, screen);
  // Redrawn in place: erase the line, then the chief's step, rate and ETA.
  const std::regex drawn{
    R"(\r\x1b\[K\[chief:0\] global_step (\d+)/60 \(\d+%\) \| ([0-9.]+) steps/s \| ETA (\d+ s|\d+ min \d\d s))"};
  int with_rate = 0;
  int last_step = 0;
  for (std::sregex_iterator it{screen.begin(), screen.end(), drawn}, end;
       it != end; ++it) {
    ++with_rate;
    auto step = std::stoi((*it)[1]);
    BOOST_CHECK_GE(step, last_step);
    last_step = step;
    BOOST_CHECK_GT(std::stod((*it)[2]), 0.0);
  }
  BOOST_CHECK_MESSAGE(with_rate >= 2, "progress lines with a rate: "
                                        << with_rate << "\n" << screen);
  // Log lines still come whole, each on a line of its own after the
  // progress line was erased.
  BOOST_CHECK_MESSAGE(
    contains(screen, "\r\x1b[K") && contains(screen, "[chief:0] global_step: 60"),
    screen);
}

// -- preemption: a signal to the launcher -------------------------------------

/// Waits until `out` of the launcher has `n` lines containing `part`.
bool wait_for_lines(const fixture& fx, const std::string& part, int n,
                    std::chrono::seconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (count_of(slurp(fx.dir / "launcher.out"), part) < n) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

BOOST_AUTO_TEST_CASE(sigterm_is_forwarded_once_and_the_requeue_code_returned) {
  fixture fx;
  auto pid = spawn_launcher(fx, {"--cluster", fx.cluster, "--program",
                                 fake_node_path, "--steps", "100000",
                                 "--step_ms", "20", "--worker_ms", "600000",
                                 "--on_stop_exit", "143", "--stop_ms", "300",
                                 "--grace_ms", "30000"});
  // Training is under way: the chief's records have come.
  BOOST_REQUIRE_MESSAGE(wait_for_lines(fx, "[chief:0] global_step: ", 5),
                        slurp(fx.dir / "launcher.out"));
  ::kill(pid, SIGTERM);
  auto r = wait_launcher(fx, pid, 60s);
  BOOST_CHECK_MESSAGE(!r.timed_out, r);
  BOOST_CHECK_MESSAGE(r.code() == 143, r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "got SIGTERM: forwarding it to every "
                                      "task") == 1,
                      r);
  for (auto task : {"chief:0", "worker:0", "worker:1", "ps:0"}) {
    BOOST_CHECK_MESSAGE(contains(r.out, std::string{task} + " got SIGTERM"), r);
    // Once: the launcher's own SIGTERM after the chief exited never came.
    BOOST_CHECK_MESSAGE(
      contains(r.out, std::string{task} + " received 1 stop signals"), r);
    BOOST_CHECK_MESSAGE(
      contains(r.err, std::string{task} + " exited with code 143"), r);
  }
  BOOST_CHECK_MESSAGE(contains(r.err, "chief:0 exited with 143 (preempted) "
                                      "after the forwarded signal: the run "
                                      "can be requeued"),
                      r);
  // Its records named no checkpoint: the message does not promise one.
  BOOST_CHECK_MESSAGE(contains(r.err, "but chief:0 reported no checkpoint "
                                      "(none written or restored; is "
                                      "--checkpoint_dir set?): a requeued run "
                                      "starts again at global step 0"),
                      r);
  BOOST_CHECK_MESSAGE(!contains(r.err, "SIGKILL"), r);
}

BOOST_AUTO_TEST_CASE(sigint_is_forwarded_as_sigint) {
  fixture fx;
  // Its records say a checkpoint of every 1000th step was written: by
  // step 1000 the message names that one.
  auto pid = spawn_launcher(fx, {"--cluster", fx.cluster, "--program",
                                 fake_node_path, "--steps", "100000",
                                 "--step_ms", "1", "--worker_ms", "600000",
                                 "--on_stop_exit", "143",
                                 "--checkpoint_every", "1000"});
  BOOST_REQUIRE(wait_for_lines(fx, "[chief:0] global_step: 1000 ", 1, 120s));
  ::kill(pid, SIGINT);
  auto r = wait_launcher(fx, pid, 60s);
  BOOST_CHECK_MESSAGE(r.code() == 143, r);
  BOOST_CHECK_MESSAGE(contains(r.err, "the run can be requeued with the same "
                                      "flags, which resume at global step "),
                      r);
  BOOST_CHECK_MESSAGE(contains(r.err, "000 (the newest checkpoint chief:0 "
                                      "reported)"),
                      r);
  BOOST_CHECK_MESSAGE(count_of(r.out, " got SIGINT") == 4, r);
  BOOST_CHECK_MESSAGE(count_of(r.out, " received 1 stop signals") == 4, r);
}

BOOST_AUTO_TEST_CASE(sighup_and_sigusr1_are_forwarded_as_sigterm) {
  // A closed terminal's SIGHUP and a site's requeue signal reach every
  // task as the stop signal they all handle.
  for (int sig : {SIGHUP, SIGUSR1}) {
    BOOST_TEST_CONTEXT("signal " << sig) {
      fixture fx;
      auto pid = spawn_launcher(fx, {"--cluster", fx.cluster, "--program",
                                     fake_node_path, "--steps", "100000",
                                     "--step_ms", "20", "--worker_ms",
                                     "600000", "--on_stop_exit", "143"});
      BOOST_REQUIRE(wait_for_lines(fx, "[chief:0] global_step: ", 3));
      ::kill(pid, sig);
      auto r = wait_launcher(fx, pid, 60s);
      BOOST_CHECK_MESSAGE(r.code() == 143, r);
      auto name = sig == SIGHUP ? "SIGHUP" : "SIGUSR1";
      BOOST_CHECK_MESSAGE(contains(r.err, std::string{"got "} + name
                                            + ": forwarding SIGTERM to every "
                                              "task"),
                          r);
      BOOST_CHECK_MESSAGE(count_of(r.out, " got SIGTERM") == 4, r);
      BOOST_CHECK_MESSAGE(count_of(r.out, " received 1 stop signals") == 4, r);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_second_signal_kills_every_task_at_once) {
  fixture fx;
  // The tasks take 10 minutes to stop, the grace is 10 minutes: only the
  // second signal can end this run soon.
  auto pid = spawn_launcher(fx, {"--cluster", fx.cluster, "--program",
                                 fake_node_path, "--steps", "100000",
                                 "--step_ms", "20", "--worker_ms", "600000",
                                 "--on_stop_exit", "143", "--stop_ms",
                                 "600000", "--grace_ms", "600000"});
  BOOST_REQUIRE(wait_for_lines(fx, "[chief:0] global_step: ", 3));
  ::kill(pid, SIGTERM);
  BOOST_REQUIRE_MESSAGE(wait_for_lines(fx, " got SIGTERM", 4),
                        slurp(fx.dir / "launcher.out"));
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  auto r = wait_launcher(fx, pid, 120s);
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_CHECK_MESSAGE(!r.timed_out, r);
  BOOST_CHECK_MESSAGE(took < 60s, r);
  BOOST_CHECK_MESSAGE(contains(r.err, "got SIGTERM again: killing every task"),
                      r);
  BOOST_CHECK_MESSAGE(count_of(r.err, "killed by SIGKILL") == 4, r);
  BOOST_CHECK_MESSAGE(r.code() == 128 + SIGKILL, r);
  BOOST_CHECK_MESSAGE(!contains(r.err, "(preempted)"), r);
}
