#pragma once

// How a preemption travels (docs/distributed.md, "Preemption"): a node's
// stop signal reaches the chief (through the node's supervisor, or
// directly on the chief's node), the chief ends the run after the global
// step in flight and tells every node with a reason that says so; every
// node then exits with exit_codes::preempted.

#include <string>

#include "runtime/exit_codes.hpp"

namespace syncfac {

/// The reason the chief tells every node when a preemption ended the run
/// (`why`: "worker:1: SIGTERM").
inline std::string preempted_run_reason(const std::string& why) {
  return "preempted (" + why + ")";
}

/// Whether the chief's reason for the end of the run is a preemption.
inline bool is_preempted_run(const std::string& reason) {
  return reason.rfind("preempted (", 0) == 0;
}

/// What a node whose run the chief ended with `reason` exits with.
inline int exit_code_of_run_end(const std::string& reason) {
  return is_preempted_run(reason) ? exit_codes::preempted
                                  : exit_codes::success;
}

} // namespace syncfac
