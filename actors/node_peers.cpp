#include "actors/node_peers.hpp"

namespace syncfac {

node_peers::node_peers(
  caf::actor_system& sys, caf::scoped_actor& self, const cluster_spec& cluster,
  task_id me, const connect_options& opts,
  std::shared_ptr<const std::map<std::string, caf::actor>> hosted,
  std::ostream& log)
  : sys_(sys),
    self_(self),
    cluster_(cluster),
    me_(std::move(me)),
    opts_(opts),
    hosted_(std::move(hosted)),
    log_(log) {
}

caf::error node_peers::connect(const std::vector<task_id>& peers,
                               std::function<caf::error()> abandon) {
  auto missing = missing_peers(peers, me_, nodes_);
  if (missing.empty())
    return caf::none;
  auto opts = opts_;
  opts.abandon = std::move(abandon);
  auto infos = connect_nodes(sys_, self_, cluster_, missing, hello_,
                             opts, log_);
  if (!infos)
    return infos.error();
  for (auto& kvp : *infos)
    nodes_.emplace(kvp.first, std::move(kvp.second));
  return caf::none;
}

} // namespace syncfac
