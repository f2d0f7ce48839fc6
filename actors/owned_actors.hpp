#pragma once

// The actors a driver spawned, stopped however the driver returns (an early
// error return included), so that the actor system can shut down.

#include <chrono>
#include <iostream>
#include <set>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/after.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

namespace syncfac {

class owned_actors {
public:
  /// How long the destructor waits for the actors to end.
  static constexpr std::chrono::seconds shutdown_timeout{60};

  explicit owned_actors(caf::scoped_actor& self) : self_(self) {
  }

  owned_actors(const owned_actors&) = delete;
  owned_actors& operator=(const owned_actors&) = delete;

  /// Stops every actor and waits until each has ended (bounded): their
  /// callbacks reference what the driver's frame holds (the training log
  /// an evaluation in flight at a stop signal still writes to), which
  /// goes right after this. Without the wait, an evaluator finishing its
  /// last slice wrote into a destroyed log and the program hung at exit.
  ~owned_actors() {
    std::set<caf::actor_addr> running;
    for (auto& a : all_) {
      // A monitor of an actor already gone answers at once.
      if (running.insert(a.address()).second)
        self_->monitor(a);
      self_->send_exit(a, caf::exit_reason::user_shutdown);
    }
    auto total = running.size();
    bool timed_out = false;
    self_->receive_while([&] { return !running.empty() && !timed_out; })(
      [&](caf::down_msg& down) { running.erase(down.source); },
      caf::after(shutdown_timeout) >> [&] { timed_out = true; });
    if (timed_out)
      std::cerr << "syncfac: " << running.size() << " of " << total
                << " actors still running " << shutdown_timeout.count()
                << " s after the stop at the end of the run (waited for "
                   "them to end)\n";
  }

  template <class Handle>
  void own(const Handle& h) {
    all_.push_back(caf::actor_cast<caf::actor>(h));
  }

private:
  caf::scoped_actor& self_;
  std::vector<caf::actor> all_;
};

} // namespace syncfac
