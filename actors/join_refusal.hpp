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

#include "actors/node.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

struct join_refusal_config {
  /// This task, the chief's task, and the cluster (their addresses).
  task_id me;
  task_id chief{"chief", 0};
  cluster_spec cluster;
  /// Whether this task connects to the chief itself (else the chief
  /// connects to it).
  bool connects_to_chief = false;
  /// Where this node listens instead of its cluster entry's host (--bind).
  std::string bind;
  bool tls = false;
  /// Bounds the whole wait (the connect timeout: a chief that has not come
  /// within it has given up on this task too) and each attempt.
  connect_options connect;
  /// How long the refusing node stays after answering the chief's hello,
  /// so that the answer is written before the process ends.
  std::chrono::milliseconds linger{1000};
};

/// The node a task that cannot join publishes at its address: a hello is
/// answered with ec::invalid_config "refused at connect to ps:0: ps:0
/// cannot join the run: <why>" (the chief's also tells `notify`,
/// caf::ok_atom); a shutdown with ok; it has no callers; a refusal from
/// another task is not its to take (ec::invalid_argument).
node_actor::behavior_type refusing_node(node_actor::pointer,
                                        task_id me, task_id chief,
                                        std::string why, caf::actor notify);

/// Says why (`why`, this task's error) this task cannot join the run, as
/// the file's head describes, within cfg.connect.timeout; logs to `log`
/// what it did, or why the word did not reach the chief.
void refuse_to_join(caf::actor_system& sys, caf::scoped_actor& self,
                    const join_refusal_config& cfg, const std::string& why,
                    std::ostream& log);

} // namespace syncfac
