#pragma once

// The end of a node's actor system, bounded. CAF's actor_system destructor
// waits without a bound: first for every actor of the system to end, then
// for its modules (the middleman: its connections, its thread, its own
// actor, which may sit in a blocking connect(2) to a peer that is itself
// going away). A run whose outcome is known and reported must not hang
// there: a launcher (mpirun, srun, a pod) waits for every process of the
// job. So the system ends here within a bound; past it, the program says
// what it waited for and exits with the run's exit code
// (docs/distributed.md, "Shutdown").

#include <chrono>
#include <memory>
#include <ostream>
#include <string>

#include <caf/actor_system.hpp>

namespace syncfac {

/// How long a node's actor system gets to end after its run: normally
/// milliseconds; the actors' own stops are bounded before (owned_actors).
inline constexpr std::chrono::seconds system_shutdown_limit{30};

/// Ends `sys` (destroys it, on this thread: CAF's destructor hangs on
/// another) within `limit`: its actors first, then its modules. Past the
/// bound it says on `err`, as `who` (the task), which of the two it
/// waited for, and ends the process with `exit_code` (std::_Exit, after
/// flushing the standard streams): the run's outcome must be reported
/// before.
void end_actor_system(std::unique_ptr<caf::actor_system> sys,
                      std::chrono::milliseconds limit, const std::string& who,
                      int exit_code, std::ostream& err);

} // namespace syncfac
