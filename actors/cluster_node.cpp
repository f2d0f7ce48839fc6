#include "actors/cluster_node.hpp"

#include <algorithm>
#include <map>
#include <memory>

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/chief_driver.hpp"
#include "actors/chief_supervisor.hpp"
#include "actors/cluster_end.hpp"
#include "actors/join_refusal.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/node_peers.hpp"
#include "actors/node_supervisor_configs.hpp"
#include "actors/owned_actors.hpp"
#include "actors/preemption.hpp"
#include "actors/role_metrics.hpp"
#include "actors/run_fingerprint.hpp"
#include "actors/run_shape_of.hpp"
#include "actors/supervisor.hpp"
#include "actors/topology.hpp"
#include "runtime/base/error.hpp"
#include "runtime/cluster/node_plan.hpp"
#include "runtime/net/listen_address.hpp"
#include "runtime/observe/http_request.hpp"
#include "runtime/observe/metrics_endpoint.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

namespace {

/// This task cannot join the run (`err`): the chief hears why before
/// this process ends (actors/join_refusal.hpp), unless it knows already
/// (it refused this task's hello) or is not there (this task waited for
/// a peer in vain; so did the chief). An evaluator is not awaited.
void say_why_not(caf::actor_system& sys, caf::scoped_actor& self,
                 const cluster_run_config& cfg, const task_id& chief,
                 const caf::error& err, std::ostream& log) {
  if (cfg.task.job == "evaluator" || !chief_must_hear(err, chief))
    return;
  // Whether it connects to the chief needs no more than the run's
  // K-FAC strategy, which even a refused plan has.
  auto tasks = plan_tasks(cfg.sync);
  auto shape = shape_of(cfg.sync, tasks ? *tasks : task_plan{});
  refuse_to_join(sys, self, join_route::of(cfg), chief,
                 connects_to_chief(shape, cfg.cluster, cfg.task),
                 render(err), log);
}

/// Everything one node builds, connects to and hosts, as its plan says
/// (runtime/cluster/node_plan.hpp).
class node_run {
public:
  node_run(caf::actor_system& sys, const cluster_run_config& cfg,
           node_plan plan, const data_loader& load, std::ostream& log)
    : sys_(sys),
      cfg_(cfg),
      sync_(cfg.sync),
      plan_(std::move(plan)),
      load_(load),
      log_(log),
      self_(sys),
      top_(self_),
      roles_(std::make_shared<std::map<std::string, caf::actor>>()),
      peers_(sys, self_, cfg.cluster, cfg.task, cfg.connect, roles_, log) {
  }

  caf::expected<node_outcome> run() {
    if (plan_.is_chief()) {
      if (auto err = prepare())
        return err;
      return run_chief();
    }
    if (auto err = join()) {
      say_why_not(sys_, self_, cfg_, plan_.chief, err, log_);
      return err;
    }
    return supervise();
  }

private:
  /// A role's spawn function: spawns `role` of the plan here and hosts it.
  using spawn_role = caf::error (node_run::*)(const planned_role& role);

  /// Job -> the function that spawns a role of that job.
  static const std::map<std::string, spawn_role>& spawners() {
    static const std::map<std::string, spawn_role> table{
      {job_of(role_type::shard), &node_run::spawn_shard},
      {job_of(role_type::inverse), &node_run::spawn_inverse_role},
      {job_of(role_type::covariance), &node_run::spawn_covariance_role},
      {job_of(role_type::metrics), &node_run::spawn_metrics_sink_role},
      {job_of(role_type::chief), &node_run::spawn_chief_role},
      {job_of(role_type::worker), &node_run::spawn_worker_role},
    };
    return table;
  }

  using role_iterator = std::vector<planned_role>::const_iterator;

  /// Spawns the roles [first, last) of the plan's hosted roles, in order.
  caf::error spawn_hosted(role_iterator first, role_iterator last) {
    for (auto role = first; role != last; ++role) {
      auto i = spawners().find(job_of(role->kind));
      if (i == spawners().end())
        return make_error(ec::internal, me() + ": no spawn function for "
                                          + role->name());
      if (auto err = (this->*(i->second))(*role))
        return err;
    }
    // The workers join the roles in one go once all exist: the node actor
    // reads the roles while it answers the chief, who asks until it sees
    // all of a task's workers (a task may host several,
    // --workers_per_task).
    for (size_t k = hosted_workers_; k < workers_.size(); ++k)
      host(plan_.hosted_of(role_type::worker)[k].name(),
           caf::actor_cast<caf::actor>(workers_[k]));
    hosted_workers_ = workers_.size();
    return caf::none;
  }

  /// A task other than the chief's: builds, connects and hosts its roles
  /// and publishes them.
  caf::error join() {
    if (auto err = prepare())
      return err;
    if (auto err = spawn_hosted(plan_.hosted.begin(), plan_.hosted.end()))
      return err;
    return publish();
  }

  std::string me() const {
    return cfg_.task.str();
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
    if (plan_.loads_data)
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
    nc.chief = plan_.chief;
    // The node actor exists before its hello, the hello before the
    // supervisor's connectors: the supervisor starts with a node handle it
    // learns at once below.
    auto hello_of_node = std::make_shared<node_hello>();
    if (!plan_.is_chief()) {
      auto sup = spawn_supervisor(
        sys_, node_supervisor_config(sys_, plan_, cfg_.cluster, cfg_.connect,
                                     hello_of_node, log_));
      if (!sup)
        return sup.error();
      supervisor_ = *sup;
      top_.own(supervisor_);
      if (cfg_.on_supervisor)
        cfg_.on_supervisor(supervisor_);
      nc.owner = caf::actor_cast<caf::actor>(supervisor_);
    } else {
      auto sup = spawn_chief_supervisor(
        sys_, chief_node_supervisor_config(sys_, plan_, cfg_.cluster,
                                           cfg_.connect,
                                           sync_.role_probe_timeout,
                                           hello_of_node, log_));
      if (!sup)
        return sup.error();
      chief_supervisor_ = *sup;
      top_.own(chief_supervisor_);
      nc.owner = caf::actor_cast<caf::actor>(chief_supervisor_);
    }
    node_ = sys_.spawn(node, std::move(nc));
    top_.own(node_);
    *hello_of_node = make_hello(sys_, cfg_.task,
                                caf::actor_cast<caf::actor>(node_),
                                std::move(fingerprint));
    peers_.hello(*hello_of_node);
    if (plan_.is_chief())
      status_ = std::make_shared<observe::run_status>();
    return serve_metrics();
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

  caf::error spawn_shard(const planned_role& role) {
    auto shard = spawn_ps_shard(sys_,
                                layout_.shards[static_cast<size_t>(role.index)]);
    if (!shard)
      return shard.error();
    top_.own(*shard);
    host(role.name(), caf::actor_cast<caf::actor>(*shard));
    return caf::none;
  }

  caf::error spawn_inverse_role(const planned_role& role) {
    auto ps = peers_.find_all<ps_actor>(plan_.shards);
    if (!ps)
      return ps.error();
    auto dev = spawn_inverse_device(sys_, sync_, top_);
    if (!dev)
      return dev.error();
    auto inv = spawn_inverse(sys_, make_inverse_config(sync_, *kfac_, layout_,
                                                       role.index, *ps, *dev));
    if (!inv)
      return inv.error();
    top_.own(*inv);
    host(role.name(), caf::actor_cast<caf::actor>(*inv));
    return caf::none;
  }

  caf::error spawn_covariance_role(const planned_role& role) {
    auto inv = peers_.find_all<inverse_actor>(plan_.inverses);
    if (!inv)
      return inv.error();
    auto cov = spawn_covariance(sys_, make_covariance_config(sync_, *kfac_,
                                                             role.index,
                                                             *inv));
    if (!cov)
      return cov.error();
    top_.own(*cov);
    host(role.name(), caf::actor_cast<caf::actor>(*cov));
    return caf::none;
  }

  caf::error spawn_worker_role(const planned_role& role) {
    auto i = role.index;
    if (auto err = load_data())
      return err;
    // The task's workers (--workers_per_task) share the process's threads.
    auto dev = spawn_worker_device(sys_, sync_, i, plan_.hosted_workers,
                                   top_);
    if (!dev)
      return dev.error();
    auto ps = peers_.find_all<ps_actor>(plan_.shards);
    if (!ps)
      return ps.error();
    if (auto err = peers_.connect({plan_.chief}))
      return err;
    auto chief = peers_.find<chief_actor>(plan_.chief, "chief");
    if (!chief)
      return chief.error();
    std::vector<covariance_actor> cov;
    if (plan_.sends_statistics) {
      auto c = peers_.find_all<covariance_actor>(plan_.covariance);
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
    workers_.push_back(*w);
    return caf::none;
  }

  /// The chief's node: the metrics sink other roles report to (role
  /// "metrics"); it writes into the chief's log, so it stops before the
  /// log ends (chief_parts).
  caf::error spawn_metrics_sink_role(const planned_role& role) {
    if (chief_ == nullptr)
      return make_error(ec::internal, me() + " hosts no chief's log for "
                                        + role.name());
    auto sink = spawn_metrics_sink(sys_, metrics_sink_config{chief_->out.get()});
    if (!sink)
      return sink.error();
    chief_->sink = *sink;
    metrics_ = *sink;
    host(role.name(), caf::actor_cast<caf::actor>(*sink));
    return caf::none;
  }

  caf::error spawn_chief_role(const planned_role& role) {
    if (chief_ == nullptr)
      return make_error(ec::internal, me() + " hosts no chief's log for "
                                        + role.name());
    auto driver = chief_driver::make(sys_, top_, sync_, tasks_, chief_->steps,
                                     chief_->shards, test_, *chief_->out);
    if (!driver)
      return driver.error();
    chief_->driver = std::move(*driver);
    host(role.name(), caf::actor_cast<caf::actor>(chief_->driver->chief()));
    if (cfg_.on_chief)
      cfg_.on_chief(chief_->driver->chief());
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

  /// Non-chief nodes: hands the wiring to the supervisor and waits for its
  /// end of the run.
  caf::expected<node_outcome> supervise() {
    node_wiring wiring;
    wiring.nodes = peers_.nodes();
    wiring.hosted = *roles_;
    wiring.workers = workers_;
    int64_t steps = sync_.base.steps;
    if (train_)
      steps = total_steps(sync_, tasks_, train_->count);
    auto bound = plan_.waits.end_wait(steps);
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

  /// What only the chief's node has, and the order it ends in: the
  /// driver first, then the metrics sink (it writes into the log), then
  /// the log.
  struct chief_parts {
    caf::scoped_actor& self;
    int64_t steps = 0;
    std::vector<ps_actor> shards;
    std::unique_ptr<training_log> out;
    metrics_actor sink;
    std::unique_ptr<chief_driver> driver;

    explicit chief_parts(caf::scoped_actor& s) : self(s) {
    }

    ~chief_parts() {
      driver.reset();
      if (sink) {
        self->send_exit(sink, caf::exit_reason::user_shutdown);
        self->wait_for(sink);
      }
    }
  };

  caf::expected<node_outcome> run_chief() {
    if (auto err = load_data())
      return err;
    chief_parts parts{self_};
    chief_ = &parts;
    struct forget {
      chief_parts*& p;
      ~forget() {
        p = nullptr;
      }
    } forget_parts{chief_};
    auto ps = peers_.find_all<ps_actor>(plan_.shards);
    if (!ps)
      return ps.error();
    parts.shards = *ps;
    // The K-FAC roles hosted here come first (the plan puts them before
    // the metrics sink): the chief's log is opened once they exist.
    auto own = std::find_if(plan_.hosted.begin(), plan_.hosted.end(),
                            [](const planned_role& r) {
                              return r.kind == role_type::metrics;
                            });
    if (auto err = spawn_hosted(plan_.hosted.begin(), own))
      return err;
    parts.steps = total_steps(sync_, tasks_, train_->count);
    parts.out = std::make_unique<training_log>(log_, parts.steps,
                                               sync_.base.progress, status_);
    auto& out = *parts.out;
    // Named now, created once every node agreed (on_connected below): a
    // node refused at connect leaves no file behind.
    out.name_outputs(sync_.base.metrics_path, sync_.base.logdir,
                     sync_.base.hparams);
    // The launcher's pipe for the chief's progress
    // (runtime/progress_record.hpp).
    if (auto err = out.open_progress_record())
      return err;
    // The sink, the chief, and without a chief job worker 0 (TensorFlow's
    // rule): its worker joins the chief here, found like any other.
    if (auto err = spawn_hosted(own, plan_.hosted.end()))
      return err;
    if (auto err = publish())
      return err;
    // Everyone else; training starts once all are here. Tasks that connect
    // to the chief themselves are awaited rather than connected to (the
    // plan's passive tasks).
    cluster_end end{self_, me(), cfg_.connect.request_timeout, log_};
    if (auto err = peers_.connect(plan_.active, told_why_not())) {
      // The nodes connected so far hear it: none waits for a chief that
      // is gone (--max_wait_ms).
      end.tell_nodes(peers_.nodes(), {}, "training failed: " + render(err));
      return err;
    }
    auto& driver = *parts.driver;
    // A restarted chief goes on with the workers that come back soon; a
    // lost one (e.g. a backup killed for good) may rejoin later.
    bool restarted = driver.shards_kept();
    chief_run wiring;
    wiring.nodes = peers_.nodes();
    wiring.hosted = *roles_;
    for (const auto& t : plan_.passive)
      wiring.awaited.push_back(t.str());
    wiring.await_wait = plan_.waits.await_wait(restarted);
    wiring.partial = restarted;
    auto steps = parts.steps;
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
    auto summary = driver.run(self_, chief_supervisor_, std::move(wiring),
                              cfg_.max_wait * 4);
    for (const auto& [task, info] : driver.nodes())
      peers_.nodes()[task] = info;
    auto reason = !summary ? "training failed: " + render(summary.error())
                  : !summary->preempted.empty()
                    ? preempted_run_reason(summary->preempted)
                    : std::string{"training finished"};
    // Nodes that joined on their own (an evaluator) end first, while the
    // shards are still up: they may finish a last evaluation.
    end.tell_callers(node_, cfg_.cluster, reason);
    auto report = end.collect(driver.shards(), driver.roles(), metrics_,
                              counters_timeout(sync_));
    report.tasks = static_cast<int64_t>(cfg_.cluster.tasks().size());
    report.tls = cfg_.tls;
    node_outcome outcome;
    outcome.cluster = report.to_json();
    end.tell_nodes(peers_.nodes(), driver.hellos(), reason);
    if (!summary)
      return summary.error();
    if (!summary->preempted.empty())
      outcome.exit_code = exit_codes::preempted;
    outcome.summary = std::move(*summary);
    return outcome;
  }

  /// --metrics_port: this task's port, as the plan says.
  caf::error serve_metrics() {
    if (plan_.metrics_port <= 0)
      return caf::none;
    auto ep = observe::serve_metrics(
      plan_.metrics_port, sync_.base.metrics_bind, cfg_.task.job,
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
  node_plan plan_;
  const data_loader& load_;
  std::ostream& log_;
  caf::scoped_actor self_;
  owned_actors top_;
  std::shared_ptr<std::map<std::string, caf::actor>> roles_;
  node_peers peers_;
  node_actor node_;
  task_plan tasks_;
  std::unique_ptr<model> init_;
  shard_layout layout_;
  std::optional<kfac_layout> kfac_;
  std::shared_ptr<const dataset> train_;
  std::shared_ptr<const dataset> test_;
  /// Every node but the chief's: its supervisor; the chief's node: the
  /// chief's supervisor (actors/chief_supervisor.hpp).
  supervisor_actor supervisor_;
  chief_supervisor_actor chief_supervisor_;
  metrics_actor metrics_;
  /// The chief's node while run_chief runs: its log, sink and driver.
  chief_parts* chief_ = nullptr;
  /// A worker task's workers, in index order (as the plan hosts them).
  std::vector<worker_actor> workers_;
  /// How many of them are among the hosted roles yet (spawn_hosted).
  size_t hosted_workers_ = 0;
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

caf::expected<node_outcome> run_cluster_node(caf::actor_system& sys,
                                             const cluster_run_config& cfg,
                                             const data_loader& load,
                                             std::ostream& log) {
  if (auto err = cfg.validate())
    return err;
  // The plan first: a task it refuses hosts nothing (the chief still
  // hears why, as of any task that cannot join).
  auto tasks = plan_tasks(cfg.sync);
  auto plan = !tasks ? caf::expected<node_plan>{tasks.error()}
                     : make_node_plan(cfg.cluster, cfg.task,
                                      shape_of(cfg.sync, *tasks),
                                      wait_flags_of(cfg.sync, cfg.max_wait,
                                                    cfg.connect
                                                      .request_timeout,
                                                    cfg.connect.timeout),
                                      cfg.sync.base.metrics_port);
  if (!plan) {
    if (cfg.task != cfg.cluster.chief_task()) {
      caf::scoped_actor self{sys};
      say_why_not(sys, self, cfg, cfg.cluster.chief_task(),
                            plan.error(), log);
    }
    return with_context(plan.error(), cfg.task.str());
  }
  node_run run{sys, cfg, std::move(*plan), load, log};
  auto outcome = run.run();
  if (!outcome)
    return with_context(outcome.error(), cfg.task.str());
  return outcome;
}

} // namespace syncfac
