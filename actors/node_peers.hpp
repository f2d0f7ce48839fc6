#pragma once

// A node's peers and where its roles' peers live: the tasks it connected
// to (their answers to its hello) and the roles it hosts itself. A role
// of the node plan (runtime/cluster/node_plan.hpp) is found here or on
// its host, which is connected to first if it is not yet.

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node.hpp"
#include "runtime/base/error.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/node_plan.hpp"

namespace syncfac {

class node_peers {
public:
  /// `me` connects to tasks of `cluster` as `opts` says, saying `hello`
  /// (set once the node actor exists); `hosted` are the roles it hosts.
  node_peers(caf::actor_system& sys, caf::scoped_actor& self,
             const cluster_spec& cluster, task_id me,
             const connect_options& opts,
             std::shared_ptr<const std::map<std::string, caf::actor>> hosted,
             std::ostream& log);

  void hello(node_hello h) {
    hello_ = std::move(h);
  }

  /// Connects to the tasks of `peers` not connected yet; `abandon` as
  /// connect_options says.
  caf::error connect(const std::vector<task_id>& peers,
                     std::function<caf::error()> abandon = {});

  /// The peers connected to so far (and as answered later), by task.
  std::map<std::string, node_info>& nodes() {
    return nodes_;
  }

  /// The actor of `role` hosted by `host` (here or on a connected node).
  template <class Handle>
  caf::expected<Handle> find(const task_id& host, const std::string& role) {
    if (host == me_) {
      auto i = hosted_->find(role);
      if (i == hosted_->end())
        return make_error(ec::internal, me_.str() + " does not host " + role);
      return caf::actor_cast<Handle>(i->second);
    }
    auto i = nodes_.find(host.str());
    if (i == nodes_.end())
      return make_error(ec::internal, me_.str() + " is not connected to "
                                        + host.str());
    return role_of<Handle>(i->second, role);
  }

  /// The actors of `roles`, in order (their hosts connected first).
  template <class Handle>
  caf::expected<std::vector<Handle>>
  find_all(const std::vector<planned_role>& roles) {
    if (auto err = connect(node_plan::hosts_of(roles)))
      return err;
    std::vector<Handle> out;
    for (const auto& r : roles) {
      auto h = find<Handle>(r.host, r.name());
      if (!h)
        return h.error();
      out.push_back(*h);
    }
    return out;
  }

private:
  caf::actor_system& sys_;
  caf::scoped_actor& self_;
  const cluster_spec& cluster_;
  task_id me_;
  connect_options opts_;
  std::shared_ptr<const std::map<std::string, caf::actor>> hosted_;
  std::ostream& log_;
  node_hello hello_;
  std::map<std::string, node_info> nodes_;
};

} // namespace syncfac
