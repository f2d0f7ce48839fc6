#include "runtime/stop_signals.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
#include "runtime/exit_codes.hpp"

namespace syncfac {

namespace {

/// The write end of the pipe of the one watcher (-1: none).
std::atomic<int> signal_pipe{-1};

extern "C" void on_stop_signal(int signo) {
  // Only write(2): async-signal-safe. The watcher's thread does the rest.
  int saved = errno;
  int fd = signal_pipe.load();
  if (fd >= 0) {
    auto byte = static_cast<unsigned char>(signo);
    [[maybe_unused]] auto n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

/// The byte that stops the watcher's thread (no signal has number 0).
constexpr unsigned char stop_byte = 0;

} // namespace

std::string stop_signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? std::string{"SIG"} + abbrev
                           : "signal " + std::to_string(signo);
}

caf::expected<int> parse_requeue_signal(const std::string& name) {
  auto bare = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  for (int signo : {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2})
    if (stop_signal_name(signo) == "SIG" + bare)
      return signo;
  return make_error(ec::invalid_config,
                    "--requeue_signal '" + name
                      + "': expected TERM, HUP, USR1 or USR2");
}

stop_signal_watcher::stop_signal_watcher(std::string program)
  : program_(std::move(program)) {
}

caf::expected<std::unique_ptr<stop_signal_watcher>>
stop_signal_watcher::install(std::string program, int requeue_signal) {
  if (requeue_signal != SIGTERM && requeue_signal != SIGHUP
      && requeue_signal != SIGUSR1 && requeue_signal != SIGUSR2)
    return make_error(ec::invalid_config,
                      "stop signals: " + stop_signal_name(requeue_signal)
                        + " cannot be the requeue signal (TERM, HUP, USR1 "
                          "or USR2)");
  std::unique_ptr<stop_signal_watcher> w{
    new stop_signal_watcher(std::move(program))};
  if (::pipe2(w->pipe_, O_CLOEXEC) != 0)
    return make_error(ec::io_error, "stop signals: pipe: "
                                      + std::string{std::strerror(errno)});
  int expected = -1;
  if (!signal_pipe.compare_exchange_strong(expected, w->pipe_[1])) {
    ::close(w->pipe_[0]);
    ::close(w->pipe_[1]);
    w->pipe_[0] = w->pipe_[1] = -1;
    return make_error(ec::internal,
                      "stop signals: a watcher is installed already");
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  std::vector<int> signals{SIGTERM, SIGINT, SIGHUP};
  if (requeue_signal != SIGTERM && requeue_signal != SIGHUP)
    signals.push_back(requeue_signal);
  for (int signo : signals) {
    struct sigaction before {};
    ::sigaction(signo, &sa, &before);
    w->previous_.emplace_back(signo, before);
  }
  w->thread_ = std::thread{[p = w.get()] { p->watch(); }};
  return w;
}

stop_signal_watcher::~stop_signal_watcher() {
  if (pipe_[1] < 0)
    return;
  for (const auto& [signo, before] : previous_)
    ::sigaction(signo, &before, nullptr);
  signal_pipe.store(-1);
  auto byte = stop_byte;
  [[maybe_unused]] auto n = ::write(pipe_[1], &byte, 1);
  if (thread_.joinable())
    thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void stop_signal_watcher::watch() {
  for (;;) {
    unsigned char byte = 0;
    auto n = ::read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || byte == stop_byte)
      return;
    auto name = stop_signal_name(byte);
    {
      // Handed over under the lock, so that on_stop({}) returns only once
      // no handover runs any more (its target may go away then).
      std::lock_guard<std::mutex> guard{mtx_};
      if (received_) {
        // The second signal: the user or the scheduler will not wait.
        std::fprintf(stderr,
                     "%s: %s again after %s: exiting at once (exit code %d) "
                     "without finishing the step in flight\n",
                     program_.c_str(), name.c_str(), received_->c_str(),
                     exit_codes::preempted);
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(exit_codes::preempted);
      }
      received_ = name;
      std::fprintf(stderr,
                   "%s: %s: stopping after the global step in flight "
                   "(a second signal exits at once)\n",
                   program_.c_str(), name.c_str());
      if (!say_.empty())
        std::fprintf(stderr, "%s: %s\n", program_.c_str(), say_.c_str());
      std::fflush(stderr);
      if (on_stop_) {
        handed_over_ = true;
        on_stop_(name);
      }
    }
  }
}

void stop_signal_watcher::on_stop(stop_request f) {
  std::lock_guard<std::mutex> guard{mtx_};
  on_stop_ = std::move(f);
  if (!received_ || handed_over_ || !on_stop_)
    return;
  handed_over_ = true;
  on_stop_(*received_);
}

std::optional<std::string> stop_signal_watcher::received() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return received_;
}

int stop_signal_watcher::exit_code_of(int code) const {
  return code == exit_codes::failure && received() ? exit_codes::preempted
                                                   : code;
}

int stop_signal_watcher::failure_exit_code() const {
  auto signal = received();
  if (!signal)
    return exit_codes::failure;
  std::fprintf(stderr,
               "%s: ended after %s before the run could end in order; exit "
               "code %d\n",
               program_.c_str(), signal->c_str(), exit_codes::preempted);
  std::fflush(stderr);
  return exit_codes::preempted;
}

void stop_signal_watcher::say_on_stop(std::string line) {
  std::lock_guard<std::mutex> guard{mtx_};
  say_ = std::move(line);
}

} // namespace syncfac
