#pragma once

// Real processes for the role tests: loopback cluster files, background
// children with their output in a file, bounded waits for their exit or for
// a line in their output.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/examples/process.hpp"

namespace syncfac::test {

/// The node program of these clusters, and the evaluator role's program.
inline const std::string node = bin + "convnet_mnist_distributed";
inline const std::string evaluator = bin + "syncfac_evaluator";

/// A quick, deterministic run on fake data (one worker, no initial
/// tokens), waiting up to `wait_ms` for its connections and its steps.
inline std::string quick_run_flags(const std::string& wait_ms) {
  return " --fake_data --fake_train_size 2048 --fake_test_size 500"
         " --batch_size 32 --threads 1 --seed 3 --no_progress"
         " --connect_timeout_ms " + wait_ms + " --num_tokens 0"
         " --max_wait_ms " + wait_ms;
}

/// The evaluator's flags for the same test set, polling every 50 ms,
/// waiting up to `wait_ms` for its peers at start and after a restart.
inline std::string quick_eval_flags(const std::string& wait_ms) {
  return " --fake_data --fake_test_size 500 --threads 1 --poll_ms 50"
         " --connect_timeout_ms " + wait_ms + " --max_wait_ms " + wait_ms;
}

/// A program running in the background (`sh -c command`), its stdout and
/// stderr in `log`. Killed at the end of the scope if still running.
class child {
public:
  child(const std::string& command, std::string log) : log_(std::move(log)) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }

  ~child() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  child(const child&) = delete;
  child& operator=(const child&) = delete;

  bool running() {
    if (pid_ <= 0 || exited_)
      return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                : 128 + WTERMSIG(status);
      return false;
    }
    return true;
  }

  /// Waits up to `max` for the exit; the exit code, or -1 on timeout.
  int wait(std::chrono::seconds max) {
    auto deadline = std::chrono::steady_clock::now() + max;
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    return running() ? -1 : code_;
  }

  /// SIGKILL and wait (a crash, as far as its peers can tell).
  void crash() {
    if (running()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      exited_ = true;
      code_ = 128 + SIGKILL;
    }
  }

  std::string output() const {
    return read_file(log_);
  }

  /// Waits up to `max` until the output contains `text` `times` times.
  bool wait_for_output(const std::string& text, std::chrono::seconds max,
                       size_t times = 1) {
    auto deadline = std::chrono::steady_clock::now() + max;
    while (std::chrono::steady_clock::now() < deadline) {
      auto out = output();
      size_t n = 0;
      for (auto pos = out.find(text); pos != std::string::npos;
           pos = out.find(text, pos + 1))
        ++n;
      if (n >= times)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
    return false;
  }

private:
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

} // namespace syncfac::test
