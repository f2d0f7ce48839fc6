#include "runtime/system_shutdown.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include <caf/actor_registry.hpp>

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// "30 s", or "1500 ms" for a bound that is no whole number of seconds.
std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0)
    return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

[[noreturn]] void exit_now(std::ostream& err, const std::string& line,
                           int exit_code) {
  err << line << std::endl;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

/// Ends the process with the run's code unless disarmed by `deadline`:
/// the thread that destroys the actor system cannot bound that itself.
class watchdog {
public:
  watchdog(clock_type::time_point deadline, std::string line, int exit_code,
           std::ostream& err)
    : thread_([this, deadline, line = std::move(line), exit_code, &err] {
        std::unique_lock<std::mutex> guard{mtx_};
        if (!cv_.wait_until(guard, deadline, [this] { return disarmed_; }))
          exit_now(err, line, exit_code);
      }) {
  }

  ~watchdog() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      disarmed_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

} // namespace

void end_actor_system(std::unique_ptr<caf::actor_system> sys,
                      std::chrono::milliseconds limit, const std::string& who,
                      int exit_code, std::ostream& err) {
  auto deadline = clock_type::now() + limit;
  auto after = " after the run ended; exiting with its code ("
               + std::to_string(exit_code) + ") without waiting";
  // The actors first, while the system is whole (its registry counts
  // them): polled, since CAF's own wait for them has no bound.
  while (sys->registry().running() > 0) {
    if (clock_type::now() >= deadline)
      exit_now(err,
               who + ": " + std::to_string(sys->registry().running())
                 + " actor(s) of this node still running "
                 + duration_text(limit) + after,
               exit_code);
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  // Then the modules, given at least a second when the actors took
  // nearly the whole bound: the destructor stops the middleman (its
  // connections and its thread) and joins the system's threads.
  auto modules_until = std::max(deadline, clock_type::now()
                                            + std::chrono::seconds{1});
  watchdog bound{modules_until,
                 who + ": the actor system's network layer (CAF's middleman: "
                       "its connections and threads) did not stop within "
                   + duration_text(limit) + after,
                 exit_code, err};
  sys.reset();
}

} // namespace syncfac
