#pragma once

// What a node's supervisor watches and what a down message means: the pure
// part of the supervisor (actors/supervisor.hpp), without an actor. It
// knows the roles this node hosts, the node actors of the peers it is
// connected to (by task name), and the waits in progress, so that the
// supervisor's behaviours only decide what to do next. docs/design.md,
// "Failure model", tells the whole fault path.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/expected.hpp>

#include "actors/node.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

/// What went away, as the supervisor's down handler tells its behaviour.
struct node_loss {
  enum kind_type : int32_t {
    /// A role hosted by this node stopped (an error of its own).
    hosted_role = 0,
    /// The chief's node went down (killed, or frozen beyond the
    /// connection timeout).
    chief_node = 1,
    /// A watched peer's node went down (a PS shard, a K-FAC role's host).
    peer_node = 2,
  };
  int32_t kind = hosted_role;
  /// The role ("worker:1") or task ("ps:0", "chief:0").
  std::string name;
  /// CAF's exit reason, rendered.
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_loss& x) {
  return f(caf::meta::type_name("node_loss"), x.kind, x.name, x.reason);
}

class node_watch {
public:
  /// `chief`: the chief's task ("chief:0"); `peers`: the tasks whose nodes
  /// are watched and connected to again when they go down (never the
  /// chief, never this node's own task).
  node_watch(std::string chief, std::vector<std::string> peers);

  const std::string& chief() const {
    return chief_;
  }

  /// A role this node hosts, to be monitored.
  void host(const std::string& role, const caf::actor_addr& actor);

  /// `task`'s node answered (at start, after a reconnect, or in a hello):
  /// keeps its node information when given and answers the node actor to
  /// monitor, unset when `task` is neither the chief nor a watched peer or
  /// the node is the one already watched.
  caf::actor connected(const std::string& task, const caf::actor& node,
                       std::optional<node_info> info = std::nullopt);

  /// What the down message of `source` means, if it is one of ours; the
  /// node or role is forgotten (a new one is watched once it is back).
  std::optional<node_loss> went_down(const caf::actor_addr& source,
                                     const std::string& reason);

  /// Whether the chief's node is watched now (it said hello or was
  /// connected to, and has not gone down since).
  bool chief_here() const {
    return watched_.count(chief_) > 0;
  }

  /// Whether `task`'s node information is known (it was connected to and
  /// has not gone down since; a hello alone does not say it).
  bool knows(const std::string& task) const {
    return nodes_.count(task) > 0;
  }

  /// Every task's node information known now, by task name.
  const std::map<std::string, node_info>& nodes() const {
    return nodes_;
  }

  /// Forgets `task`'s node information (a role it hosts was lost: the
  /// answer of its node when it is back counts, not the old one).
  void forget(const std::string& task) {
    nodes_.erase(task);
  }

  /// Whether `task` is a watched peer (connected to again when lost).
  bool is_peer(const std::string& task) const;

  /// The actor of role `role` hosted by task `task`, from the node
  /// information it answered last; an error names both when it is missing.
  template <class Handle>
  caf::expected<Handle> role(const std::string& task,
                             const std::string& role) const {
    auto i = nodes_.find(task);
    if (i == nodes_.end())
      return make_error(ec::peer_lost, "not connected to " + task
                                         + " (for its " + role + ")");
    return role_of<Handle>(i->second, role);
  }

  /// Begins a bounded wait and answers its number; a deadline message
  /// ends the wait it was set for only (an earlier one is over).
  uint64_t begin_wait();

private:
  std::string chief_;
  std::vector<std::string> peers_;
  /// Monitored: node or role actor -> task or role name.
  std::map<caf::actor_addr, node_loss> by_addr_;
  /// Task name -> the node actor watched now.
  std::map<std::string, caf::actor_addr> watched_;
  /// Task name -> what its node answered last.
  std::map<std::string, node_info> nodes_;
  uint64_t wait_ = 0;
};

} // namespace syncfac
