#pragma once

// What a node's supervisor is configured with, read off the node's plan
// (runtime/cluster/node_plan.hpp): every node but the chief's has a
// supervisor (actors/supervisor.hpp), the chief's node the chief's
// supervisor (actors/chief_supervisor.hpp); a program joining as a
// cluster member (actors/cluster_member.hpp) uses the same connectors.

#include <functional>
#include <memory>
#include <string>
#include <ostream>

#include <caf/actor_system.hpp>

#include "actors/chief_supervisor.hpp"
#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/node_plan.hpp"

namespace syncfac {

/// A supervisor's connector per lost task (supervisor_config::connector),
/// reaching `cluster` as `connect` says with `hello` (read when a task is
/// first lost: it may be filled in after this call).
std::function<connector_actor(const std::string&)>
connector_for(caf::actor_system& sys, const cluster_spec& cluster,
              connect_options opts, std::shared_ptr<const node_hello> hello);

/// What the node supervisor of `plan.task` watches and whom it rebinds;
/// its connectors reach `cluster` as `connect` says and send `hello`
/// (filled in once the node actor exists); its lines go to `log`.
supervisor_config node_supervisor_config(
  caf::actor_system& sys, const node_plan& plan, const cluster_spec& cluster,
  const connect_options& connect, std::shared_ptr<const node_hello> hello,
  std::ostream& log);

/// The chief's node: where every role lives, which tasks connect to the
/// chief themselves, and how lost ones are reached again; K-FAC roles are
/// probed every `probe_timeout` (0: never).
chief_supervisor_config chief_node_supervisor_config(
  caf::actor_system& sys, const node_plan& plan, const cluster_spec& cluster,
  const connect_options& connect, std::chrono::milliseconds probe_timeout,
  std::shared_ptr<const node_hello> hello, std::ostream& log);

} // namespace syncfac
