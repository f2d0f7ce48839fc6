#pragma once

// The supervisor's connector of a real cluster: one detached actor per peer
// task, which reaches the task's address through CAF's middleman
// (connect_nodes: retried until the connector's timeout) and says hello.
// Detached, because the middleman's connect blocks its caller; the
// supervisor only ever waits for its answer, bounded.

#include <caf/actor_system.hpp>

#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

/// `opts.timeout` bounds each connect request.
connector_actor spawn_node_connector(caf::actor_system& sys,
                                     cluster_spec cluster, node_hello hello,
                                     connect_options opts);

} // namespace syncfac
