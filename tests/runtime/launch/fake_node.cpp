// A stand-in for the node program in the launcher's tests. It takes what
// the launcher gives every task (--cluster FILE --job_name JOB --task I)
// and behaves as its flags say:
//
//   --pid_dir D           append this process's pid to D/job-index.pid once
//                         set up; the chief waits (at most 30 s) until every
//                         task of the cluster has written its file
//   --steps N             the chief logs "global_step: i | loss: ..." for
//                         i = 1..N, --step_ms apart (default 20), and
//                         writes each step's progress record where
//                         SYNCFAC_PROGRESS_FD says (as the real chief)
//   --no_records          ... but no progress records (log text only)
//   --checkpoint_every K  the records say a checkpoint of every K-th step
//                         was written (default 0: none)
//   --wait_starts J:I=N   the chief then waits (at most 30 s) until
//                         D/J-I.pid has N lines (that task started N times)
//   --chief_ms M          the chief then sleeps M ms (default 0)
//   --exit_code C         the chief's exit code (default 0)
//   --worker_ms M         the other tasks run M ms, then exit (default 60000)
//   --worker_exit_code C  ... with this code (default 0)
//   --fail J:I=C          that task exits with code C right after start-up
//   --ignore_term         the other tasks ignore SIGTERM
//   --partial             every task ends its output with a line without '\n'
//   --on_stop_exit C      every task catches SIGTERM and SIGINT, prints
//                         "JOB:I got SIGNAL", and exits with code C
//                         --stop_ms later (default 200; as a node finishing
//                         its step on preemption); at exit it prints "JOB:I
//                         received N stop signals"
//   --stop_ms M           see --on_stop_exit
//
// Every task first prints "hello from JOB:I pid P" and "args: ..." on stdout
// and "note from JOB:I on stderr" on stderr.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/base/error.hpp"
#include "runtime/progress_record.hpp"

namespace {

using namespace std::chrono_literals;

struct flags {
  std::string cluster;
  std::string job;
  int task = -1;
  std::string pid_dir;
  int steps = 0;
  int step_ms = 20;
  std::string wait_starts;
  int chief_ms = 0;
  int exit_code = 0;
  int worker_ms = 60000;
  int worker_exit_code = 0;
  std::vector<std::string> fail;
  bool ignore_term = false;
  bool partial = false;
  bool records = true;
  int checkpoint_every = 0;
  int on_stop_exit = -1;
  int stop_ms = 200;
};

/// The flags that take a whole number, and the field each sets.
const std::map<std::string, int flags::*> number_flags{
  {"--task", &flags::task},
  {"--steps", &flags::steps},
  {"--step_ms", &flags::step_ms},
  {"--checkpoint_every", &flags::checkpoint_every},
  {"--chief_ms", &flags::chief_ms},
  {"--exit_code", &flags::exit_code},
  {"--worker_ms", &flags::worker_ms},
  {"--worker_exit_code", &flags::worker_exit_code},
  {"--on_stop_exit", &flags::on_stop_exit},
  {"--stop_ms", &flags::stop_ms},
};

/// The flags that take a text, and the field each sets.
const std::map<std::string, std::string flags::*> text_flags{
  {"--cluster", &flags::cluster},
  {"--job_name", &flags::job},
  {"--pid_dir", &flags::pid_dir},
  {"--wait_starts", &flags::wait_starts},
};

/// The stop signals received (--on_stop_exit) and the last one.
volatile std::sig_atomic_t stop_signals = 0;
volatile std::sig_atomic_t last_stop_signal = 0;

extern "C" void on_stop(int sig) {
  stop_signals = stop_signals + 1;
  last_stop_signal = sig;
}

std::string pid_file(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".pid";
}

int lines_in(const std::string& path) {
  std::ifstream in{path};
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    if (!line.empty())
      ++n;
  return n;
}

/// Waits at most 30 s until `ready()`.
template <class F>
bool wait_for(F ready) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  flags f;
  std::string all_args;
  for (int i = 1; i < argc; ++i)
    all_args += (i > 1 ? " " : "") + std::string{argv[i]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "fake_node: " << a << " needs a value\n";
        std::exit(64);
      }
      return argv[++i];
    };
    if (auto number = number_flags.find(a); number != number_flags.end())
      f.*(number->second) = std::stoi(next());
    else if (auto text = text_flags.find(a); text != text_flags.end())
      f.*(text->second) = next();
    else if (a == "--fail")
      f.fail.push_back(next());
    else if (a == "--ignore_term")
      f.ignore_term = true;
    else if (a == "--partial")
      f.partial = true;
    else if (a == "--no_records")
      f.records = false;
    else {
      std::cerr << "fake_node: unknown flag " << a << "\n";
      return 64;
    }
  }
  auto spec = syncfac::resolve_cluster(f.cluster, f.job, f.task);
  if (!spec) {
    std::cerr << "fake_node: " << syncfac::render(spec.error()) << "\n";
    return 65;
  }
  auto me = spec->task->str();
  auto file_name = spec->task->job + "-" + std::to_string(spec->task->index);
  bool chief = spec->task->job == "chief";
  if (!chief && f.ignore_term)
    std::signal(SIGTERM, SIG_IGN);
  std::cout << "hello from " << me << " pid " << ::getpid() << std::endl;
  std::cout << "args: " << all_args << std::endl;
  std::cerr << "note from " << me << " on stderr" << std::endl;
  if (!f.pid_dir.empty()) {
    std::ofstream out{pid_file(f.pid_dir, file_name), std::ios::app};
    out << ::getpid() << "\n";
  }
  auto finish = [&](int code) {
    if (f.partial)
      std::cout << "partial line from " << me << std::flush;
    return code;
  };
  if (f.on_stop_exit >= 0) {
    std::signal(SIGTERM, on_stop);
    std::signal(SIGINT, on_stop);
  }
  // Sleeps `ms`, or until a stop signal (--on_stop_exit): then the exit
  // code to end with.
  auto nap = [&](int ms) -> int {
    auto until = std::chrono::steady_clock::now()
                 + std::chrono::milliseconds{ms};
    while (std::chrono::steady_clock::now() < until) {
      if (f.on_stop_exit >= 0 && stop_signals > 0) {
        std::cout << me << " got "
                  << (last_stop_signal == SIGINT ? "SIGINT" : "SIGTERM")
                  << std::endl;
        std::this_thread::sleep_for(std::chrono::milliseconds{f.stop_ms});
        std::cout << me << " received " << stop_signals << " stop signals"
                  << std::endl;
        return f.on_stop_exit;
      }
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  };
  auto writer = syncfac::progress_record_writer::from_environment();
  if (!writer) {
    std::cerr << "fake_node: " << syncfac::render(writer.error()) << "\n";
    return 68;
  }
  for (const auto& entry : f.fail) {
    auto eq = entry.find('=');
    if (entry.substr(0, eq) == me)
      return finish(std::stoi(entry.substr(eq + 1)));
  }
  if (!chief) {
    auto stopped = nap(f.worker_ms);
    return finish(stopped >= 0 ? stopped : f.worker_exit_code);
  }
  if (!f.pid_dir.empty()) {
    auto all_there = [&] {
      for (const auto& t : spec->tasks())
        if (::access(pid_file(f.pid_dir, t.job + "-" + std::to_string(t.index))
                       .c_str(),
                     F_OK)
            != 0)
          return false;
      return true;
    };
    if (!wait_for(all_there)) {
      std::cerr << "fake_node: not every task started" << std::endl;
      return 66;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= f.steps; ++step) {
    if (auto stopped = nap(f.step_ms); stopped >= 0)
      return finish(stopped);
    std::cout << "global_step: " << step << " | loss: 0.5 | accuracy: 0.8"
              << std::endl;
    if (f.records)
      writer->write(syncfac::progress_record{
        step, f.steps,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count(),
        f.checkpoint_every > 0 && step >= f.checkpoint_every
          ? int64_t{step / f.checkpoint_every * f.checkpoint_every}
          : int64_t{-1}});
  }
  if (!f.wait_starts.empty()) {
    auto eq = f.wait_starts.find('=');
    auto who = f.wait_starts.substr(0, eq);
    auto colon = who.find(':');
    auto path = pid_file(f.pid_dir, who.substr(0, colon) + "-"
                                      + who.substr(colon + 1));
    int want = std::stoi(f.wait_starts.substr(eq + 1));
    if (!wait_for([&] { return lines_in(path) >= want; })) {
      std::cerr << "fake_node: " << who << " did not start " << want
                << " times" << std::endl;
      return 67;
    }
    std::cout << who << " started " << want << " times" << std::endl;
  }
  if (auto stopped = nap(f.chief_ms); stopped >= 0)
    return finish(stopped);
  return finish(f.exit_code);
}
