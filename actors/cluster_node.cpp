#include "actors/cluster_node.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/chief_driver.hpp"
#include "actors/chief_supervisor.hpp"
#include "actors/join_refusal.hpp"
#include "actors/gather.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/owned_actors.hpp"
#include "actors/preemption.hpp"
#include "actors/node_connector.hpp"
#include "actors/run_fingerprint.hpp"
#include "actors/supervisor.hpp"
#include "actors/topology.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/listen_address.hpp"
#include "actors/role_metrics.hpp"
#include "runtime/observe/http_request.hpp"
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
    if (cfg_.task == chief_task()) {
      if (auto err = prepare())
        return err;
      return run_chief();
    }
    if (auto err = join()) {
      say_why_not(err);
      return err;
    }
    return supervise();
  }

private:
  /// A task other than the chief's: builds, connects and hosts its roles
  /// and publishes them.
  caf::error join() {
    if (auto err = prepare())
      return err;
    const auto& job = cfg_.task.job;
    caf::error err;
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
    return publish();
  }

  /// This task cannot join the run (`err`): the chief hears why before
  /// this process ends (actors/join_refusal.hpp), unless it knows already
  /// (it refused this task's hello) or is not there (this task waited for
  /// a peer in vain; so did the chief). An evaluator is not awaited.
  void say_why_not(const caf::error& err) {
    if (cfg_.task.job == "evaluator" || !chief_must_hear(err, chief_task()))
      return;
    refuse_to_join(sys_, self_, join_route::of(cfg_), chief_task(),
                   connects_to_chief(cfg_.task), render(err), log_);
  }

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
    nc.fingerprint = fingerprint;
    nc.chief = chief_task();
    // The node actor exists before its hello, the hello before the
    // supervisor's connectors: the supervisor starts with a node handle it
    // learns at once below.
    auto hello_of_node = std::make_shared<node_hello>();
    if (cfg_.task != chief_task()) {
      auto sup = spawn_supervisor(sys_, supervisor_config_for(hello_of_node));
      if (!sup)
        return sup.error();
      supervisor_ = *sup;
      top_.own(supervisor_);
      if (cfg_.on_supervisor)
        cfg_.on_supervisor(supervisor_);
      nc.owner = caf::actor_cast<caf::actor>(supervisor_);
    } else {
      auto sup = spawn_chief_supervisor(
        sys_, chief_supervisor_config_for(hello_of_node));
      if (!sup)
        return sup.error();
      chief_supervisor_ = *sup;
      top_.own(chief_supervisor_);
      nc.owner = caf::actor_cast<caf::actor>(chief_supervisor_);
    }
    node_ = sys_.spawn(node, std::move(nc));
    top_.own(node_);
    hello_ = make_hello(sys_, cfg_.task, caf::actor_cast<caf::actor>(node_),
                        std::move(fingerprint));
    *hello_of_node = hello_;
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
    auto bound = publish_node(node_, cfg_.bind.empty() ? addr.host : cfg_.bind,
                              addr.port, cfg_.tls);
    if (!bound)
      return bound.error();
    std::string hosted;
    for (const auto& kvp : *roles_)
      hosted += (hosted.empty() ? "" : ", ") + kvp.first;
    log_ << me() << ": listening on " << bound->str()
         << (bound->str() == addr.str() ? ""
                                         : " (cluster entry " + addr.str() + ")")
         << (cfg_.tls ? " (TLS)" : "") << ", hosting " << hosted << std::endl;
    auto warning = net::insecure_warning(cfg_.cluster, cfg_.bind, cfg_.tls);
    if (!warning.empty())
      log_ << me() << ": " << warning << std::endl;
    return caf::none;
  }

  /// Connects to the tasks not connected yet; `abandon` as
  /// connect_options says.
  caf::error connect(std::vector<task_id> peers,
                     std::function<caf::error()> abandon = {}) {
    auto todo = missing_peers(peers, cfg_.task, nodes_);
    if (todo.empty())
      return caf::none;
    auto opts = cfg_.connect;
    opts.abandon = std::move(abandon);
    auto infos = connect_nodes(sys_, self_, cfg_.cluster, todo, hello_, opts,
                               log_);
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
    host(role_name("worker", i), caf::actor_cast<caf::actor>(*w));
    return caf::none;
  }

  /// What this node's supervisor watches and whom it rebinds. The hello
  /// its connectors send is filled in once the node actor exists.
  supervisor_config
  supervisor_config_for(std::shared_ptr<const node_hello> hello) const {
    supervisor_config sc;
    sc.me = me();
    sc.chief = chief_task().str();
    sc.chief_address = cfg_.cluster.address(chief_task()).str();
    sc.reconnects_to_chief = connects_to_chief(cfg_.task);
    std::set<std::string> peers;
    auto watch = [&](const task_id& t) {
      if (t != cfg_.task && t != chief_task())
        peers.insert(t.str());
    };
    for (int32_t s = 0; s < sync_.ps_tasks; ++s) {
      watch({"ps", s});
      sc.shard_roles.emplace_back(task_id{"ps", s}.str(), role_name("ps", s));
    }
    if (uses_kfac(sync_)) {
      for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c)
        watch(covariance_host(sync_, cfg_.cluster, c));
      for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k)
        watch(inverse_host(sync_, cfg_.cluster, k));
    }
    sc.peers.assign(peers.begin(), peers.end());
    const auto& t = cfg_.task;
    if (t.job == "worker" && !dedicated_inverter(sync_, cfg_.cluster, t)) {
      if (t.index < tasks_.gradient_workers)
        sc.gradient_worker = t.index;
      else
        sc.stats_worker = true;
      if (sends_statistics(sync_, tasks_, t.index))
        for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c)
          sc.covariance_roles.emplace_back(
            covariance_host(sync_, cfg_.cluster, c).str(),
            role_name("covariance", c));
    }
    sc.max_wait = cfg_.max_wait;
    sc.request_timeout = cfg_.connect.request_timeout;
    // The chief's own bound on the step in flight (chief_config::
    // preempt_wait), its checkpoint and its word to this node.
    sc.preempt_wait = std::min(sync_.step_timeout,
                               std::chrono::milliseconds{20000})
                      + 2 * cfg_.connect.request_timeout
                      + std::chrono::milliseconds{10000};
    sc.connect_attempt = connect_attempt();
    sc.connector = connector_for(hello);
    sc.hello = hello;
    auto* log = &log_;
    sc.log = [log](const std::string& line) { *log << line << std::endl; };
    return sc;
  }

  /// Each connect attempt of a supervisor's connector tries for a second
  /// (as a node did before it had a supervisor), so that a connector stops
  /// soon after the run ends; this bounds one answer.
  std::chrono::milliseconds connect_attempt() const {
    return std::chrono::milliseconds{1000}
           + 2 * std::min(cfg_.connect.request_timeout,
                          std::chrono::milliseconds{2000})
           + std::chrono::milliseconds{1000};
  }

  std::function<connector_actor(const std::string&)>
  connector_for(std::shared_ptr<const node_hello> hello) const {
    auto cluster = cfg_.cluster;
    auto opts = cfg_.connect;
    opts.timeout = std::chrono::milliseconds{1000};
    auto* sys = &sys_;
    return [sys, cluster, opts, hello](const std::string&) {
      return spawn_node_connector(*sys, cluster, *hello, opts);
    };
  }

  /// The chief's node: where every role lives, which tasks connect to the
  /// chief themselves, and how lost ones are reached again.
  chief_supervisor_config
  chief_supervisor_config_for(std::shared_ptr<const node_hello> hello) const {
    chief_supervisor_config sc;
    sc.me = me();
    for (const auto& t : cfg_.cluster.tasks()) {
      sc.addresses[t.str()] = cfg_.cluster.address(t).str();
      if (t != cfg_.task && t.job != "evaluator" && connects_to_chief(t))
        sc.passive.insert(t.str());
    }
    auto& pl = sc.placement;
    for (int32_t s = 0; s < sync_.ps_tasks; ++s)
      pl.shards.push_back({task_id{"ps", s}.str(), role_name("ps", s)});
    for (int32_t i = 0; i < tasks_.worker_tasks(); ++i)
      (i >= tasks_.gradient_workers ? pl.stats_workers : pl.workers)
        .push_back({task_id{"worker", i}.str(), role_name("worker", i)});
    if (uses_kfac(sync_)) {
      for (int32_t c = 0; c < sync_.kfac.covariance_actors; ++c)
        pl.covariance.push_back({covariance_host(sync_, cfg_.cluster, c).str(),
                                 role_name("covariance", c)});
      for (int32_t k = 0; k < sync_.kfac.inverse_actors; ++k)
        pl.inverses.push_back({inverse_host(sync_, cfg_.cluster, k).str(),
                               role_name("inverse", k)});
    }
    sc.hello = hello;
    sc.max_wait = cfg_.max_wait;
    sc.request_timeout = cfg_.connect.request_timeout;
    sc.probe_timeout = sync_.role_probe_timeout;
    sc.connect_attempt = connect_attempt();
    sc.connector = connector_for(hello);
    auto* log = &log_;
    sc.log = [log](const std::string& line) { *log << line << std::endl; };
    return sc;
  }

  /// Bounds the wait for the supervisor's end: every step within the step
  /// timeout, and the chief's absences within max_wait each (which the
  /// supervisor itself ends); a node that does not know the run's length
  /// (no data here, --num_epochs) waits a year.
  std::chrono::milliseconds end_wait() const {
    int64_t steps = sync_.base.steps;
    if (train_)
      steps = total_steps(sync_, tasks_, train_->count);
    if (steps <= 0)
      return std::chrono::hours{24 * 365};
    return cfg_.max_wait * 2 + sync_.step_timeout * (steps + 1);
  }

  /// Non-chief nodes: hands the wiring to the supervisor and waits for its
  /// end of the run.
  caf::expected<node_outcome> supervise() {
    node_wiring wiring;
    wiring.nodes = nodes_;
    wiring.hosted = *roles_;
    wiring.worker = worker_;
    auto bound = end_wait();
    std::optional<node_end> end;
    caf::error err;
    self_->request(supervisor_, bound, run_atom::value, std::move(wiring))
      .receive([&](node_end& e) { end = std::move(e); },
               [&](caf::error& e) {
                 err = with_context(e, "waiting " + std::to_string(
                                         bound.count())
                                         + " ms for the end of the run");
               });
    if (err)
      return err;
    if (end->error)
      return end->error;
    node_outcome out;
    out.exit_code = end->exit_code;
    return out;
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

  /// The chief's node, published, connects to the tasks it reaches
  /// itself: a task that said meanwhile that it cannot join ends the wait
  /// (the chief's supervisor keeps the word).
  std::function<caf::error()> told_why_not() {
    return [this]() -> caf::error {
      // Asked on the connector's thread: an actor of its own, not self_,
      // which waits for the connector.
      caf::scoped_actor asker{sys_};
      caf::error out;
      asker->request(chief_supervisor_, cfg_.connect.request_timeout,
                     refuse_atom::value)
        .receive(
          [&](std::string& why) {
            if (!why.empty())
              out = make_error(ec::invalid_config, why);
          },
          [&](caf::error& err) {
            out = with_context(err, "asking the chief's supervisor whether "
                                    "a task cannot join the run");
          });
      return out;
    };
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
    // Named now, created once every node agreed (on_connected below): a
    // node refused at connect leaves no file behind.
    out.name_outputs(sync_.base.metrics_path, sync_.base.logdir,
                     sync_.base.hparams);
    // The launcher's pipe for the chief's progress (runtime/progress_record.hpp).
    if (auto err = out.open_progress_record())
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
    if (cfg_.on_chief)
      cfg_.on_chief((*driver)->chief());
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
    if (auto err = connect(active, told_why_not())) {
      // The nodes connected so far hear it: none waits for a chief that
      // is gone (--max_wait_ms).
      end_run("training failed: " + render(err), {});
      return err;
    }
    // A restarted chief goes on with the workers that come back soon; a
    // lost one (e.g. a backup killed for good) may rejoin later.
    bool restarted = (*driver)->shards_kept();
    chief_run wiring;
    wiring.nodes = nodes_;
    wiring.hosted = *roles_;
    for (const auto& t : passive)
      wiring.awaited.push_back(t.str());
    wiring.await_wait = restarted ? std::min<std::chrono::milliseconds>(
                                      cfg_.connect.timeout,
                                      std::chrono::seconds{10})
                                  : cfg_.connect.timeout;
    wiring.partial = restarted;
    wiring.on_connected = [this, &out, steps]() -> caf::error {
      if (auto err = out.open_named_outputs())
        return err;
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
      return caf::none;
    };
    // The supervisor bounds each of its waits for a lost role by max_wait;
    // a few of them fit into the bound of the whole run.
    auto summary = (*driver)->run(self_, chief_supervisor_, std::move(wiring),
                                  cfg_.max_wait * 4);
    for (const auto& [task, info] : (*driver)->nodes())
      nodes_[task] = info;
    auto reason = !summary ? "training failed: " + render(summary.error())
                  : !summary->preempted.empty()
                    ? preempted_run_reason(summary->preempted)
                    : std::string{"training finished"};
    // Nodes that joined on their own (an evaluator) end first, while the
    // shards are still up: they may finish a last evaluation.
    end_callers(reason);
    node_outcome outcome;
    outcome.cluster = cluster_report((*driver)->shards(), (*driver)->roles());
    end_run(reason, (*driver)->hellos());
    if (!summary)
      return summary.error();
    if (!summary->preempted.empty())
      outcome.exit_code = exit_codes::preempted;
    outcome.summary = std::move(*summary);
    return outcome;
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
          entries[i].add("unreachable", "not there when the run ended (lost, "
                                        "or not back after the chief's "
                                        "restart)");
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

  /// Whether `name` ("worker:1") is a task of the cluster that trains (an
  /// evaluator, listed or not, only reads the shards).
  bool trains(const std::string& name) const {
    for (const auto& t : cfg_.cluster.tasks())
      if (t.str() == name)
        return t.job != "evaluator";
    return false;
  }

  /// Tells the nodes that said hello to this one but are no task that
  /// trains (e.g. an evaluator; the last hello of each counts) that the
  /// run is over; they may finish work (a last evaluation on the shards)
  /// before they answer, so they are told before the shards. Not by
  /// nodes_: the supervisor knows every node that said hello, the
  /// evaluator's too.
  void end_callers(const std::string& reason) {
    std::map<std::string, caf::actor> callers;
    self_->request(node_, cfg_.connect.request_timeout, hello_atom::value)
      .receive(
        [&](std::vector<std::string>& names, std::vector<caf::actor>& nodes) {
          for (size_t i = 0; i < names.size() && i < nodes.size(); ++i)
            if (names[i] != me() && !trains(names[i]))
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
  void end_run(const std::string& reason,
               const std::map<std::string, caf::actor>& hellos) {
    std::map<std::string, caf::actor> peers;
    for (auto& kvp : nodes_)
      if (kvp.second.job != "chief")
        if (auto n = node_of(kvp.second))
          peers[kvp.first] = n;
    for (auto& kvp : hellos)
      if (peers.count(kvp.first) > 0)
        peers[kvp.first] = kvp.second;
    tell_run_over(peers, reason);
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
    log_ << me() << ": metrics on "
         << observe::http_url(sync_.base.metrics_bind, endpoint_->port(),
                              "/metrics")
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
  /// Every node but the chief's: its supervisor; the chief's node: the
  /// chief's supervisor (actors/chief_supervisor.hpp).
  supervisor_actor supervisor_;
  chief_supervisor_actor chief_supervisor_;
  metrics_actor metrics_;
  /// A worker task's worker.
  worker_actor worker_;
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
  return net::require_tls_off_loopback(cluster, bind, tls, insecure);
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
