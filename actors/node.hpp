#pragma once

// The node actor: the one actor a process of a cluster publishes on its
// port. A peer that connects says hello; the node checks that both speak
// the same protocol and know the same message types, and answers with the
// actors it hosts (by role name). The chief tells it when the run is over.
// It also watches the chief's node and tells its owner when that node goes
// down, so that no process of a cluster waits for a dead chief forever.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

using node_actor = caf::typed_actor<
  // A peer connected: who it is; answered with this node's roles, or an
  // error when protocol or message types differ (ec::bad_message), or when
  // one of the two is the chief and their fingerprints differ
  // (ec::invalid_config naming the field and both values).
  caf::replies_to<hello_atom, node_hello>::with<node_info>,
  // From a task that cannot join the run (its own setup refused it: a
  // batch larger than its data shard, a device it cannot make): who and
  // why, before it exits; answered once the owner was told, so that the
  // refusal reaches the chief before the task is gone. Only the chief's
  // node takes it (another answers ec::invalid_argument).
  caf::replies_to<refuse_atom, std::string, std::string>::with<caf::ok_atom>,
  // From the chief: the run is over (the reason is logged).
  caf::replies_to<shutdown_atom, std::string>::with<caf::ok_atom>,
  // From its own process: the peers that said hello so far (task names
  // and their node actors, the latest per task), e.g. for the chief to end
  // the nodes that joined on their own.
  caf::replies_to<hello_atom>::with<std::vector<std::string>,
                                    std::vector<caf::actor>>>;

struct node_config {
  task_id task;
  /// Actors hosted here, by role name; filled in before the node is
  /// published. Every answer also names the node actor itself ("node").
  std::shared_ptr<const std::map<std::string, caf::actor>> roles;
  /// Receives (shutdown_atom, std::string reason),
  /// (hello_atom, std::string peer, caf::actor peer_node) and, when this
  /// node refused a peer for its configuration,
  /// (hello_atom, std::string peer, std::string why); on the chief's node,
  /// when a task says it cannot join the run,
  /// (refuse_atom, std::string task, std::string why).
  caf::actor owner;
  /// The run this node was configured for; empty: not compared (a member
  /// written outside the library).
  config_fingerprint fingerprint;
  /// The task hosting the chief, whose fingerprint is the reference:
  /// chief:0, or worker:0 in a cluster without a chief job.
  task_id chief{"chief", 0};
  /// When set, the owner answers the chief's shutdown itself (with
  /// caf::ok_atom, a request the node delegates to it): the chief waits
  /// for that answer (bounded by its request timeout), so the owner may
  /// finish work first, e.g. an evaluator's final evaluation while the
  /// shards are still up. Otherwise the node answers at once.
  bool owner_confirms_shutdown = false;
};

/// What a node's owner implements when it confirms the chief's shutdown.
using shutdown_handler = caf::typed_actor<
  caf::replies_to<shutdown_atom, std::string>::with<caf::ok_atom>>;

struct node_state {
  static inline const char* name = "node";
  node_config cfg;
  /// Peers that said hello: task name -> their node actor.
  std::map<std::string, caf::actor> callers;
};

node_actor::behavior_type node(node_actor::stateful_pointer<node_state> self,
                               node_config cfg);

/// Every message type `sys` registered by name, sorted: syncfac's and any a
/// program added (cfg.add_message_type<T>("myproj::T")); CAF's own types,
/// which every node has, are left out. Nodes of one cluster must agree on
/// this list: a peer with a type the other does not know is refused at
/// hello with an error naming the type (CAF would drop its messages
/// silently).
std::vector<std::string> known_message_types(caf::actor_system& sys);

/// This node's hello to a peer.
node_hello make_hello(caf::actor_system& sys, const task_id& me,
                      const caf::actor& my_node,
                      config_fingerprint fingerprint = {});

/// Why node `me` (configured as `mine`) refuses the hello of `peer`
/// (configured as `theirs`), or an empty string. Only the chief's
/// configuration counts: the chief refuses a node that differs from it,
/// and a node refuses a chief that differs from it; two other nodes are not
/// compared (each agrees with the chief, so with each other), nor is a
/// side with an empty fingerprint. The text names the field and both
/// values ("worker:1 differs from the chief in ..."). `chief` is the task
/// hosting the chief (cluster_spec::chief_task).
std::string configuration_refusal(const task_id& me,
                                  const config_fingerprint& mine,
                                  const std::string& peer,
                                  const config_fingerprint& theirs,
                                  const task_id& chief = {"chief", 0});

/// Publishes `n` on `port` of the address `host` resolves to
/// (net::bind_address: a cluster entry's host or --bind; "0.0.0.0" or "::"
/// for every interface), with TLS when `tls`. Returns the numeric address
/// and port really bound.
caf::expected<host_port> publish_node(const node_actor& n,
                                      const std::string& host, uint16_t port,
                                      bool tls);

struct connect_options {
  bool tls = false;
  /// Longest wait for a peer to be reachable (it may still be starting).
  std::chrono::milliseconds timeout{60000};
  /// Pause between attempts at one peer (a timer message, not a sleep).
  std::chrono::milliseconds retry{250};
  /// Longest wait for a hello's answer.
  std::chrono::milliseconds request_timeout{10000};
  /// How often to log the peers still missing.
  std::chrono::milliseconds report_every{5000};
  /// Asked when a pause is over: an error ends the wait with it (the chief's
  /// node heard that a task cannot join the run: waiting for the others
  /// changes nothing). Unset: never.
  std::function<caf::error()> abandon;
};

/// Connects to every task of `peers` (each retried until it answers or the
/// deadline passes), says hello and returns their answers by task name
/// ("worker:1"). While it waits it logs, every report_every, which tasks
/// are still missing and since when; running out of time is ec::timeout
/// naming them; opts.abandon's error ends it too. The connecting is the
/// connector's (actors/node_connector.hpp); the caller waits once for its
/// answer.
caf::expected<std::map<std::string, node_info>>
connect_nodes(caf::actor_system& sys, caf::scoped_actor& self,
              const cluster_spec& cluster, const std::vector<task_id>& peers,
              const node_hello& hello, const connect_options& opts,
              std::ostream& log);

/// The node at `addr`, through CAF's middleman or the TLS one (`tls`),
/// with a bounded wait.
caf::expected<node_actor> reach_node(caf::actor_system& sys,
                                     caf::scoped_actor& self,
                                     const host_port& addr, bool tls,
                                     std::chrono::milliseconds timeout);

/// Why the answer `info` of the node at `addr`, which should be `task`,
/// ends the connecting (a different protocol or message types:
/// ec::bad_message; another task at that address: ec::invalid_config), or
/// none. `mine`: this node's message types, sorted.
caf::error check_node_answer(const task_id& task, const host_port& addr,
                             const node_info& info,
                             const std::vector<std::string>& mine);

/// The node actor of a connected node (the role every answer names
/// "node"); unset if `info` lacks it.
caf::actor node_of(const node_info& info);

/// The tasks of `peers` other than `me` that `known` (answers by task name)
/// does not hold yet, each once, in order.
std::vector<task_id>
missing_peers(const std::vector<task_id>& peers, const task_id& me,
              const std::map<std::string, node_info>& known);

/// The actor of role `role` in `info`, cast to `Handle`; an error names the
/// node and the role when it is missing.
template <class Handle>
caf::expected<Handle> role_of(const node_info& info, const std::string& role) {
  for (size_t i = 0; i < info.role_names.size(); ++i)
    if (info.role_names[i] == role && i < info.role_actors.size()
        && info.role_actors[i])
      return caf::actor_cast<Handle>(info.role_actors[i]);
  return make_error(ec::unknown_name, "node " + info.job + ":"
                                        + std::to_string(info.index)
                                        + " hosts no role " + role);
}

} // namespace syncfac
