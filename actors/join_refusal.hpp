#pragma once

// A task that cannot join the run says why before it exits. Its own setup
// may refuse it after the flags were read and its configuration agreed
// (a batch larger than its data shard, a device it cannot make, a port
// taken); without a word the chief would wait its whole connect timeout
// for a task that is gone and end with "tasks that never connected". So
// the refusal goes to the chief, which ends the run with its text at once
// (docs/distributed.md, "One configuration across every node"):
//
//   - a task that connects to the chief itself (a worker) tells the
//     chief's node (refuse_atom), retrying while the chief starts, and
//     exits once the chief's node has answered;
//   - a task the chief connects to (a PS shard, an inverse host) cannot
//     wait for a chief that may be waiting for it: it publishes a
//     refusing node at its own address instead, which answers every
//     hello with the refusal, and exits shortly after the chief's.

#include <chrono>
#include <ostream>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cluster_node.hpp"
#include "actors/node.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

/// The node a task that cannot join publishes at its address: a hello is
/// answered with ec::invalid_config "refused at connect to ps:0: ps:0
/// cannot join the run: <why>" (the chief's also tells `notify`,
/// caf::ok_atom); a shutdown with ok; it has no callers; a refusal from
/// another task is not its to take (ec::invalid_argument).
node_actor::behavior_type refusing_node(node_actor::pointer,
                                        task_id me, task_id chief,
                                        std::string why, caf::actor notify);

/// Says why (`why`, this task's error) task cfg.task cannot join the run,
/// as the file's head describes: to `chief` (the task hosting the chief)
/// when the task `connects_to_chief` itself, else by its refusing node at
/// its address (or --bind, over TLS if the cluster is), within the
/// connect timeout; logs to `log` what it did, or why the word did not
/// reach the chief.
void refuse_to_join(caf::actor_system& sys, caf::scoped_actor& self,
                    const cluster_run_config& cfg, const task_id& chief,
                    bool connects_to_chief, const std::string& why,
                    std::ostream& log);

} // namespace syncfac
