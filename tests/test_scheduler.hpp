#pragma once

// An actor system on CAF's test scheduler, for deterministic suites:
// nothing runs until the test runs it (sched.run()), and time moves only
// when the test advances the test clock (sched.advance_time), so request
// timeouts and delayed messages come in one order, without sleeps. The
// configuration is the programs' own (program_config: the message types).

#include <caf/actor_system.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/program_config.hpp"

namespace syncfac::test {

struct testing_config : program_config {
  testing_config() {
    set("scheduler.policy", caf::atom("testing"));
  }
};

/// The system, its scheduler and a scoped actor that talks to it.
struct deterministic_system {
  testing_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched
    = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys};
};

} // namespace syncfac::test
