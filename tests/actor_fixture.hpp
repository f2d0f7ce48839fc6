#pragma once

// The actor suites' common fixture: an actor system with a scoped actor to
// ask from, the actors a test spawns (sent an exit when it ends), and
// requests with a timeout; and a log that an actor fills and a test reads.

#include <mutex>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/program_config.hpp"
#include "tests/helpers.hpp"

namespace syncfac::test {

struct actor_fixture {
  program_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::vector<caf::actor> spawned;

  ~actor_fixture() {
    for (auto& a : spawned)
      self->send_exit(a, caf::exit_reason::user_shutdown);
  }

  /// The actor that a spawn must have produced, ended with the test.
  template <class Handle>
  Handle keep(caf::expected<Handle> x) {
    BOOST_REQUIRE_MESSAGE(x, why(x));
    spawned.push_back(caf::actor_cast<caf::actor>(*x));
    return *x;
  }

  /// The answer to a request (10 s at most), or the error it produced.
  template <class T, class Handle, class... Ts>
  caf::expected<T> ask(const Handle& dest, Ts&&... xs) {
    return test::ask<T>(self, dest, std::forward<Ts>(xs)...);
  }

  /// The answer to a request that must succeed.
  template <class T, class Handle, class... Ts>
  T require(const Handle& dest, Ts&&... xs) {
    auto x = ask<T>(dest, std::forward<Ts>(xs)...);
    BOOST_REQUIRE_MESSAGE(x, why(x));
    return std::move(*x);
  }
};

/// What an actor saw, shared with the test thread.
template <class T>
struct shared_log {
  std::mutex mtx;
  std::vector<T> sets;

  std::vector<T> get() {
    std::lock_guard<std::mutex> guard{mtx};
    return sets;
  }
};

} // namespace syncfac::test
