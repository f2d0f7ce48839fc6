#pragma once

// One supervisor per node other than the chief's: the event-based actor
// that owns the node's side of the fault path (docs/design.md, "Failure
// model"). The node program wires the node (spawns its roles, connects to
// its peers, publishes it), hands the wiring over and waits for the
// supervisor's end, bounded; everything that happens in between is the
// supervisor's:
//
//   connecting  the node is being wired; hellos, the chief's word and a
//               preemption are kept for later
//   running     the roles are monitored, and so are the chief's node and
//               the watched peers' nodes (PS shards, K-FAC roles' hosts);
//               a worker started while the run is under way rejoins it
//   chief_lost  the chief's node went down: a task that connects to the
//               chief connects again (its connector), the others wait for
//               the chief's hello; both bounded by max_wait. A worker is
//               rebound to the chief that is back (a chief whose steps are
//               paused for another lost task answers when they go on;
//               awaited up to max_wait)
//   role_failed a hosted role stopped on an error: the chief's word may
//               still come (a worker stops with the chief at the end);
//               bounded by the failure grace
//   preempting  the node program preempted the node while the chief was
//               reachable: the chief was told (a task that knows only the
//               chief's node asks it for the chief first, bounded by the
//               request timeout), and ends the run after the global step
//               in flight; its word is awaited, bounded by preempt_wait
//               (the node exits preempted either way)
//   ended       the promise of the node program is answered: the chief
//               ended the run, a wait ran out, a peer was refused, or the
//               program preempted the node (exit_codes::preempted)
//
// A lost peer (not the chief) is connected to again in every state but
// preempting and ended; it changes no state: the chief's supervisor
// rebinds the roles that need it.
//
// A program with roles of its own (actors/cluster_member.hpp) has the same
// supervisor, and its member role hears the node's events as messages
// (member_role_actor): a peer's loss, the peer back, and the end of the
// run, which it answers before the chief hears this node's.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/node_watch.hpp"
#include "messages/atoms.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/exit_codes.hpp"

namespace syncfac {

/// Connects to a peer task again, on behalf of a supervisor.
using connector_actor = caf::typed_actor<
  // Reach task `task` ("ps:0") at its address, say hello and answer its
  // node information; an error when it cannot be reached within the
  // connector's own timeout or refuses this node.
  caf::replies_to<connect_atom, std::string>::with<node_info>>;

/// What a role written outside the library (actors/cluster_member.hpp)
/// hears from its node's supervisor.
using member_role_actor = caf::typed_actor<
  // The node of a peer task (task, CAF's reason) went down: its roles'
  // handles are dead; the supervisor connects to it again, bounded by its
  // max_wait.
  caf::reacts_to<lost_atom, std::string, std::string>,
  // The peer task is connected again: its roles' handles are these now.
  caf::reacts_to<connect_atom, std::string, node_info>,
  // The chief ended the run (its reason): the role finishes its work (a
  // final evaluation while the shards are still up) and then answers;
  // only then does the chief hear that this node is done (it waits,
  // bounded by its request timeout).
  caf::replies_to<shutdown_atom, std::string>::with<caf::ok_atom>>;

/// What the node program hands its supervisor once the node is wired.
struct node_wiring {
  /// The peers connected to at start, by task name.
  std::map<std::string, node_info> nodes;
  /// The roles this node hosts, by role name ("worker:1", "ps:0").
  std::map<std::string, caf::actor> hosted;
  /// A worker task's workers, in index order (empty on other tasks):
  /// supervisor_config::gradient_workers names them.
  std::vector<worker_actor> workers;
  /// A program's member role (cluster_member::run), told the events above;
  /// unset on the library's nodes.
  member_role_actor member;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_wiring& x) {
  return f(caf::meta::type_name("node_wiring"), x.nodes, x.hosted,
           x.workers, x.member);
}

/// How a node's run ended, as its supervisor answers it.
struct node_end {
  /// exit_codes::success, failure or preempted.
  int32_t exit_code = exit_codes::success;
  /// Why the run ended (the chief's reason, or the failure rendered).
  std::string reason;
  /// Set when the node failed (exit_code is failure then).
  caf::error error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_end& x) {
  return f(caf::meta::type_name("node_end"), x.exit_code, x.reason, x.error);
}

using supervisor_actor = caf::typed_actor<
  // From the node program once the node is wired: supervise it; answered
  // when the run ends for this node.
  caf::replies_to<run_atom, node_wiring>::with<node_end>,
  // From the node actor: a peer said hello (the chief's: back after a
  // restart or a thaw).
  caf::reacts_to<hello_atom, std::string, caf::actor>,
  // From the node actor: it refused a peer configured for another run
  // (peer, why): waiting changes nothing.
  caf::reacts_to<hello_atom, std::string, std::string>,
  // From the node actor: the chief ended the run (the reason); answered
  // once the member role, if any, answered it (or member_finish passed).
  caf::replies_to<shutdown_atom, std::string>::with<caf::ok_atom>,
  // From the node program: preempted (why: "SIGTERM"). A stop signal's
  // way in: the chief is told and ends the run after the step in flight;
  // without a chief to tell the node ends at once. Either way the node
  // exits with exit_codes::preempted.
  caf::reacts_to<preempt_atom, std::string>,
  // From its own down handler: a monitored node or role went away.
  caf::reacts_to<lost_atom, node_loss>,
  // Its own timer: the wait with this number ran out.
  caf::reacts_to<deadline_atom, uint64_t>>;

struct supervisor_config {
  /// This node's task ("worker:1") and the chief's ("chief:0"), with the
  /// chief's address for the messages that name it.
  std::string me;
  std::string chief;
  std::string chief_address;
  /// Whether this task connects to the chief itself (a worker): after a
  /// loss it connects again; the others wait for the chief's hello.
  bool reconnects_to_chief = false;
  /// The peer tasks watched and connected to again when they go down.
  std::vector<std::string> peers;
  /// A gradient worker task's workers' indices, in the order of
  /// node_wiring::workers (rejoins and rebinds ask the chief for each
  /// one's resume point); empty on other tasks.
  std::vector<int32_t> gradient_workers;
  /// A statistics worker task (starts at the shards' step when it joins a
  /// run under way; takes no tokens, so it is never rebound).
  bool stats_worker = false;
  /// (host task, role) of every PS shard and, for a worker that sends
  /// statistics, every covariance actor, in order: what a rebind hands the
  /// worker.
  std::vector<std::pair<std::string, std::string>> shard_roles;
  std::vector<std::pair<std::string, std::string>> covariance_roles;
  /// Longest wait for the chief's return, and for its answer to where the
  /// worker rejoins (a chief paused for a lost role answers once the role
  /// is back); longest wait for any other answer; how long a stopped role
  /// waits for the chief's word.
  std::chrono::milliseconds max_wait{300000};
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds failure_grace{5000};
  /// Longest wait for one answer of a connector; a peer that is not back
  /// is asked for again at once, until max_wait has passed since its loss.
  std::chrono::milliseconds connect_attempt{5000};
  /// Longest wait for the chief's word after a preemption was passed on
  /// (the step in flight, its checkpoint, the chief's own bound on it).
  std::chrono::milliseconds preempt_wait{60000};
  /// Longest wait for a member role's answer to the end of the run (its
  /// last work, e.g. a final evaluation).
  std::chrono::milliseconds member_finish{60000};
  /// The connector for `task` (made once per task, on its first loss).
  std::function<connector_actor(const std::string& task)> connector;
  /// This node's hello (filled in once the node actor exists): a task the
  /// chief connects to (a PS shard, a K-FAC role's host) knows the chief's
  /// node only, and says hello to it for the chief's roles when it has a
  /// preemption to pass on. Unset: such a task ends at once instead.
  std::shared_ptr<const node_hello> hello;
  /// Where the node's fault lines go (may be empty).
  std::function<void(const std::string&)> log;
};

struct supervisor_state {
  static inline const char* name = "supervisor";

  explicit supervisor_state() = default;

  supervisor_config cfg;
  std::optional<node_watch> watch;
  node_wiring wiring;
  /// The node program's request, answered at the end.
  caf::typed_response_promise<node_end> done;
  /// While connecting: what arrived before the node was wired.
  std::optional<node_end> early_end;
  std::vector<std::pair<std::string, caf::actor>> early_hellos;
  /// The chief's node actor as it said hello or was connected to last
  /// (watch->chief_here() says whether it is still up).
  caf::actor chief_node;
  /// A hosted role's failure, kept until the end.
  std::string role_failure;
  /// The next of the workers a rebind goes through, one after the other.
  size_t rebind_next = 0;
  /// The ask in force, per gradient worker of the task (by position), of
  /// where it rejoins: the only owner, so an answer to an ask a newer one
  /// replaced reaches nothing.
  std::map<size_t, std::shared_ptr<const int32_t>> rejoin_asks;
  /// A rebind that waits for this node to be connected again to the
  /// shards' hosts (a thawed worker's links to them went down too).
  bool rebind_after_reconnect = false;
  /// Connectors made so far, by task; stopped with the supervisor (one
  /// may be inside a connect attempt then, which it finishes first).
  std::map<std::string, connector_actor> connectors;
  std::shared_ptr<std::vector<caf::actor>> to_stop
    = std::make_shared<std::vector<caf::actor>>();
  /// Per peer being connected to again: until when (actor clock).
  std::map<std::string, caf::actor_clock::time_point> reconnect_until;

  void log(const std::string& line) const {
    if (cfg.log)
      cfg.log(cfg.me + ": " + line);
  }
};

supervisor_actor::behavior_type
supervisor(supervisor_actor::stateful_pointer<supervisor_state> self,
           supervisor_config cfg);

/// Spawns a supervisor; an error names the field of `cfg` that is wrong.
caf::expected<supervisor_actor> spawn_supervisor(caf::actor_system& sys,
                                                 supervisor_config cfg);

} // namespace syncfac
