#pragma once

// Joining a cluster from outside the library: a program with roles of its
// own (an evaluator, a monitor, anything a user writes) becomes a task of
// the cluster file like the library's nodes. It publishes a node actor
// hosting its roles by name, connects to the peers it needs and gets their
// roles' handles, notices when a peer's node goes down and reconnects to
// it (bounded), and ends when the chief ends the run. The handshake is the
// library's (actors/node.hpp): same protocol, same registered message
// types, or the connection is refused with an error naming the difference.
//
//   auto m = cluster_member::make(sys, cfg, std::cout);   // task evaluator:0
//   (*m)->host("evaluator:0", my_role);
//   (*m)->publish();
//   (*m)->connect({{"chief", 0}, {"ps", 0}});
//   auto sink = (*m)->role<metrics_actor>({"chief", 0}, "metrics");
//   while (!(*m)->ended()) { (*m)->wait(poll); ... }
//
// The chief (actors/cluster_node.cpp) ends a run by telling the nodes that
// connected to it first, and waits for their answer: a member answers only
// after its on_shutdown hook returned, so it can finish work (a final
// evaluation) while the shards are still up.

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
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/config_fingerprint.hpp"

namespace syncfac {

struct member_config {
  cluster_spec cluster;
  /// The task this process is (its job may be any job of the cluster
  /// file, e.g. "evaluator").
  task_id task;
  /// Peers: TLS, how long to wait for each, how often to retry.
  connect_options connect;
  /// As cluster_run_config's: --bind, and plaintext beyond loopback.
  std::string bind;
  bool insecure = false;
  /// Most times one peer may go down and be reconnected to (a restart of
  /// its process on the same address); one more is an error.
  int32_t max_reconnects = 5;
  /// What this task must agree on with the chief, sent with every hello
  /// (e.g. make_model_fingerprint for an evaluator): the chief refuses a
  /// member configured for another run, naming the field and both values,
  /// and that refusal ends the run. Empty: nothing is compared.
  config_fingerprint fingerprint;

  caf::error validate() const;
};

class cluster_member {
public:
  /// Validates `cfg` and spawns the member's node (not yet published).
  /// Logs (connections, peers going down) go to `log`.
  static caf::expected<std::unique_ptr<cluster_member>>
  make(caf::actor_system& sys, member_config cfg, std::ostream& log);

  ~cluster_member();

  cluster_member(const cluster_member&) = delete;
  cluster_member& operator=(const cluster_member&) = delete;

  /// Hosts `role` under `name` (peers find it by that name); call before
  /// publish().
  void host(const std::string& name, caf::actor role);

  /// Publishes the node on this task's port of the cluster file (a task
  /// outside the cluster, TensorFlow's evaluator, listens nowhere).
  caf::error publish();

  /// Connects to every task of `peers` not connected yet: retries until
  /// connect.timeout, then ec::timeout naming who is missing; a peer that
  /// refuses (protocol, message types) is ec::bad_message at once.
  caf::error connect(const std::vector<task_id>& peers);

  /// The handle of role `name` hosted by the connected task `host`.
  template <class Handle>
  caf::expected<Handle> role(const task_id& host,
                             const std::string& name) const {
    auto i = peers_.find(host.str());
    if (i == peers_.end())
      return make_error(ec::unknown_name, me() + " is not connected to "
                                            + host.str());
    return role_of<Handle>(i->second, name);
  }

  /// Forgets `peer` and connects to it again (bounded as connect()):
  /// after a request to one of its roles failed, or its node went down.
  /// The reconnection counts against max_reconnects.
  caf::error reconnect(const task_id& peer);

  /// Waits up to `d` for the chief's end of the run or a connected peer's
  /// node going down (which reconnect() handles: an error when the peer
  /// does not come back in time, or too often). Returns ended().
  caf::expected<bool> wait(std::chrono::milliseconds d);

  /// Waits until the chief ends the run, at most `max`; running out of
  /// time is ec::timeout saying so.
  caf::error wait_for_end(std::chrono::milliseconds max);

  /// Whether the chief ended the run, and why.
  bool ended() const {
    return ended_;
  }
  const std::string& end_reason() const {
    return end_reason_;
  }

  /// Peers reconnected since the last call: their role handles changed.
  std::vector<task_id> take_reconnected();

  /// Runs when the chief ends the run, before this member confirms it (the
  /// chief waits, bounded by its request timeout). It runs inside the
  /// member's receive: make requests from a caf::scoped_actor of its own,
  /// not from self().
  std::function<void(const std::string& reason)> on_shutdown;

  /// The member's blocking actor, for requests between waits.
  caf::scoped_actor& self() {
    return self_;
  }

  /// "evaluator:0".
  std::string me() const {
    return cfg_.task.str();
  }

  caf::actor_system& system() {
    return sys_;
  }

private:
  cluster_member(caf::actor_system& sys, member_config cfg,
                 std::ostream& log);

  caf::error add_peers(const std::vector<task_id>& peers,
                       const connect_options& opts);

  caf::actor_system& sys_;
  member_config cfg_;
  std::ostream& log_;
  caf::scoped_actor self_;
  std::shared_ptr<std::map<std::string, caf::actor>> roles_;
  node_actor node_;
  node_hello hello_;
  /// Connected peers' answers, and their node actors (monitored), by task.
  std::map<std::string, node_info> peers_;
  std::map<std::string, caf::actor> peer_nodes_;
  std::map<std::string, int32_t> reconnects_;
  std::vector<task_id> reconnected_;
  bool ended_ = false;
  std::string end_reason_;
};

} // namespace syncfac
