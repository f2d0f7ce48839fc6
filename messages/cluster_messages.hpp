#pragma once

// Messages between the nodes of a cluster (one actor system per task of
// the cluster file): the handshake that tells a connecting peer who a node
// is, what run it was configured for, and which actors it hosts.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "runtime/cluster/config_fingerprint.hpp"
#include "runtime/inspect.hpp"

namespace syncfac {

/// The wire protocol's version: nodes of one cluster must agree on it.
/// Bump it whenever a message changes its fields.
/// 4: shard_params carries rows, and a pull may ask for rows
/// (messages/row_pull.hpp); the shards' norm_atom and the scaled apply
/// of --clip_norm.
/// 5: a batch carries its dropout noise seed.
/// 6: one atom, one meaning: a worker's node asks the chief where it
/// rejoins with rejoin_atom, the chief's supervisor rolls the chief back
/// with rollback_atom (the workers' resume points with it) and tells roles
/// their peers with rewire_atom (restore_atom restores snapshots only).
/// 7: shard_status says the shard's last apply (its step and clip
/// factor), which a restarted chief completes on the shards it missed.
constexpr uint32_t cluster_protocol = 7;

/// What a connecting node says about itself.
struct node_hello {
  std::string job;
  int32_t index = 0;
  uint32_t protocol = cluster_protocol;
  /// The message types the caller's actor system knows (registered names).
  std::vector<std::string> message_types;
  /// The caller's node actor, so the callee can watch it (may be unset).
  caf::actor node;
  /// The run the caller was configured for (actors/run_fingerprint.hpp);
  /// empty from a member written outside the library (not compared).
  config_fingerprint fingerprint;
};

SYNCFAC_INSPECT(node_hello, x.job, x.index, x.protocol, x.message_types,
                x.node, x.fingerprint)

/// A node's answer to a hello: who it is and the actors it hosts, by role
/// name ("ps:0", "chief", "covariance:1", "inverse:0", "worker:2").
struct node_info {
  std::string job;
  int32_t index = 0;
  uint32_t protocol = cluster_protocol;
  std::vector<std::string> message_types;
  std::vector<std::string> role_names;
  std::vector<caf::actor> role_actors;
};

SYNCFAC_INSPECT(node_info, x.job, x.index, x.protocol, x.message_types,
                x.role_names, x.role_actors)

} // namespace syncfac
