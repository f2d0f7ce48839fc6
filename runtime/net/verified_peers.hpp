#pragma once

// The tasks a node's TLS connections verified, by the CAF node id each
// peer announced in its hello (runtime/net/task_identity.hpp). Internal to
// runtime/net: the TLS sessions add and remove entries on the multiplexer
// thread, the cluster's node actor asks through net::verified_task.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <caf/actor_system.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac::net {

class verified_peers {
public:
  /// A connection from `node` verified as task `t` (one entry per live
  /// connection).
  void add(const std::string& node, const task_id& t);

  /// That connection ended.
  void remove(const std::string& node, const task_id& t);

  /// The task verified for `node` when its live connections agree on one.
  std::optional<task_id> find(const std::string& node) const;

  /// A hello with the peer at `address` ("host:port") ended in a refusal,
  /// either way; `why` says it in full.
  void refused(const std::string& address, std::string why);

  /// The last refusal with `address`; "" when there was none.
  std::string refusal(const std::string& address) const;

private:
  mutable std::mutex mtx_;
  std::map<std::string, std::map<task_id, int>> live_;
  std::map<std::string, std::string> refusals_;
};

/// The registry of `sys`, made on first use when `create`; nullptr when it
/// has none and `create` is false.
std::shared_ptr<verified_peers> verified_peers_of(caf::actor_system& sys,
                                                  bool create);

/// Drops the registry of `sys` (its TLS middleman ends).
void forget_verified_peers(caf::actor_system& sys);

} // namespace syncfac::net
