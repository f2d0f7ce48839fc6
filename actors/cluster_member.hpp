#pragma once

// Joining a cluster from outside the library: a program with roles of its
// own (an evaluator, a monitor, anything a user writes) becomes a task of
// the cluster file like the library's nodes. It publishes a node actor
// hosting its roles by name, connects to the chief and the peers it needs
// and gets their roles' handles; from then on the node's supervisor
// (actors/supervisor.hpp, the one every library node but the chief's has)
// watches the roles and the peers' nodes, connects again to a peer whose
// node went down (bounded by max_wait, no sleeping), and tells the
// program's member role (member_role_actor, an actor the program writes)
// as messages: a peer lost, the peer back with its roles' new handles, the
// end of the run. The handshake is the library's (actors/node.hpp): same
// protocol, same registered message types, or the connection is refused
// with an error naming the difference.
//
//   auto m = cluster_member::make(sys, cfg, std::cout); // evaluator:0; peers
//   (*m)->host("evaluator:0", my_role);
//   (*m)->publish();
//   (*m)->connect();                          // the chief and cfg.peers
//   auto sink = (*m)->role<metrics_actor>({"chief", 0}, "metrics");
//   auto program = sys.spawn(my_member_role, *sink);
//   auto end = (*m)->run(program, max);       // node_end: how it ended
//
// The chief (actors/cluster_node.cpp) ends a run by telling the nodes that
// connected to it first, and waits for their answer: the supervisor
// answers only after the member role answered its shutdown_atom, so the
// role can finish work (a final evaluation) while the shards are still up.

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/config_fingerprint.hpp"

namespace syncfac {

struct member_config {
  cluster_spec cluster;
  /// The task this process is (its job may be any job of the cluster
  /// file, e.g. "evaluator").
  task_id task;
  /// The tasks besides the chief it connects to and watches (e.g. every
  /// PS shard): connected to again when their node goes down.
  std::vector<task_id> peers;
  /// Peers: TLS, how long to wait for each at start, how often to retry.
  connect_options connect;
  /// As cluster_run_config's: --bind, and plaintext beyond loopback.
  std::string bind;
  bool insecure = false;
  /// Longest wait for a peer whose node went down to be back (a restart of
  /// its process on the same address), as the library's --max_wait_ms; the
  /// chief not back by then ends the member (ec::timeout naming it).
  std::chrono::milliseconds max_wait{300000};
  /// Longest wait for the chief's word after the member passed a
  /// preemption on to it (supervisor_config::preempt_wait).
  std::chrono::milliseconds preempt_wait{60000};
  /// Longest wait for the member role's answer to the end of the run.
  std::chrono::milliseconds finish_timeout{60000};
  /// What this task must agree on with the chief, sent with every hello
  /// (e.g. make_model_fingerprint for an evaluator): the chief refuses a
  /// member configured for another run, naming the field and both values,
  /// and that refusal ends the run. Empty: nothing is compared.
  config_fingerprint fingerprint;

  caf::error validate() const;
};

class cluster_member {
public:
  /// Validates `cfg` and spawns the member's node (not yet published) and
  /// its supervisor. Logs (connections, peers going down) go to `log`.
  static caf::expected<std::unique_ptr<cluster_member>>
  make(caf::actor_system& sys, member_config cfg, std::ostream& log);

  ~cluster_member();

  cluster_member(const cluster_member&) = delete;
  cluster_member& operator=(const cluster_member&) = delete;

  /// Hosts `role` under `name` (peers find it by that name); call before
  /// publish(). The supervisor watches it: a role that stops on an error
  /// ends the member (after its failure grace) naming it.
  void host(const std::string& name, caf::actor role);

  /// Publishes the node on this task's port of the cluster file (a task
  /// outside the cluster, TensorFlow's evaluator, listens nowhere).
  caf::error publish();

  /// Connects to the chief and every task of member_config::peers, once,
  /// at start: retries until connect.timeout, then ec::timeout naming who
  /// is missing; a peer that refuses (protocol, message types) is
  /// ec::bad_message at once.
  caf::error connect();

  /// The handle of role `name` hosted by the connected task `host`, as it
  /// answered at connect() (afterwards the member role hears new ones).
  template <class Handle>
  caf::expected<Handle> role(const task_id& host,
                             const std::string& name) const {
    auto i = peers_.find(host.str());
    if (i == peers_.end())
      return make_error(ec::unknown_name, me() + " is not connected to "
                                            + host.str());
    return role_of<Handle>(i->second, name);
  }

  /// Hands the connected member to its supervisor, with `member_role`
  /// (watched as a hosted role) to tell the run's events, and waits for the
  /// run's end for this node, at most `max` (ec::timeout saying so): the
  /// chief's word (exit 0, or exit_codes::preempted for a preempted run), a
  /// peer or the chief not back within max_wait or a hosted role's failure
  /// (exit 1), or a preemption passed on (exit_codes::preempted).
  caf::expected<node_end> run(member_role_actor member_role,
                              std::chrono::milliseconds max);

  /// The node's supervisor: a stop signal's way in (preempt_atom with the
  /// signal's name), as on the library's nodes: the chief is told and ends
  /// the run after the global step in flight.
  const supervisor_actor& supervisor() const {
    return supervisor_;
  }

  /// "evaluator:0".
  std::string me() const {
    return cfg_.task.str();
  }

private:
  cluster_member(caf::actor_system& sys, member_config cfg, std::ostream& log,
                 supervisor_actor supervisor,
                 std::shared_ptr<node_hello> hello);

  caf::actor_system& sys_;
  member_config cfg_;
  std::ostream& log_;
  /// Waits for the connector at connect() and for the supervisor's end.
  caf::scoped_actor self_;
  std::shared_ptr<std::map<std::string, caf::actor>> roles_;
  supervisor_actor supervisor_;
  node_actor node_;
  std::shared_ptr<node_hello> hello_;
  /// What the peers answered at connect(), by task.
  std::map<std::string, node_info> peers_;
};

} // namespace syncfac
