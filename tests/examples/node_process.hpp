#pragma once

// A node (or any program) as a real child process of a test, its stdout
// and stderr in a file: started, awaited for a line of its output, sent
// signals, waited for with a bound, killed when a test leaves it running.

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "tests/examples/process.hpp"

namespace syncfac::test {

using clock_type = std::chrono::steady_clock;

/// One node as a real child process, its stdout and stderr in a file.
struct node_process {
  std::string task;
  std::string log;
  pid_t pid = -1;
  int exit_code = -1;
  /// When the exit was seen (within the 10 ms of a wait's poll).
  clock_type::time_point exited_at;

  /// Waits for the exit, bounded; false when it did not exit in time.
  bool wait(std::chrono::seconds limit) {
    if (pid < 0)
      return true;
    auto deadline = clock_type::now() + limit;
    for (;;) {
      int status = 0;
      auto r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                      : 128 + WTERMSIG(status);
        exited_at = clock_type::now();
        pid = -1;
        return true;
      }
      if (clock_type::now() >= deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }

  bool running() {
    return pid >= 0 && !wait(std::chrono::seconds{0});
  }

  void signal(int signo) const {
    if (pid >= 0)
      ::kill(pid, signo);
  }

  std::string output() const {
    return read_file(log);
  }
};

/// Runs `command` (exec'd by sh, so that the pid is the program's) with
/// its output in `log`.
inline node_process start_process(const std::string& command,
                                  const std::string& log) {
  node_process n;
  n.log = log;
  auto line = "exec " + command;
  n.pid = ::fork();
  if (n.pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  BOOST_REQUIRE_MESSAGE(n.pid > 0, "fork for " << command);
  return n;
}

/// The evaluator of `cluster` (outside it, as TensorFlow's: job evaluator,
/// task 0, one thread, polling every 50 ms) evaluating every `eval_every`
/// global steps and waiting up to `connect_timeout_ms` for its peers, with
/// `flags`; its output in tmp's "evaluator.log".
inline node_process start_evaluator(const temp_dir& tmp,
                                    const std::string& cluster,
                                    int eval_every, int connect_timeout_ms,
                                    const std::string& flags = "") {
  return start_process(bin + "syncfac_evaluator --cluster " + cluster
                         + " --job_name evaluator --task 0 --threads 1"
                           " --poll_ms 50 --eval_every "
                         + std::to_string(eval_every) + " --connect_timeout_ms "
                         + std::to_string(connect_timeout_ms) + flags,
                       tmp.file("evaluator.log"));
}

/// Waits until `n`'s output holds `what`, bounded.
inline void await_output(node_process& n, const std::string& what) {
  auto deadline = clock_type::now() + std::chrono::seconds{120};
  while (read_file(n.log).find(what) == std::string::npos) {
    BOOST_REQUIRE_MESSAGE(clock_type::now() < deadline,
                          "no '" << what << "' within 120 s:\n" << n.output());
    BOOST_REQUIRE_MESSAGE(n.running(), "ended before '" << what << "':\n"
                                                         << n.output());
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
}

/// Kills a node the test left running (a failed requirement).
struct kill_on_exit {
  node_process& node;
  ~kill_on_exit() {
    if (node.running()) {
      node.signal(SIGKILL);
      node.wait(std::chrono::seconds{10});
    }
  }
};

} // namespace syncfac::test
