#include "actors/cluster_member.hpp"

#include <algorithm>

#include <caf/exit_reason.hpp>

#include "actors/node_supervisor_configs.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/listen_address.hpp"

namespace syncfac {

namespace {

/// The member's supervisor: it connects to the chief itself (the chief
/// does not connect to a member), and watches the peers it connected to.
supervisor_config member_supervisor_config(caf::actor_system& sys,
                                           const member_config& cfg,
                                           std::shared_ptr<node_hello> hello,
                                           std::ostream& log) {
  supervisor_config sc;
  auto chief = cfg.cluster.chief_task();
  sc.me = cfg.task.str();
  sc.chief = chief.str();
  sc.chief_address = cfg.cluster.address(chief).str();
  sc.reconnects_to_chief = true;
  for (const auto& p : cfg.peers)
    if (std::find(sc.peers.begin(), sc.peers.end(), p.str())
        == sc.peers.end())
      sc.peers.push_back(p.str());
  sc.max_wait = cfg.max_wait;
  sc.request_timeout = cfg.connect.request_timeout;
  sc.preempt_wait = cfg.preempt_wait;
  sc.member_finish = cfg.finish_timeout;
  sc.connector = connector_for(sys, cfg.cluster, cfg.connect, hello);
  sc.hello = std::move(hello);
  auto* out = &log;
  sc.log = [out](const std::string& line) { *out << line << std::endl; };
  return sc;
}

} // namespace

caf::error member_config::validate() const {
  if (auto err = cluster.validate())
    return err;
  // TensorFlow's evaluator outside "cluster" joins without an address.
  bool outside = task.job == "evaluator" && task.index == 0
                 && cluster.count("evaluator") == 0;
  if (!cluster.contains(task) && !outside)
    return make_error(ec::invalid_config,
                      "task " + task.str() + " is not in the cluster");
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config,
                      "cluster member " + task.str() + ": " + what);
  };
  for (const auto& p : peers) {
    if (!cluster.contains(p))
      return bad("peer " + p.str() + " is not in the cluster");
    if (p == task || p == cluster.chief_task())
      return bad("peer " + p.str()
                 + " is this task or the chief (always connected to)");
  }
  if (connect.timeout.count() <= 0 || connect.retry.count() <= 0
      || connect.request_timeout.count() <= 0)
    return bad("connect timeouts and retry must be positive");
  if (max_wait.count() <= 0 || preempt_wait.count() <= 0
      || finish_timeout.count() <= 0)
    return bad("max_wait, preempt_wait and finish_timeout must be positive");
  return net::require_tls_off_loopback(cluster, bind, connect.tls, insecure);
}

caf::expected<std::unique_ptr<cluster_member>>
cluster_member::make(caf::actor_system& sys, member_config cfg,
                     std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  // Filled in once the node actor exists; the connectors read it later.
  auto hello = std::make_shared<node_hello>();
  auto sup = spawn_supervisor(sys, member_supervisor_config(sys, cfg, hello,
                                                            log));
  if (!sup)
    return with_context(sup.error(), cfg.task.str());
  return std::unique_ptr<cluster_member>{
    new cluster_member(sys, std::move(cfg), log, *sup, std::move(hello))};
}

cluster_member::cluster_member(caf::actor_system& sys, member_config cfg,
                               std::ostream& log, supervisor_actor supervisor,
                               std::shared_ptr<node_hello> hello)
  : sys_(sys),
    cfg_(std::move(cfg)),
    log_(log),
    self_(sys),
    roles_(std::make_shared<std::map<std::string, caf::actor>>()),
    supervisor_(std::move(supervisor)),
    hello_(std::move(hello)) {
  node_config nc;
  nc.task = cfg_.task;
  nc.roles = roles_;
  nc.chief = cfg_.cluster.chief_task();
  nc.owner = caf::actor_cast<caf::actor>(supervisor_);
  nc.owner_confirms_shutdown = true;
  node_ = sys_.spawn(node, std::move(nc));
  *hello_ = make_hello(sys_, cfg_.task, caf::actor_cast<caf::actor>(node_),
                       cfg_.fingerprint);
}

cluster_member::~cluster_member() {
  self_->send_exit(node_, caf::exit_reason::user_shutdown);
  self_->send_exit(supervisor_, caf::exit_reason::user_shutdown);
}

void cluster_member::host(const std::string& name, caf::actor role) {
  (*roles_)[name] = std::move(role);
}

caf::error cluster_member::publish() {
  auto warning = net::insecure_warning(cfg_.cluster, cfg_.bind,
                                       cfg_.connect.tls);
  if (!warning.empty())
    log_ << me() << ": " << warning << std::endl;
  if (!cfg_.cluster.contains(cfg_.task)) {
    // TensorFlow's evaluator outside "cluster": nobody connects to it (the
    // chief ends the run over the connection this member made).
    log_ << me() << ": not listening (a task outside the cluster, as "
         << "TensorFlow's evaluator)" << std::endl;
    return caf::none;
  }
  const auto& addr = cfg_.cluster.address(cfg_.task);
  auto bound = publish_node(node_, cfg_.bind.empty() ? addr.host : cfg_.bind,
                            addr.port, cfg_.connect.tls);
  if (!bound)
    return with_context(bound.error(), me());
  std::string hosted;
  for (const auto& kvp : *roles_)
    hosted += (hosted.empty() ? "" : ", ") + kvp.first;
  log_ << me() << ": listening on " << bound->str()
       << (bound->str() == addr.str() ? ""
                                       : " (cluster entry " + addr.str() + ")")
       << (cfg_.connect.tls ? " (TLS)" : "") << ", hosting "
       << (hosted.empty() ? "no roles" : hosted) << std::endl;
  return caf::none;
}

caf::error cluster_member::connect() {
  std::vector<task_id> peers{cfg_.cluster.chief_task()};
  peers.insert(peers.end(), cfg_.peers.begin(), cfg_.peers.end());
  auto missing = missing_peers(peers, cfg_.task, peers_);
  if (missing.empty())
    return caf::none;
  auto infos = connect_nodes(sys_, self_, cfg_.cluster, missing, *hello_,
                             cfg_.connect, log_);
  if (!infos)
    return with_context(infos.error(), me());
  for (auto& kvp : *infos)
    peers_[kvp.first] = std::move(kvp.second);
  return caf::none;
}

caf::expected<node_end> cluster_member::run(member_role_actor member_role,
                                            std::chrono::milliseconds max) {
  node_wiring wiring;
  wiring.nodes = peers_;
  wiring.hosted = *roles_;
  wiring.hosted[me() + "'s member role"]
    = caf::actor_cast<caf::actor>(member_role);
  wiring.member = std::move(member_role);
  caf::expected<node_end> out{caf::error{}};
  self_->request(supervisor_, max, run_atom::value, std::move(wiring))
    .receive([&](node_end& end) { out = std::move(end); },
             [&](caf::error& err) {
               if (err == caf::sec::request_timeout)
                 err = make_error(ec::timeout,
                                  me() + ": the run did not end within "
                                    + std::to_string(max.count()) + " ms");
               out = std::move(err);
             });
  return out;
}

} // namespace syncfac
