#include "actors/cluster_member.hpp"

#include <algorithm>

#include <caf/exit_reason.hpp>

#include "runtime/base/error.hpp"
#include "runtime/net/listen_address.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// Longest wait for a hello's answer when reconnecting (see reconnect()).
constexpr std::chrono::milliseconds reconnect_hello{3000};

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
  if (connect.timeout.count() <= 0 || connect.retry.count() <= 0
      || connect.request_timeout.count() <= 0)
    return make_error(ec::invalid_config,
                      "cluster member " + task.str()
                        + ": connect timeouts and retry must be positive");
  if (max_reconnects < 0)
    return make_error(ec::invalid_config,
                      "cluster member " + task.str()
                        + ": max_reconnects must be >= 0");
  return net::require_tls_off_loopback(cluster, bind, connect.tls, insecure);
}

caf::expected<std::unique_ptr<cluster_member>>
cluster_member::make(caf::actor_system& sys, member_config cfg,
                     std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  return std::unique_ptr<cluster_member>{
    new cluster_member(sys, std::move(cfg), log)};
}

cluster_member::cluster_member(caf::actor_system& sys, member_config cfg,
                               std::ostream& log)
  : sys_(sys),
    cfg_(std::move(cfg)),
    log_(log),
    self_(sys),
    roles_(std::make_shared<std::map<std::string, caf::actor>>()) {
  node_config nc;
  nc.task = cfg_.task;
  nc.roles = roles_;
  nc.owner = caf::actor_cast<caf::actor>(self_);
  nc.owner_confirms_shutdown = true;
  node_ = sys_.spawn(node, std::move(nc));
  hello_ = make_hello(sys_, cfg_.task, caf::actor_cast<caf::actor>(node_),
                      cfg_.fingerprint);
}

cluster_member::~cluster_member() {
  self_->send_exit(node_, caf::exit_reason::user_shutdown);
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

caf::error cluster_member::add_peers(const std::vector<task_id>& peers,
                                     const connect_options& opts) {
  auto infos = connect_nodes(sys_, self_, cfg_.cluster, peers, hello_, opts,
                             log_);
  if (!infos)
    return with_context(infos.error(), me());
  for (auto& kvp : *infos) {
    auto n = node_of(kvp.second);
    if (n) {
      self_->monitor(n);
      peer_nodes_[kvp.first] = n;
    }
    peers_[kvp.first] = std::move(kvp.second);
  }
  return caf::none;
}

caf::error cluster_member::connect(const std::vector<task_id>& peers) {
  auto missing = missing_peers(peers, cfg_.task, peers_);
  if (missing.empty())
    return caf::none;
  return add_peers(missing, cfg_.connect);
}

caf::error cluster_member::reconnect(const task_id& peer) {
  auto name = peer.str();
  auto& n = reconnects_[name];
  if (n >= cfg_.max_reconnects)
    return make_error(ec::peer_down,
                      me() + ": " + name + " went away again after "
                        + std::to_string(n)
                        + " reconnection(s) (max_reconnects)");
  ++n;
  auto i = peer_nodes_.find(name);
  if (i != peer_nodes_.end()) {
    self_->demonitor(i->second);
    peer_nodes_.erase(i);
  }
  peers_.erase(name);
  log_ << me() << ": reconnecting to " << name << " at "
       << cfg_.cluster.address(peer).str() << " (" << n << " of "
       << cfg_.max_reconnects << ")" << std::endl;
  // CAF's middleman caches the handle of the peer's last incarnation
  // until it has seen that node go down too, and a hello to that handle
  // may go unanswered: each hello has a short timeout, so that the
  // connector's next attempt (a fresh connection, after its retry timer)
  // comes soon.
  auto opts = cfg_.connect;
  opts.request_timeout = std::min(opts.request_timeout, reconnect_hello);
  if (auto err = add_peers({peer}, opts))
    return err;
  reconnected_.push_back(peer);
  log_ << me() << ": " << name << " is back" << std::endl;
  return caf::none;
}

std::vector<task_id> cluster_member::take_reconnected() {
  std::vector<task_id> out;
  out.swap(reconnected_);
  return out;
}

caf::expected<bool> cluster_member::wait(std::chrono::milliseconds d) {
  std::vector<task_id> gone;
  self_->receive(
    [&](shutdown_atom, std::string& why) -> caf::ok_atom {
      ended_ = true;
      end_reason_ = why;
      log_ << me() << ": the chief ended the run: " << why << std::endl;
      if (on_shutdown)
        on_shutdown(why);
      return caf::ok_atom::value;
    },
    [&](hello_atom, std::string&, caf::actor&) {
      // A peer connected to this node; nothing to do.
    },
    [&](caf::down_msg& dm) {
      for (const auto& kvp : peer_nodes_)
        if (kvp.second.address() == dm.source) {
          log_ << me() << ": the node of " << kvp.first << " went down ("
               << sys_.render(dm.reason) << ")" << std::endl;
          if (auto t = task_id::parse(kvp.first))
            gone.push_back(*t);
        }
    },
    caf::after(d) >> [] {});
  if (!ended_)
    for (const auto& t : gone)
      if (auto err = reconnect(t))
        return err;
  return ended_;
}

caf::error cluster_member::wait_for_end(std::chrono::milliseconds max) {
  auto start = clock_type::now();
  auto deadline = start + max;
  while (!ended_) {
    auto now = clock_type::now();
    if (now >= deadline)
      return make_error(ec::timeout,
                        me() + ": the chief did not end the run within "
                          + std::to_string(max.count()) + " ms");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - now);
    // One message at a time (the end, a peer going down), each wait
    // bounded by what is left.
    if (auto res = wait(left); !res)
      return res.error();
  }
  return caf::none;
}

} // namespace syncfac
