#pragma once

// The connector: reaches peer tasks at their addresses and says hello,
// without blocking anyone. It asks the middleman (CAF's, or the TLS one)
// for the node published at a task's address with a bounded request; an
// attempt that fails comes back as a timer message after connect_options::
// retry, never as a sleep; a deadline message ends the wait, naming the
// tasks still missing and their last errors. A node connects to its peers
// at start through it (connect_nodes waits for its one answer), and a
// supervisor reaches a lost task again through it (docs/robustness.md).

#include <ostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "messages/atoms.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

using peer_connector_actor = caf::typed_actor<
  // Reach every task of `tasks` ("ps:0"), each retried until it answers or
  // connect_options::timeout passes since the request came; answered with
  // their node information in the order given. Errors: ec::timeout naming
  // the tasks still missing, their addresses and last errors; a refusal
  // (ec::bad_message, ec::invalid_config) at once; connect_options::
  // abandon's error; ec::invalid_argument for a task name that does not
  // parse or a task the cluster lacks.
  caf::replies_to<connect_atom, std::vector<std::string>>::with<
    std::vector<node_info>>,
  // One task, the same way: a supervisor's connector_actor.
  caf::replies_to<connect_atom, std::string>::with<node_info>>;

/// A connector of `hello`'s node to tasks of `cluster`. While it waits it
/// writes to `log` (unless null), every opts.report_every, which tasks are
/// still missing and since when. With opts.abandon set the connector runs
/// on its own thread, as abandon may wait for an answer itself.
peer_connector_actor spawn_peer_connector(caf::actor_system& sys,
                                          cluster_spec cluster,
                                          node_hello hello,
                                          connect_options opts,
                                          std::ostream* log);

/// The supervisor's connector: quiet (the supervisor logs), and each hello
/// waits two seconds at most: a hello sent while the task was frozen is
/// lost when it thaws (its middleman drops the connections it timed out),
/// so it is asked again soon. `opts.timeout` bounds each connect request.
connector_actor spawn_node_connector(caf::actor_system& sys,
                                     cluster_spec cluster, node_hello hello,
                                     connect_options opts);

} // namespace syncfac
