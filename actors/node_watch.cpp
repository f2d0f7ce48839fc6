#include "actors/node_watch.hpp"

#include <algorithm>

namespace syncfac {

node_watch::node_watch(std::string chief, std::vector<std::string> peers)
  : chief_(std::move(chief)), peers_(std::move(peers)) {
}

void node_watch::host(const std::string& role, const caf::actor_addr& actor) {
  if (actor)
    by_addr_[actor] = node_loss{node_loss::hosted_role, role, {}};
}

bool node_watch::is_peer(const std::string& task) const {
  return std::find(peers_.begin(), peers_.end(), task) != peers_.end();
}

caf::actor node_watch::connected(const std::string& task,
                                 const caf::actor& node,
                                 std::optional<node_info> info) {
  if (info)
    nodes_[task] = std::move(*info);
  if (!node || (task != chief_ && !is_peer(task)))
    return {};
  auto i = watched_.find(task);
  if (i != watched_.end()) {
    if (i->second == node.address())
      return {};
    // A new node of the same task (a restart): the old one's down message
    // means nothing any more.
    by_addr_.erase(i->second);
  }
  watched_[task] = node.address();
  auto kind = task == chief_ ? node_loss::chief_node : node_loss::peer_node;
  by_addr_[node.address()] = node_loss{kind, task, {}};
  return node;
}

std::optional<node_loss> node_watch::went_down(const caf::actor_addr& source,
                                               const std::string& reason) {
  auto i = by_addr_.find(source);
  if (i == by_addr_.end())
    return std::nullopt;
  auto loss = i->second;
  loss.reason = reason;
  by_addr_.erase(i);
  if (loss.kind != node_loss::hosted_role) {
    watched_.erase(loss.name);
    // Its roles cannot be reached through the old connection any more.
    nodes_.erase(loss.name);
  }
  return loss;
}

uint64_t node_watch::begin_wait() {
  return ++wait_;
}

} // namespace syncfac
