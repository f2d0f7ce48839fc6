#include "actors/cluster_node.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/chief_driver.hpp"
#include "actors/gather.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/owned_actors.hpp"
#include "actors/run_fingerprint.hpp"
#include "actors/topology.hpp"
#include "runtime/base/error.hpp"
#include "actors/role_metrics.hpp"
#include "runtime/observe/metrics_endpoint.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

std::string role_name(const std::string& job, int32_t index) {
  return task_id{job, index}.str();
}

bool dedicated_inverter(const sync_training_config& sync,
                        const cluster_spec& cluster, const task_id& t) {
  return uses_kfac(sync) && cluster.count("inverse") == 0
         && sync.kfac.strategy == cov_inv_strategy::dedicated_workers
         && t.job == "worker" && t.index == cluster.count("worker") - 1;
}

/// Everything one node builds, connects to and hosts.
class node_run {
public:
  node_run(caf::actor_system& sys, const cluster_run_config& cfg,
           const data_loader& load, std::ostream& log)
    : sys_(sys),
      cfg_(cfg),
      sync_(cfg.sync),
      load_(load),
      log_(log),
      self_(sys),
      top_(self_),
      roles_(std::make_shared<std::map<std::string, caf::actor>>()) {
  }

  caf::expected<node_outcome> run() {
    if (auto err = prepare())
      return err;
    const auto& job = cfg_.task.job;
    caf::error err;
    if (cfg_.task == chief_task())
      return run_chief();
    if (job == "ps")
      err = host_shard();
    else if (job == "inverse")
      err = host_inverses({cfg_.task.index});
    else if (job == "covariance")
      err = host_covariance({cfg_.task.index});
    else if (job == "worker")
      err = dedicated_inverter(sync_, cfg_.cluster, cfg_.task)
              ? host_inverses(all_of(sync_.kfac.inverse_actors))
              : host_worker();
    else
      err = make_error(ec::invalid_config, "task " + cfg_.task.str()
                                             + ": this program has no role "
                                               "for job '"
                                             + job + "'");
    if (err)
      return err;
    if (auto err2 = publish())
      return err2;
    rejoin_if_running();
    if (auto err2 = wait_for_end())
      return err2;
    return node_outcome{};
  }

private:
  static std::vector<int32_t> all_of(int32_t n) {
    std::vector<int32_t> xs(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      xs[static_cast<size_t>(i)] = i;
    return xs;
  }

  std::string me() const {
    return cfg_.task.str();
  }

  /// chief:0, or worker:0 in a cluster without a chief job.
  task_id chief_task() const {
    return cfg_.cluster.chief_task();
  }

  caf::error prepare() {
    auto tasks = plan_tasks(sync_);
    if (!tasks)
      return tasks.error();
    tasks_ = *tasks;
    auto init = model::make(sync_.base.model, sync_.base.seed);
    if (!init)
      return init.error();
    init_ = std::move(*init);
    auto layout = layout_shards(sync_, *init_);
    if (!layout)
      return layout.error();
    layout_ = std::move(*layout);
    if (uses_kfac(sync_))
      kfac_ = layout_kfac(sync_, init_->kfac_collection(), tasks_);
    // The data go into the fingerprint, so the tasks that train or
    // evaluate load them before their first hello.
    if (loads_data())
      if (auto err = load_data())
        return err;
    auto fingerprint = make_run_fingerprint(sync_, *init_, layout_,
                                            train_.get(), test_.get());
    // The node actor exists from the start (its handle goes into every
    // hello); its roles are filled in before it is published.
    node_config nc;
    nc.task = cfg_.task;
    nc.roles = roles_;
    nc.owner = caf::actor_cast<caf::actor>(self_);
    nc.fingerprint = fingerprint;
    nc.chief = chief_task();
    node_ = sys_.spawn(node, std::move(nc));
    top_.own(node_);
    hello_ = make_hello(sys_, cfg_.task, caf::actor_cast<caf::actor>(node_),
                        std::move(fingerprint));
    if (cfg_.task == chief_task())
      status_ = std::make_shared<observe::run_status>();
    return serve_metrics();
  }

  /// The chief (training and test sets) and the workers that train.
  bool loads_data() const {
    const auto& t = cfg_.task;
    return t.job == "chief"
           || (t.job == "worker" && !dedicated_inverter(sync_, cfg_.cluster, t));
  }

  void host(const std::string& role, const caf::actor& a) {
    (*roles_)[role] = a;
    directory_->set(role, a);
  }

  caf::error publish() {
    const auto& addr = cfg_.cluster.address(cfg_.task);
    auto port = publish_node(node_, addr.port, cfg_.tls);
    if (!port)
      return port.error();
    std::string hosted;
    for (const auto& kvp : *roles_)
      hosted += (hosted.empty() ? "" : ", ") + kvp.first;
    log_ << me() << ": listening on " << addr.str()
         << (cfg_.tls ? " (TLS)" : "") << ", hosting " << hosted << std::endl;
    return caf::none;
  }

  /// Connects to the tasks not connected yet.
  caf::error connect(std::vector<task_id> peers) {
    auto todo = missing_peers(peers, cfg_.task, nodes_);
    if (todo.empty())
      return caf::none;
    auto infos = connect_nodes(sys_, self_, cfg_.cluster, todo, hello_,
                               cfg_.connect, log_);
    if (!infos)
      return infos.error();
    for (auto& kvp : *infos)
      nodes_.emplace(kvp.first, std::move(kvp.second));
    return caf::none;
  }

  /// The actor of `role` hosted by `host` (here or on a connected node).
  template <class Handle>
  caf::expected<Handle> find(const task_id& host, const std::string& role) {
    if (host == cfg_.task) {
      auto i = roles_->find(role);
      if (i == roles_->end())
        return make_error(ec::internal, me() + " does not host " + role);
      return caf::actor_cast<Handle>(i->second);
    }
    auto i = nodes_.find(host.str());
    if (i == nodes_.end())
      return make_error(ec::internal, me() + " is not connected to "
                                        + host.str());
    return role_of<Handle>(i->second, role);
  }

  caf::expected<std::vector<ps_actor>> shards() {
    std::vector<task_id> hosts;
    for (int32_t s = 0; s < sync_.ps_tasks; ++s)
      hosts.push_back({"ps", s});
    if (auto err = connect(hosts))
      return err;
    std::vector<ps_actor> out;
    for (int32_t s = 0; s < sync_.ps_tasks; ++s) {
      auto h = find<ps_actor>({"ps", s}, role_name("ps", s));
      if (!h)
        return h.error();
      out.push_back(*h);
    }
    return out;
  }

  caf::expected<std::vector<inverse_actor>> inverses() {
    std::vector<task_id> hosts;
    for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k)
      hosts.push_back(inverse_host(sync_, cfg_.cluster, k));
    if (auto err = connect(hosts))
      return err;
    std::vector<inverse_actor> out;
    for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k) {
      auto h = find<inverse_actor>(hosts[static_cast<size_t>(k)],
                                   role_name("inverse", k));
      if (!h)
        return h.error();
      out.push_back(*h);
    }
    return out;
  }

  caf::expected<std::vector<covariance_actor>> covariances() {
    std::vector<task_id> hosts;
    for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c)
      hosts.push_back(covariance_host(sync_, cfg_.cluster, c));
    if (auto err = connect(hosts))
      return err;
    std::vector<covariance_actor> out;
    for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c) {
      auto h = find<covariance_actor>(hosts[static_cast<size_t>(c)],
                                      role_name("covariance", c));
      if (!h)
        return h.error();
      out.push_back(*h);
    }
    return out;
  }

  caf::error host_shard() {
    auto s = cfg_.task.index;
    auto shard = spawn_ps_shard(sys_, layout_.shards[static_cast<size_t>(s)]);
    if (!shard)
      return shard.error();
    top_.own(*shard);
    host(role_name("ps", s), caf::actor_cast<caf::actor>(*shard));
    return caf::none;
  }

  caf::error host_inverses(const std::vector<int32_t>& which) {
    auto ps = shards();
    if (!ps)
      return ps.error();
    for (auto k : which) {
      device_config dc = sync_.base.device;
      dc.threads = 1; // the inverse kernels run on the calling thread
      auto dev = spawn_device(sys_, dc);
      if (!dev)
        return dev.error();
      top_.own(*dev);
      auto inv = spawn_inverse(sys_, make_inverse_config(sync_, *kfac_,
                                                         layout_, k, *ps,
                                                         *dev));
      if (!inv)
        return inv.error();
      top_.own(*inv);
      host(role_name("inverse", k), caf::actor_cast<caf::actor>(*inv));
    }
    return caf::none;
  }

  caf::error host_covariance(const std::vector<int32_t>& which) {
    auto inv = inverses();
    if (!inv)
      return inv.error();
    for (auto c : which) {
      auto cov = spawn_covariance(sys_, make_covariance_config(sync_, *kfac_,
                                                               c, *inv));
      if (!cov)
        return cov.error();
      top_.own(*cov);
      host(role_name("covariance", c), caf::actor_cast<caf::actor>(*cov));
    }
    return caf::none;
  }

  caf::error load_data() {
    if (train_)
      return caf::none;
    auto data = load_();
    if (!data)
      return data.error();
    train_ = data->first;
    test_ = data->second;
    return caf::none;
  }

  /// A worker task started while the run is under way (a restart): the
  /// chief says where to resume and the worker starts on its own, since
  /// the chief's driver started the workers it knew at the beginning.
  void rejoin_if_running() {
    if (!worker_ || !chief_)
      return;
    if (cfg_.task.index >= tasks_.gradient_workers) {
      // A statistics worker takes no tokens: it starts at the shards' step
      // once the chief's run is under way.
      self_->request(chief_, cfg_.connect.request_timeout, status_atom::value)
        .receive(
          [&](chief_status& cs) {
            if (cs.finished || cs.tokens_granted == 0)
              return;
            log_ << me() << ": the run is under way; the statistics worker "
                 << "starts at global step " << cs.global_step << std::endl;
            caf::anon_send(worker_, run_atom::value);
          },
          [&](caf::error&) {});
      return;
    }
    self_->request(chief_, cfg_.connect.request_timeout, run_atom::value,
                   cfg_.task.index)
      .receive(
        [&](resume_point& rp) {
          log_ << me() << ": the run is under way; rejoining at global step "
               << rp.global_step << std::endl;
          caf::anon_send(worker_, run_atom::value, rp);
        },
        [&](caf::error&) {
          // Not running yet: the chief's driver starts this worker.
        });
  }

  /// A worker task that connected again to a chief whose run is under way
  /// (a chief that went on without it): the chief says where to resume
  /// and the worker is rebound to it. A chief not running yet rebinds the
  /// workers itself once they are all back.
  /// Answers whether to ask again later: the chief's steps are paused (it
  /// waits for another lost task) and it rebinds no one it lost until they
  /// are back.
  bool rebind_if_running() {
    if (!worker_ || cfg_.task.index >= tasks_.gradient_workers)
      return false;
    auto chief = find<chief_actor>(chief_task(), "chief");
    if (!chief)
      return false;
    chief_ = *chief;
    bool again = false;
    self_->request(chief_, cfg_.connect.request_timeout, run_atom::value,
                   cfg_.task.index)
      .receive(
        [&](resume_point& rp) {
          auto ps = shards();
          if (!ps)
            return;
          std::vector<covariance_actor> cov;
          if (sends_statistics(sync_, tasks_, cfg_.task.index))
            if (auto c = covariances())
              cov = std::move(*c);
          log_ << me() << ": the run is under way; rejoining at global step "
               << rp.global_step << std::endl;
          caf::anon_send(worker_, run_atom::value, rp, chief_, *ps, cov);
        },
        [&](caf::error& err) {
          // Not running yet: the chief rebinds this worker when it starts.
          again = err.category() == error_category
                  && err.code() == static_cast<uint8_t>(ec::peer_lost);
        });
    return again;
  }

  caf::error host_worker() {
    auto i = cfg_.task.index;
    if (i >= tasks_.worker_tasks())
      return make_error(ec::invalid_config,
                        "no worker role for this task ("
                          + std::to_string(tasks_.worker_tasks())
                          + " worker tasks)");
    if (auto err = load_data())
      return err;
    // One worker per process: the task has the process's threads alone.
    auto dev = spawn_worker_device(sys_, sync_, i, 1, top_);
    if (!dev)
      return dev.error();
    auto ps = shards();
    if (!ps)
      return ps.error();
    if (auto err = connect({chief_task()}))
      return err;
    auto chief = find<chief_actor>(chief_task(), "chief");
    if (!chief)
      return chief.error();
    std::vector<covariance_actor> cov;
    if (sends_statistics(sync_, tasks_, i)) {
      auto c = covariances();
      if (!c)
        return c.error();
      cov = std::move(*c);
    }
    auto wc = make_worker_config(sync_, tasks_, kfac_ ? &*kfac_ : nullptr, i,
                                 train_, *dev, *ps, *chief, std::move(cov));
    // Losing the chief or a shard: wait for a chief to rebind the worker.
    wc.peer_wait = cfg_.max_wait;
    auto w = spawn_worker(sys_, std::move(wc));
    if (!w)
      return w.error();
    top_.own(*w);
    worker_ = *w;
    chief_ = *chief;
    host(role_name("worker", i), caf::actor_cast<caf::actor>(*w));
    return caf::none;
  }

  /// Non-chief nodes: until the chief ends the run. Bounded by max_wait
  /// while the chief has not said hello yet or after its node went down.
  caf::error wait_for_end() {
    auto deadline = clock_type::now() + cfg_.max_wait;
    bool chief_here = false;
    std::string reason;
    caf::error err;
    bool done = false;
    auto since = clock_type::now();
    // A task that connected to the chief watches the chief's node from
    // the start; the others once the chief says hello.
    if (auto i = nodes_.find(chief_task().str()); i != nodes_.end())
      if (auto n = node_of(i->second)) {
        self_->monitor(n);
        chief_node_ = n;
        chief_here = true;
      }
    // A role that stops on its own (an error) ends this node with the
    // reason: the rest of the cluster then sees the node go down.
    std::map<caf::actor_addr, std::string> hosted;
    std::string role_failure;
    auto failure_deadline = clock_type::now();
    for (const auto& [name, actor] : *roles_) {
      self_->monitor(actor);
      hosted.emplace(actor.address(), name);
    }
    // A node connects again to the shards it lost, as at start, and to
    // the chief if it connected to the chief at start: a restarted chief
    // waits for its hello, and a shard that came back is then reached
    // directly, not through the chief's node.
    std::map<caf::actor_addr, task_id> peers;
    std::set<task_id> lost;
    bool rejoin_later = false;
    const bool reconnects = connects_to_chief(cfg_.task);
    auto watch = [&](const task_id& t) {
      if (auto i = nodes_.find(t.str()); i != nodes_.end())
        if (auto n = node_of(i->second)) {
          self_->monitor(n);
          peers[n.address()] = t;
        }
    };
    for (int32_t s = 0; s < sync_.ps_tasks; ++s)
      if (task_id{"ps", s} != cfg_.task)
        watch({"ps", s});
    auto reconnect = [&] {
      std::ostream quiet{nullptr};
      for (auto t : std::set<task_id>{lost}) {
        auto opts = cfg_.connect;
        opts.timeout = std::chrono::milliseconds{1000};
        opts.report_every = std::chrono::hours{1};
        nodes_.erase(t.str());
        auto infos = connect_nodes(sys_, self_, cfg_.cluster, {t}, hello_,
                                   opts, quiet);
        if (!infos)
          continue;
        for (auto& kvp : *infos)
          nodes_.emplace(kvp.first, std::move(kvp.second));
        lost.erase(t);
        watch(t);
        log_ << me() << ": connected again to " << t.str() << std::endl;
        if (t == chief_task())
          if (auto i = nodes_.find(t.str()); i != nodes_.end()) {
            chief_node_ = node_of(i->second);
            chief_here = true;
            rejoin_later = rebind_if_running();
          }
      }
    };
    while (!done) {
      self_->receive(
        [&](shutdown_atom, std::string& why) {
          reason = why;
          done = true;
        },
        [&](hello_atom, std::string& peer, caf::actor& peer_node) {
          if (peer == chief_task().str() && peer_node) {
            self_->monitor(peer_node);
            chief_node_ = peer_node;
            chief_here = true;
          }
        },
        [&](hello_atom, std::string& peer, std::string& why) {
          // This node refused the chief's hello: the two were configured
          // for different runs, and waiting changes nothing.
          err = make_error(ec::invalid_config,
                           "refused " + peer + " at connect: " + why);
          done = true;
        },
        [&](caf::down_msg& dm) {
          if (auto i = hosted.find(dm.source); i != hosted.end()) {
            // At the end of a run a worker may stop (with the chief it is
            // linked to) just before the chief's word arrives: wait for it
            // a little before calling this a failure.
            role_failure = i->second + " stopped: " + sys_.render(dm.reason);
            failure_deadline = clock_type::now() + std::chrono::seconds{5};
          } else if (dm.source == chief_node_.address() && chief_here) {
            chief_here = false;
            since = clock_type::now();
            deadline = since + cfg_.max_wait;
            log_ << me() << ": the chief's node went down ("
                 << sys_.render(dm.reason) << "); waiting up to "
                 << cfg_.max_wait.count() << " ms for it to return"
                 << std::endl;
            if (reconnects)
              lost.insert(chief_task());
          } else if (auto p = peers.find(dm.source); p != peers.end()) {
            log_ << me() << ": " << p->second.str() << " went down ("
                 << sys_.render(dm.reason) << ")" << std::endl;
            lost.insert(p->second);
            peers.erase(p);
          }
        },
        caf::after(std::chrono::milliseconds{500}) >> [&] {
          if (!lost.empty())
            reconnect();
          if (rejoin_later)
            rejoin_later = rebind_if_running();
          if (!role_failure.empty()
              && clock_type::now() >= failure_deadline) {
            err = make_error(ec::peer_down, role_failure);
            done = true;
          } else if (!chief_here && clock_type::now() >= deadline) {
            auto waited = std::chrono::duration_cast<std::chrono::seconds>(
              clock_type::now() - since);
            err = make_error(ec::timeout,
                             "no word from the chief (" + chief_task().str()
                               + " at "
                               + cfg_.cluster.address(chief_task()).str()
                               + ") for " + std::to_string(waited.count())
                               + " s (--max_wait)");
            done = true;
          }
        });
    }
    if (err)
      return err;
    if (!role_failure.empty())
      log_ << me() << ": " << role_failure << std::endl;
    log_ << me() << ": the chief ended the run: " << reason << std::endl;
    return caf::none;
  }

  /// Whether task `t` connects to the chief on its own (so the chief
  /// waits for its hello instead of connecting to it).
  bool connects_to_chief(const task_id& t) const {
    if (t.job == "worker")
      return !dedicated_inverter(sync_, cfg_.cluster, t);
    if (t.job == "covariance" && uses_kfac(sync_))
      for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k)
        if (inverse_host(sync_, cfg_.cluster, k) == chief_task())
          return true;
    return false;
  }

  /// Waits until every task of `peers` has said hello (bounded by the
  /// connect timeout, logging who is missing), then asks each for its
  /// roles over the connection it opened.
  caf::error await_hellos(const std::vector<task_id>& peers) {
    return await_hellos(peers, cfg_.connect.timeout, false);
  }

  /// The same, bounded by `timeout`; with `partial`, gradient worker tasks
  /// still missing then are left out (logged), not an error.
  caf::error await_hellos(const std::vector<task_id>& peers,
                          std::chrono::milliseconds timeout, bool partial) {
    auto started = clock_type::now();
    auto deadline = started + timeout;
    auto next_report = started + cfg_.connect.report_every;
    auto missing = [&] {
      std::string out;
      for (const auto& t : peers)
        if (nodes_.count(t.str()) == 0)
          out += (out.empty() ? "" : ", ") + t.str() + " at "
                 + cfg_.cluster.address(t).str();
      return out;
    };
    // Peers that said hello; asked for their roles until they have
    // published them (a worker says hello before its worker exists).
    std::map<std::string, node_actor> heard;
    caf::error err;
    bool done = false;
    auto wanted = [&](const std::string& peer) {
      return std::any_of(peers.begin(), peers.end(),
                         [&](const task_id& t) { return t.str() == peer; });
    };
    while (!err && !done && !missing().empty()) {
      for (auto& [peer, handle] : heard) {
        if (nodes_.count(peer) > 0)
          continue;
        self_->request(handle, cfg_.connect.request_timeout,
                       hello_atom::value, hello_)
          .receive(
            [&, name = peer](node_info& info) {
              if (info.role_names.size() > 1) // more than "node"
                nodes_.emplace(name, std::move(info));
            },
            [&, name = peer](caf::error& e) {
              err = with_context(e, "hello to " + name);
            });
      }
      self_->receive(
        [&](hello_atom, std::string& peer, caf::actor& peer_node) {
          if (wanted(peer) && peer_node)
            heard[peer] = caf::actor_cast<node_actor>(peer_node);
        },
        [&](hello_atom, std::string& peer, std::string& why) {
          // The node refused a task configured for another run: it exits
          // with the same text, so the run cannot start. A refusal of a
          // task not awaited here (a worker restarted with other flags
          // while the run went on) is only logged.
          if (wanted(peer))
            err = make_error(ec::invalid_config,
                             "refused " + peer + " at connect: " + why);
          else
            log_ << me() << ": refused " << peer << " at connect: " << why
                 << std::endl;
        },
        caf::after(std::chrono::milliseconds{100}) >> [&] {
          auto now = clock_type::now();
          auto waited = std::chrono::duration_cast<std::chrono::seconds>(
                          now - started)
                          .count();
          if (now >= deadline && partial && only_workers_missing(peers)) {
            log_ << me() << ": going on without " << missing()
                 << " (not back after " << waited
                 << " s; each may rejoin when it is)" << std::endl;
            for (const auto& t : peers)
              if (nodes_.count(t.str()) == 0)
                absent_.insert(t);
            done = true;
          } else if (now >= deadline)
            err = make_error(ec::timeout,
                             "tasks that never connected after "
                               + std::to_string(waited)
                               + " s: " + missing());
          else if (now >= next_report) {
            log_ << me() << ": waiting for " << missing() << " since "
                 << waited << " s" << std::endl;
            next_report = now + cfg_.connect.report_every;
          }
        });
    }
    return err;
  }

  /// Whether every task of `peers` not connected is a gradient worker.
  bool only_workers_missing(const std::vector<task_id>& peers) const {
    for (const auto& t : peers)
      if (nodes_.count(t.str()) == 0
          && (t.job != "worker" || t.index >= tasks_.gradient_workers))
        return false;
    return true;
  }

  caf::expected<node_outcome> run_chief() {
    if (auto err = load_data())
      return err;
    auto ps = shards();
    if (!ps)
      return ps.error();
    bool kfac = uses_kfac(sync_);
    if (kfac) {
      std::vector<int32_t> here;
      for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k)
        if (inverse_host(sync_, cfg_.cluster, k) == cfg_.task)
          here.push_back(k);
      if (!here.empty())
        if (auto err = host_inverses(here))
          return err;
      here.clear();
      for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c)
        if (covariance_host(sync_, cfg_.cluster, c) == cfg_.task)
          here.push_back(c);
      if (!here.empty())
        if (auto err = host_covariance(here))
          return err;
    }
    auto steps = total_steps(sync_, tasks_, train_->count);
    training_log out{log_, steps, sync_.base.progress, status_};
    if (auto err = out.open_outputs(sync_.base.metrics_path,
                                     sync_.base.logdir, sync_.base.hparams))
      return err;
    // The metrics sink other roles report to (role "metrics"); it writes
    // into `out`, so it stops before `out` ends.
    auto sink = spawn_metrics_sink(sys_, metrics_sink_config{&out});
    if (!sink)
      return sink.error();
    metrics_ = *sink;
    struct stop_sink {
      caf::scoped_actor& self;
      metrics_actor sink;
      ~stop_sink() {
        self->send_exit(sink, caf::exit_reason::user_shutdown);
        self->wait_for(sink);
      }
    } stop{self_, *sink};
    host("metrics", caf::actor_cast<caf::actor>(*sink));
    auto driver = chief_driver::make(sys_, top_, sync_, tasks_, steps, *ps,
                                     test_, out);
    if (!driver)
      return driver.error();
    host("chief", caf::actor_cast<caf::actor>((*driver)->chief()));
    (*driver)->recover_roles_with(
      [this](const std::string& lost) { return role_back(lost); });
    // Without a chief job this task is worker 0 as well (TensorFlow's
    // rule): its worker joins the chief here, found like any other.
    if (cfg_.task.job == "worker")
      if (auto err = host_worker())
        return err;
    if (auto err = publish())
      return err;
    // Everyone else; training starts once all are here. Tasks that connect
    // to the chief themselves are awaited rather than connected to: a
    // second connection between the same two nodes confuses CAF's TLS
    // transport.
    std::vector<task_id> active;
    std::vector<task_id> passive;
    for (const auto& t : cfg_.cluster.tasks())
      if (t != cfg_.task && t.job != "evaluator")
        (connects_to_chief(t) ? passive : active).push_back(t);
    if (auto err = connect(active))
      return err;
    // A restarted chief goes on with the workers that come back soon; a
    // lost one (e.g. a backup killed for good) may rejoin later.
    bool restarted = (*driver)->shards_kept();
    auto wait = restarted ? std::min<std::chrono::milliseconds>(
                              cfg_.connect.timeout, std::chrono::seconds{10})
                          : cfg_.connect.timeout;
    if (auto err = await_hellos(passive, wait, restarted))
      return err;
    auto found = current_roles();
    if (!found)
      return found.error();
    auto roles = std::move(*found);
    // The status page's tasks; the chief's fault lines keep them current.
    for (const auto& t : cfg_.cluster.tasks())
      if (t.job != "evaluator")
        status_->task(t.str(), "up", t == cfg_.task ? "this process" : "");
    out.line("cluster: " + std::to_string(cfg_.cluster.tasks().size())
             + " tasks connected" + (cfg_.tls ? " over TLS" : "") + "; "
             + std::to_string(tasks_.gradient_workers) + " worker(s), "
             + "replicas_to_aggregate "
             + std::to_string(tasks_.replicas_to_aggregate) + ", "
             + std::to_string(sync_.ps_tasks) + " PS shard(s), "
             + std::to_string(steps) + " global steps of "
             + std::to_string(sync_.base.batch_size)
             + " examples per worker");
    auto summary = (*driver)->run(self_, roles);
    auto reason = summary ? std::string{"training finished"}
                          : "training failed: " + render(summary.error());
    // Nodes that joined on their own (an evaluator) end first, while the
    // shards are still up: they may finish a last evaluation.
    end_callers(reason);
    node_outcome outcome;
    outcome.cluster = cluster_report((*driver)->shards(),
                                     with_current_workers((*driver)->roles()));
    end_run(reason);
    if (!summary)
      return summary.error();
    outcome.summary = std::move(*summary);
    return outcome;
  }

  /// The task hosting role `role` ("ps:1", "covariance:0", "inverse:0").
  caf::expected<task_id> host_of(const std::string& role) {
    auto colon = role.find(':');
    auto job = role.substr(0, colon);
    int32_t index = -1;
    if (colon != std::string::npos)
      index = static_cast<int32_t>(std::strtol(role.c_str() + colon + 1,
                                               nullptr, 10));
    if (job == "ps" && index >= 0 && index < sync_.ps_tasks)
      return task_id{"ps", index};
    if (job == "covariance" && index >= 0
        && index < sync_.kfac.covariance_actors)
      return covariance_host(sync_, cfg_.cluster, index);
    if (job == "inverse" && index >= 0 && index < sync_.kfac.inverse_actors)
      return inverse_host(sync_, cfg_.cluster, index);
    return make_error(ec::internal, "no task hosts role '" + role + "'");
  }

  /// The task hosting role `lost` went away: waits (bounded by max_wait,
  /// reporting who is missing) for it to be back on its address, then
  /// answers the run's roles as they are now.
  caf::expected<run_roles> role_back(const std::string& lost) {
    auto t = host_of(lost);
    if (!t)
      return t.error();
    if (*t == cfg_.task)
      return make_error(ec::internal, lost + " is hosted by the chief");
    nodes_.erase(t->str());
    log_ << me() << ": waiting up to " << cfg_.max_wait.count() << " ms for "
         << t->str() << " at " << cfg_.cluster.address(*t).str()
         << " to come back" << std::endl;
    auto opts = cfg_.connect;
    opts.timeout = cfg_.max_wait;
    // A hello sent while the task was frozen is lost when it thaws (its
    // middleman drops the connections it timed out): ask again soon.
    opts.request_timeout = std::min(opts.request_timeout,
                                    std::chrono::milliseconds{2000});
    if (connects_to_chief(*t)) {
      // It connects to the chief itself (a second connection between the
      // same two nodes confuses CAF's TLS transport).
      if (auto err = await_hellos({*t}))
        return err;
    } else {
      auto infos = connect_nodes(sys_, self_, cfg_.cluster, {*t}, hello_, opts,
                                 log_);
      if (!infos)
        return infos.error();
      for (auto& kvp : *infos)
        nodes_.emplace(kvp.first, std::move(kvp.second));
    }
    return current_roles();
  }

  /// Takes the node information of tasks whose nodes connected again
  /// while the run went on (after a freeze of the chief, say): the roles
  /// behind the old connections cannot be reached any more.
  void refresh_from_hellos() {
    for (auto& [peer, peer_node] : late_hellos()) {
      if (peer == me() || nodes_.count(peer) == 0)
        continue;
      self_->request(caf::actor_cast<node_actor>(peer_node),
                     std::min(cfg_.connect.request_timeout,
                              std::chrono::milliseconds{3000}),
                     hello_atom::value, hello_)
        .receive(
          [&, name = peer](node_info& info) {
            if (info.role_names.size() > 1) // more than "node"
              nodes_[name] = std::move(info);
          },
          [&, name = peer](caf::error& err) {
            log_ << me() << ": " << name << " said hello again but did not "
                 << "answer: " << render(err) << std::endl;
          });
    }
  }

  /// The run's roles, found on the connected nodes.
  caf::expected<run_roles> current_roles() {
    refresh_from_hellos();
    run_roles roles;
    auto ps = shards();
    if (!ps)
      return ps.error();
    roles.shards = std::move(*ps);
    for (int32_t i = 0; i < tasks_.worker_tasks(); ++i) {
      auto& into = i >= tasks_.gradient_workers ? roles.stats_workers
                                                : roles.workers;
      if (absent_.count({"worker", i}) > 0
          && nodes_.count(task_id{"worker", i}.str()) == 0) {
        into.emplace_back(); // not back: skipped until it rejoins
        continue;
      }
      auto w = find<worker_actor>({"worker", i}, role_name("worker", i));
      if (!w)
        return w.error();
      into.push_back(*w);
    }
    if (uses_kfac(sync_)) {
      auto cov = covariances();
      if (!cov)
        return cov.error();
      roles.covariance = std::move(*cov);
      auto inv = inverses();
      if (!inv)
        return inv.error();
      roles.inverses = std::move(*inv);
    }
    return roles;
  }

  /// `roles` with each worker as its node answers it now (a worker's node
  /// may have connected again since the roles were found).
  run_roles with_current_workers(run_roles roles) {
    refresh_from_hellos();
    auto refresh = [&](std::vector<worker_actor>& into, int32_t first) {
      for (size_t k = 0; k < into.size(); ++k) {
        task_id t{"worker", first + static_cast<int32_t>(k)};
        if (nodes_.count(t.str()) == 0)
          continue;
        if (auto w = find<worker_actor>(t, role_name("worker", t.index)))
          into[k] = *w;
      }
    };
    refresh(roles.workers, 0);
    refresh(roles.stats_workers, tasks_.gradient_workers);
    return roles;
  }

  /// Per task: what its roles refused or failed (the chief's summary).
  json_object cluster_report(const std::vector<ps_actor>& ps,
                             const run_roles& roles) {
    auto timeout = counters_timeout(sync_);
    json_object tasks;
    // Per role, in order: its counters or why it could not be reached.
    auto ask = [&](const auto& handles, const std::string& job, auto status,
                   auto fill) {
      using status_type = decltype(status);
      std::vector<json_object> entries(handles.size());
      ask_each<status_type>(
        self_, handles, timeout,
        [&](size_t i, const status_type& st) { fill(entries[i], st); },
        [&](size_t i, const caf::error& err) {
          entries[i].add("unreachable", render(err));
        },
        status_atom::value);
      for (size_t i = 0; i < handles.size(); ++i) {
        if (!handles[i])
          entries[i].add("unreachable", "not back after the chief's restart");
        tasks.add(role_name(job, static_cast<int32_t>(i)), entries[i]);
      }
    };
    ask(ps, "ps", shard_status{}, [](json_object& t, const shard_status& st) {
      t.add("errors", st.refused_pushes + st.refused_inverses)
        .add("stale_pushes", st.stale_pushes);
    });
    auto workers = roles.workers;
    workers.insert(workers.end(), roles.stats_workers.begin(),
                   roles.stats_workers.end());
    ask(workers, "worker", worker_status{},
        [](json_object& t, const worker_status& st) {
          t.add("errors", st.stats_failed)
            .add("stale_pushes", st.stale_pushes)
            .add("steps", st.steps);
        });
    ask(roles.covariance, "covariance", covariance_status{},
        [](json_object& t, const covariance_status& st) {
          t.add("errors", st.refused).add("stale", st.stale);
        });
    ask(roles.inverses, "inverse", inverse_status{},
        [](json_object& t, const inverse_status& st) {
          t.add("errors", st.failed).add("inversions", st.inversions);
        });
    json_object out;
    out.add("tasks", static_cast<int64_t>(cfg_.cluster.tasks().size()))
      .add("tls", cfg_.tls)
      .add("roles", tasks);
    // What other roles reported to the metrics sink: the last record of
    // each source and how many it sent.
    if (metrics_) {
      json_object sources;
      self_->request(metrics_, timeout, status_atom::value)
        .receive(
          [&](std::vector<metrics_record>& recs) {
            for (auto& r : recs) {
              json_object t;
              t.add("last_step", r.step);
              for (const auto& kvp : r.fields)
                if (kvp.first == "reports")
                  t.add(kvp.first, static_cast<int64_t>(kvp.second));
                else
                  t.add(kvp.first, kvp.second);
              sources.add(r.source, t);
            }
          },
          [&](caf::error& err) { sources.add("unreachable", render(err)); });
      out.add("metrics", sources);
    }
    return out;
  }

  /// Tells the nodes that said hello to this one but are no task the
  /// chief connected to (e.g. an evaluator; the last hello of each counts)
  /// that the run is over; they may finish work before they answer.
  void end_callers(const std::string& reason) {
    std::map<std::string, caf::actor> callers;
    self_->request(node_, cfg_.connect.request_timeout, hello_atom::value)
      .receive(
        [&](std::vector<std::string>& names, std::vector<caf::actor>& nodes) {
          for (size_t i = 0; i < names.size() && i < nodes.size(); ++i)
            if (names[i] != me() && nodes_.count(names[i]) == 0)
              callers[names[i]] = nodes[i];
        },
        [&](caf::error& err) {
          log_ << me() << ": cannot list the nodes that joined: "
               << render(err) << std::endl;
        });
    tell_run_over(callers, reason);
  }

  /// Tells every connected node that the run is over; a task that
  /// restarted during the run (and said hello again) under its new node.
  void end_run(const std::string& reason) {
    std::map<std::string, caf::actor> peers;
    for (auto& kvp : nodes_)
      if (kvp.second.job != "chief")
        if (auto n = node_of(kvp.second))
          peers[kvp.first] = n;
    for (auto& kvp : late_hellos())
      if (peers.count(kvp.first) > 0)
        peers[kvp.first] = kvp.second;
    tell_run_over(peers, reason);
  }

  /// The hellos the node actor passed on while the run went on, newest
  /// per task.
  std::map<std::string, caf::actor> late_hellos() {
    std::map<std::string, caf::actor> out;
    bool more = true;
    while (more)
      self_->receive(
        [&](hello_atom, std::string& peer, caf::actor& peer_node) {
          if (peer_node)
            out[peer] = peer_node;
        },
        caf::after(std::chrono::milliseconds{0}) >> [&] { more = false; });
    return out;
  }

  /// Sends `peers` (node actors by task name) the end of the run and waits,
  /// bounded by the request timeout, until each has answered or gone down:
  /// a node answers and exits, and its process may be gone before the
  /// answer leaves (TLS flushes lazily), so going down counts as an answer.
  void tell_run_over(const std::map<std::string, caf::actor>& peers,
                     const std::string& reason) {
    std::map<caf::actor_addr, std::string> waiting;
    for (const auto& [name, n] : peers) {
      auto peer = caf::actor_cast<node_actor>(n);
      self_->monitor(peer);
      waiting.emplace(peer.address(), name);
      self_->send(peer, shutdown_atom::value, reason);
    }
    auto deadline = clock_type::now() + cfg_.connect.request_timeout;
    while (!waiting.empty() && clock_type::now() < deadline) {
      self_->receive(
        [&](caf::ok_atom) {
          // A node's owner may answer for it: then its going down counts.
          if (auto sender = self_->current_sender())
            waiting.erase(caf::actor_cast<caf::actor_addr>(sender));
        },
        [&](caf::down_msg& dm) { waiting.erase(dm.source); },
        [&](caf::error&) {},
        caf::after(std::chrono::milliseconds{200}) >> [] {});
    }
    for (const auto& kvp : waiting)
      log_ << me() << ": " << kvp.second
           << " neither confirmed the end of the run nor went down within "
           << cfg_.connect.request_timeout.count() << " ms" << std::endl;
  }

  /// --metrics_port: this task's port (the flag's plus the task's
  /// position in the cluster file, so that tasks on one host differ).
  caf::error serve_metrics() {
    if (sync_.base.metrics_port <= 0)
      return caf::none;
    auto all = cfg_.cluster.tasks();
    auto pos = std::find(all.begin(), all.end(), cfg_.task) - all.begin();
    auto port = static_cast<int64_t>(sync_.base.metrics_port) + pos;
    if (port > 65535)
      return make_error(ec::invalid_config,
                        "--metrics_port " + std::to_string(
                          sync_.base.metrics_port)
                          + ": task " + me() + " would listen on "
                          + std::to_string(port) + ", above 65535");
    auto ep = observe::serve_metrics(
      static_cast<int32_t>(port), sync_.base.metrics_bind, cfg_.task.job,
      cfg_.task.index, status_,
      {role_metrics(sys_, directory_, std::chrono::seconds{2})});
    if (!ep)
      return with_context(ep.error(), me());
    endpoint_ = std::move(*ep);
    log_ << me() << ": metrics on http://" << sync_.base.metrics_bind << ":"
         << endpoint_->port() << "/metrics"
         << (status_ ? " (status page: /)" : "") << std::endl;
    return caf::none;
  }

  caf::actor_system& sys_;
  const cluster_run_config& cfg_;
  sync_training_config sync_;
  const data_loader& load_;
  std::ostream& log_;
  caf::scoped_actor self_;
  owned_actors top_;
  std::shared_ptr<std::map<std::string, caf::actor>> roles_;
  node_actor node_;
  node_hello hello_;
  task_plan tasks_;
  std::unique_ptr<model> init_;
  shard_layout layout_;
  std::optional<kfac_layout> kfac_;
  std::map<std::string, node_info> nodes_;
  std::shared_ptr<const dataset> train_;
  std::shared_ptr<const dataset> test_;
  caf::actor chief_node_;
  metrics_actor metrics_;
  /// A worker task's worker and the chief it reports to.
  worker_actor worker_;
  chief_actor chief_;
  /// Gradient worker tasks a restarted chief went on without.
  std::set<task_id> absent_;
  /// --metrics_port: the hosted roles, the chief's run status, and the
  /// server (last, so that it stops first).
  std::shared_ptr<role_directory> directory_
    = std::make_shared<role_directory>();
  std::shared_ptr<observe::run_status> status_;
  std::unique_ptr<observe::metrics_endpoint> endpoint_;
};

} // namespace

caf::error cluster_run_config::validate() const {
  if (auto err = sync.validate())
    return err;
  if (auto err = cluster.validate())
    return err;
  if (!cluster.contains(task))
    return make_error(ec::invalid_config, "task " + task.str()
                                            + " is not in the cluster");
  if (max_wait.count() <= 0 || connect.timeout.count() <= 0)
    return make_error(ec::invalid_config,
                      "max_wait and the connect timeout must be positive");
  return caf::none;
}

caf::error derive_topology(sync_training_config& sync,
                           const cluster_spec& cluster, bool explicit_workers,
                           bool explicit_ps) {
  auto check = [](const char* flag, int32_t given, const char* job,
                  int32_t tasks) -> caf::error {
    if (given == tasks)
      return caf::none;
    return make_error(ec::invalid_config,
                      std::string{"--"} + flag + " " + std::to_string(given)
                        + " contradicts the cluster file's "
                        + std::to_string(tasks) + " '" + job + "' task(s)");
  };
  auto workers = cluster.count("worker");
  auto ps = cluster.count("ps");
  if (workers < 1)
    return make_error(ec::invalid_config,
                      "the cluster has no 'worker' task: training needs at "
                      "least one");
  if (ps < 1)
    return make_error(ec::invalid_config,
                      "the cluster has no 'ps' task: training needs at "
                      "least one parameter-server shard");
  if (explicit_workers)
    if (auto err = check("worker_replicas", sync.worker_replicas, "worker",
                         workers))
      return err;
  if (explicit_ps)
    if (auto err = check("ps_tasks", sync.ps_tasks, "ps", ps))
      return err;
  sync.worker_replicas = workers;
  sync.ps_tasks = ps;
  if (cluster.count("covariance") > 0)
    sync.kfac.covariance_actors = cluster.count("covariance");
  if (cluster.count("inverse") > 0)
    sync.kfac.inverse_actors = cluster.count("inverse");
  bool kfac = uses_kfac(sync);
  if (!kfac && (cluster.count("covariance") > 0
                || cluster.count("inverse") > 0))
    return make_error(ec::invalid_config,
                      "the cluster has covariance or inverse tasks, but the "
                      "optimizer is not kfac");
  return caf::none;
}

task_id covariance_host(const sync_training_config&,
                        const cluster_spec& cluster, int32_t c) {
  if (cluster.count("covariance") > 0)
    return {"covariance", c};
  return cluster.chief_task();
}

task_id inverse_host(const sync_training_config& sync,
                     const cluster_spec& cluster, int32_t k) {
  if (cluster.count("inverse") > 0)
    return {"inverse", k};
  if (sync.kfac.strategy == cov_inv_strategy::dedicated_workers)
    return {"worker", cluster.count("worker") - 1};
  return cluster.chief_task();
}

caf::expected<node_outcome> run_cluster_node(caf::actor_system& sys,
                                             const cluster_run_config& cfg,
                                             const data_loader& load,
                                             std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  node_run run{sys, cfg, load, log};
  auto outcome = run.run();
  if (!outcome)
    return with_context(outcome.error(), cfg.task.str());
  return outcome;
}

} // namespace syncfac
