#include "actors/node_supervisor_configs.hpp"

#include <set>

#include "actors/node_connector.hpp"

namespace syncfac {

std::function<connector_actor(const std::string&)>
connector_for(caf::actor_system& sys, const cluster_spec& cluster,
              connect_options opts, std::shared_ptr<const node_hello> hello) {
  // Each connect attempt tries for a second (as a node did before it had a
  // supervisor), so that a connector stops soon after the run ends.
  opts.timeout = std::chrono::milliseconds{1000};
  opts.abandon = {};
  auto* s = &sys;
  return [s, cluster, opts, hello](const std::string&) {
    return spawn_node_connector(*s, cluster, *hello, opts);
  };
}

namespace {

std::function<void(const std::string&)> log_to(std::ostream& log) {
  auto* out = &log;
  return [out](const std::string& line) { *out << line << std::endl; };
}

std::vector<role_place> places(const std::vector<planned_role>& roles) {
  std::vector<role_place> out;
  for (const auto& r : roles)
    out.push_back({r.host.str(), r.name()});
  return out;
}

} // namespace

supervisor_config node_supervisor_config(
  caf::actor_system& sys, const node_plan& plan, const cluster_spec& cluster,
  const connect_options& connect, std::shared_ptr<const node_hello> hello,
  std::ostream& log) {
  supervisor_config sc;
  sc.me = plan.task.str();
  sc.chief = plan.chief.str();
  sc.chief_address = cluster.address(plan.chief).str();
  sc.reconnects_to_chief = plan.connects_to_chief;
  std::set<std::string> peers;
  for (const auto& t : plan.watched)
    peers.insert(t.str());
  sc.peers.assign(peers.begin(), peers.end());
  for (const auto& r : plan.shards)
    sc.shard_roles.emplace_back(r.host.str(), r.name());
  if (plan.worker >= 0) {
    if (plan.gradient_worker)
      for (int32_t k = 0; k < plan.hosted_workers; ++k)
        sc.gradient_workers.push_back(plan.worker + k);
    else
      sc.stats_worker = true;
    if (plan.sends_statistics)
      for (const auto& r : plan.covariance)
        sc.covariance_roles.emplace_back(r.host.str(), r.name());
  }
  sc.max_wait = plan.waits.max_wait;
  sc.request_timeout = plan.waits.request_timeout;
  sc.preempt_wait = plan.waits.preempt_wait;
  sc.connect_attempt = plan.waits.connect_attempt;
  sc.connector = connector_for(sys, cluster, connect, hello);
  sc.hello = std::move(hello);
  sc.log = log_to(log);
  return sc;
}

chief_supervisor_config chief_node_supervisor_config(
  caf::actor_system& sys, const node_plan& plan, const cluster_spec& cluster,
  const connect_options& connect, std::chrono::milliseconds probe_timeout,
  std::shared_ptr<const node_hello> hello, std::ostream& log) {
  chief_supervisor_config sc;
  sc.me = plan.task.str();
  for (const auto& t : cluster.tasks())
    sc.addresses[t.str()] = cluster.address(t).str();
  for (const auto& t : plan.passive)
    sc.passive.insert(t.str());
  auto& pl = sc.placement;
  pl.shards = places(plan.shards);
  pl.workers = places(plan.workers);
  pl.stats_workers = places(plan.stats_workers);
  pl.covariance = places(plan.covariance);
  pl.inverses = places(plan.inverses);
  sc.max_wait = plan.waits.max_wait;
  sc.request_timeout = plan.waits.request_timeout;
  sc.probe_timeout = probe_timeout;
  sc.connect_attempt = plan.waits.connect_attempt;
  sc.connector = connector_for(sys, cluster, connect, hello);
  sc.hello = std::move(hello);
  sc.log = log_to(log);
  return sc;
}

} // namespace syncfac
