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
//     chief's node (refuse_atom), retrying on a timer while the chief
//     starts, and exits once the chief's node has answered;
//   - a task the chief connects to (a PS shard, an inverse host) cannot
//     wait for a chief that may be waiting for it: it publishes a
//     refusing node at its own address instead, which answers every
//     hello with the refusal, and exits once the chief's node is gone
//     (a second at most).

#include <chrono>
#include <functional>
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
/// cannot join the run: <why>" (the chief's also tells `notify`:
/// refuse_atom, caf::ok_atom and the chief's node actor); a shutdown with
/// ok; it has no callers; a refusal from another task is not its to take
/// (ec::invalid_argument).
node_actor::behavior_type refusing_node(node_actor::pointer,
                                        task_id me, task_id chief,
                                        std::string why, caf::actor notify);

/// Where a refusal goes and how long it may take: what a library node
/// (cluster_run_config) and a role written outside the library (an
/// evaluator's member_config) both know.
struct join_route {
  cluster_spec cluster;
  /// The task that cannot join.
  task_id task;
  /// --bind, for a refusing node published at the task's address.
  std::string bind;
  /// TLS, the connect timeout (the longest the word may take), retry
  /// and request timeouts.
  connect_options connect;
  /// Hands the first stop signal, also one that came before, to the given
  /// actor as (preempt_atom, std::string signal): it ends the wait (may be
  /// empty).
  std::function<void(const caf::actor&)> send_stop_to;

  static join_route of(const cluster_run_config& cfg);
};

/// Whether the chief must still hear `err`, why a task cannot join: not
/// when the chief (`chief`) refused the task's hello itself (it knows),
/// nor when the task waited for a peer in vain (so did the chief).
bool chief_must_hear(const caf::error& err, const task_id& chief);

/// Says why (`why`, this task's error) task route.task cannot join the
/// run, as the file's head describes: to `chief` (the task hosting the
/// chief) when the task `connects_to_chief` itself, else by its refusing
/// node at its address (or --bind, over TLS if the cluster is), within the
/// connect timeout; logs to `log` what it did, or why the word did not
/// reach the chief.
void refuse_to_join(caf::actor_system& sys, caf::scoped_actor& self,
                    const join_route& route, const task_id& chief,
                    bool connects_to_chief, const std::string& why,
                    std::ostream& log);

} // namespace syncfac
