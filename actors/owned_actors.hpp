#pragma once

// The actors a driver spawned, stopped however the driver returns (an early
// error return included), so that the actor system can shut down.

#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

namespace syncfac {

class owned_actors {
public:
  explicit owned_actors(caf::scoped_actor& self) : self_(self) {
  }

  owned_actors(const owned_actors&) = delete;
  owned_actors& operator=(const owned_actors&) = delete;

  ~owned_actors() {
    for (auto& a : all_)
      self_->send_exit(a, caf::exit_reason::user_shutdown);
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
