#pragma once

// The run's shape as a node's plan needs it (runtime/cluster/node_plan.hpp),
// from the run's configuration: the node program and the in-process
// trainer plan their roles from the same numbers.

#include "actors/topology.hpp"
#include "runtime/cluster/node_plan.hpp"

namespace syncfac {

/// The roles' numbers of `cfg` split as `tasks` says, and which worker
/// tasks send K-FAC statistics.
run_shape shape_of(const sync_training_config& cfg, const task_plan& tasks);

/// The bounds of a node's waits: `max_wait`, the connect options'
/// `request_timeout` and `connect_timeout`, and the run's step timeout.
node_wait_flags wait_flags_of(const sync_training_config& cfg,
                              std::chrono::milliseconds max_wait,
                              std::chrono::milliseconds request_timeout,
                              std::chrono::milliseconds connect_timeout);

} // namespace syncfac
