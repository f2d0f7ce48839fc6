#define BOOST_TEST_MODULE examples_cpu_share
#include <boost/test/unit_test.hpp>

// The CPU share a real program was given (runtime/cpu_share.hpp), through
// convnet_mnist_single: under `taskset -c 0` one compute thread and one
// CAF scheduler thread, fewer threads in /proc/PID/task than with more
// asked for; SLURM_CPUS_PER_TASK and OMP_NUM_THREADS narrow it; --threads
// wins over all; under a cgroup limit of one CPU (v2 cpu.max or v1
// cpu.cfs_quota_us, whichever the machine has) one compute thread. The summary's
// "threads", "threads_source" and "caf_threads" and the first log line say
// where the number came from.

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/examples/process.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

const std::string short_run
  = " --fake_data --fake_train_size 512 --fake_test_size 100 --runtime plain"
    " --steps 4 --batch_size 16 --no_final_eval --no_progress";

/// This process's CPUs (its affinity mask).
int my_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  ::sched_getaffinity(0, sizeof set, &set);
  return CPU_COUNT(&set);
}

/// The source a budget of one CPU from `source` is named by: on a machine
/// that gives this process one CPU anyway the affinity mask says it first.
std::string one_cpu_source(const std::string& source) {
  return my_cpus() == 1 ? "affinity" : source;
}

/// A finished run: its output and summary.
struct finished_run {
  std::string output;
  std::string summary;
};

/// Runs `prefix single short_run more --summary FILE suffix`, which must
/// succeed.
finished_run run_with(const temp_dir& tmp, const std::string& prefix,
                      const std::string& more,
                      const std::string& suffix = "") {
  auto summary = tmp.file("summary.json");
  std::filesystem::remove(summary);
  auto res = run_ok(prefix + single + short_run + more + " --summary "
                    + summary + suffix);
  return {res.output, read_file(summary)};
}

/// The run's summary says `threads` compute threads from `source` and
/// `caf` scheduler threads, and its first line says so.
void check_threads(const finished_run& run, int threads,
                   const std::string& source, int caf) {
  BOOST_TEST(number(run.summary, "threads") == threads, run.summary);
  BOOST_TEST(json_string(run.summary, "threads_source") == source,
             run.summary);
  BOOST_TEST(number(run.summary, "caf_threads") == caf, run.summary);
  auto first = run.output.substr(0, run.output.find('\n'));
  auto want = std::to_string(threads) + " compute thread"
              + (threads == 1 ? "" : "s") + " ("
              + (source == "--threads" ? source : source + ": ");
  BOOST_TEST(first.rfind("convnet_mnist_single: " + want, 0) == 0,
             "first line: " << first);
}

/// The threads of a running `command` (in /proc/PID/task) once it trains:
/// started, awaited until it logged a step, counted, killed.
int threads_while_training(const temp_dir& tmp, const std::string& command) {
  static int round = 0;
  auto log = tmp.file("count-" + std::to_string(++round) + ".log");
  auto pid = ::fork();
  if (pid == 0) {
    auto line = "exec " + command + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  BOOST_REQUIRE(pid > 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{120};
  while (read_file(log).find("global_step: ") == std::string::npos) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      BOOST_FAIL("ended before its first step:\n" << read_file(log));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      BOOST_FAIL("no step within 120 s:\n" << read_file(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  int count = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator{
         "/proc/" + std::to_string(pid) + "/task"})
    ++count;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return count;
}

/// A cgroup of this test's own limited to one CPU: in cgroup v2 where the
/// cpu controller is enabled for children (cpu.max "100000 100000"), else
/// in v1's cpu hierarchy (cpu.cfs_quota_us 100000 of a 100000 period), as
/// a pod's CPU limit is on either kind of node; removed at the end.
struct one_cpu_cgroup {
  std::string dir;
  /// The limit's file, as the program names its source.
  std::string file;

  /// Empty when it was made, else why neither kind could be.
  std::string make() {
    std::string why;
    for (std::string r : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      if (!std::filesystem::exists(r + "/cgroup.controllers"))
        continue;
      if (read_file(r + "/cgroup.subtree_control").find("cpu")
          == std::string::npos) {
        why = "cgroup v2 at " + r + " has no cpu controller for children";
        break;
      }
      if (auto err = make_in(r, "cpu.max", "100000 100000\n"); err.empty())
        return {};
      else
        why = err;
      break;
    }
    for (std::string r : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      if (!std::filesystem::exists(r + "/cpu.cfs_quota_us"))
        continue;
      auto err = make_in(r, "cpu.cfs_quota_us", "100000\n");
      if (err.empty())
        return {};
      return why + (why.empty() ? "" : "; ") + err;
    }
    return why.empty() ? "no cgroup hierarchy with a cpu controller under "
                         "/sys/fs/cgroup"
                       : why + "; no cgroup v1 cpu hierarchy";
  }

  ~one_cpu_cgroup() {
    if (!dir.empty())
      ::rmdir(dir.c_str());
  }

private:
  /// A child of `root` whose `limit_file` says `limit`.
  std::string make_in(const std::string& root, const std::string& limit_file,
                      const std::string& limit) {
    auto d = root + "/syncfac-cpu-share-" + std::to_string(::getpid());
    std::error_code ec;
    if (!std::filesystem::create_directory(d, ec))
      return "cannot make " + d + ": " + ec.message();
    dir = d;
    std::ofstream out{dir + "/" + limit_file};
    out << limit;
    if (!out.flush())
      return "cannot write " + dir + "/" + limit_file;
    file = limit_file;
    return {};
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(under_taskset_one_cpu_gets_one_compute_thread) {
  temp_dir tmp;
  check_threads(run_with(tmp, "taskset -c 0 ", ""), 1, "affinity", 1);
}

BOOST_AUTO_TEST_CASE(under_taskset_the_process_runs_fewer_threads) {
  // /proc/PID/task of a run under taskset -c 0 against one asked for 4
  // compute and 4 scheduler threads: at least 6 fewer (the device's pool
  // and CAF's scheduler are started with the system).
  temp_dir tmp;
  auto longer = single + " --fake_data --runtime plain --steps 100000"
                          " --batch_size 16 --no_progress --log_every 1";
  auto narrow = threads_while_training(tmp, "taskset -c 0 " + longer);
  auto wide = threads_while_training(
    tmp, "taskset -c 0 " + longer + " --threads 4 --caf_threads 4");
  BOOST_TEST_MESSAGE("threads: taskset -c 0: " << narrow
                     << "; --threads 4 --caf_threads 4: " << wide);
  BOOST_TEST(narrow + 6 <= wide, narrow << " vs " << wide);
}

BOOST_AUTO_TEST_CASE(slurm_and_openmp_narrow_the_share) {
  temp_dir tmp;
  check_threads(run_with(tmp, "SLURM_CPUS_PER_TASK=1 ", ""), 1,
                one_cpu_source("SLURM_CPUS_PER_TASK"), 1);
  check_threads(run_with(tmp, "OMP_NUM_THREADS=1 ", ""), 1,
                one_cpu_source("OMP_NUM_THREADS"), 1);
  // A value that is no count is ignored, and said so.
  auto bad = run_with(tmp, "OMP_NUM_THREADS=lots taskset -c 0 ", "");
  BOOST_TEST(said(bad.output, "ignored: OMP_NUM_THREADS='lots' is not a "
                              "positive integer"),
             bad.output);
}

BOOST_AUTO_TEST_CASE(explicit_threads_win_over_all) {
  temp_dir tmp;
  check_threads(run_with(tmp, "SLURM_CPUS_PER_TASK=1 taskset -c 0 ",
                         " --threads 3 --caf_threads 2"),
                3, "--threads", 2);
}

BOOST_AUTO_TEST_CASE(a_cgroup_limit_of_one_cpu_gets_one_compute_thread) {
  // As root (scripts/test.sh runs as root) the test makes a cgroup of
  // whichever kind the machine has; it fails, saying why, where it cannot.
  temp_dir tmp;
  one_cpu_cgroup cg;
  auto why = cg.make();
  BOOST_REQUIRE_MESSAGE(why.empty(), "cannot make a cgroup limited to one "
                                     "CPU: " << why);
  // The shell moves itself into the cgroup, then becomes the program.
  auto run = run_with(tmp,
                      "sh -c 'echo $$ > " + cg.dir + "/cgroup.procs && exec ",
                      "", "'");
  check_threads(run, 1, one_cpu_source("cgroup " + cg.file), 1);
}
