#pragma once

// SIGTERM, SIGINT and SIGHUP as a scheduler sends them (scancel, a pod
// eviction, a spot reclaim, Ctrl-C, a closed terminal), and a site's own
// requeue signal (--requeue_signal USR1 or USR2, as PyTorch Lightning's
// and many Slurm sites' `--signal=B:USR1@90`): the first asks the program
// to stop without loss, the second ends it at once (docs/distributed.md,
// "Preemption"). The
// signal handler only writes the signal's number into a pipe; a thread of
// this watcher reads it and does the work, so nothing but write(2) runs
// inside the handler.

#include <csignal>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac {

/// The signal --requeue_signal names: TERM, HUP, USR1 or USR2 (a "SIG"
/// prefix allowed); anything else is refused naming the flag.
caf::expected<int> parse_requeue_signal(const std::string& name);

/// The signals --requeue_signal accepts, as its --help lists them.
inline const char* const requeue_signal_names[] = {"TERM", "HUP", "USR1",
                                                   "USR2"};

/// "SIGTERM", "SIGUSR1", ... ("signal N" for others).
std::string stop_signal_name(int signo);

class stop_signal_watcher {
public:
  /// What the first signal does, with its name ("SIGTERM"); called on the
  /// watcher's thread.
  using stop_request = std::function<void(const std::string& signal)>;

  /// Installs the handlers of SIGTERM, SIGINT, SIGHUP and `requeue_signal`
  /// (parse_requeue_signal's) for `program` (named in the lines it
  /// prints). Only one watcher may exist at a time.
  static caf::expected<std::unique_ptr<stop_signal_watcher>>
  install(std::string program, int requeue_signal = SIGTERM);

  /// Restores the handlers that were there before and stops the thread.
  ~stop_signal_watcher();

  stop_signal_watcher(const stop_signal_watcher&) = delete;
  stop_signal_watcher& operator=(const stop_signal_watcher&) = delete;

  /// Where the first signal goes (called under the watcher's lock: keep it
  /// short, e.g. one message). A signal that came before (the node was
  /// still being set up) is handed over at once. on_stop({}) returns once
  /// no handover runs any more.
  void on_stop(stop_request f);

  /// The first signal's name, once one came.
  std::optional<std::string> received() const;

  /// What a program whose run failed exits with: exit_codes::preempted,
  /// saying so on stderr, when a stop signal came first (it was stopped
  /// before its run could end in order, e.g. while connecting: the
  /// scheduler may requeue it like any preempted program), else
  /// exit_codes::failure.
  int failure_exit_code() const;

  /// The code a program exits with after its run returned `code`: a
  /// failure after a stop signal is exit_codes::preempted, as
  /// failure_exit_code() says (without saying it): what a bounded end of
  /// the actor system exits with before the program reaches that.
  int exit_code_of(int code) const;

  /// Lets the first signal print `line` on stderr before it is handed on
  /// (e.g. what a stop loses without --checkpoint_dir).
  void say_on_stop(std::string line);

private:
  explicit stop_signal_watcher(std::string program);

  void watch();

  std::string program_;
  /// The signals handled, with the handlers that were there before.
  std::vector<std::pair<int, struct sigaction>> previous_;
  int pipe_[2] = {-1, -1};
  std::thread thread_;
  mutable std::mutex mtx_;
  stop_request on_stop_;
  std::optional<std::string> received_;
  std::string say_;
  bool handed_over_ = false;
};

} // namespace syncfac
