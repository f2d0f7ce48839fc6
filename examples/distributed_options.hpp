#pragma once

// The flags and the run of one task of a cluster: the node program
// convnet_mnist_distributed's (examples/convnet_mnist_distributed.cpp) and
// syncfac.node's in Python (python/python_node.cpp, docs/python.md), so
// that both read the same flags with the same defaults, ranges and
// messages, derive the cluster the same way (--cluster, TF_CONFIG, srun,
// mpirun) and run the same node. Header-only, as convnet_options.hpp.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "actors/cluster_node.hpp"
#include "actors/stop_on_signal.hpp"
#include "actors/topology.hpp"
#include "convnet_options.hpp"
#include "messages/push_parts.hpp"
#include "runtime/base/error.hpp"
#include "runtime/cluster/scheduler_env.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/stop_signals.hpp"
#include "runtime/system_shutdown.hpp"

namespace syncfac::examples {

/// The ConvNet flags plus the cluster's.
struct distributed_options : convnet_options {
  std::string cluster;
  std::string job_name;
  int32_t task = -1;
  std::string layout;
  int32_t port_base = 0;
  std::string hosts;
  std::string tls_dir;
  std::string bind;
  bool insecure = false;
  bool print_cluster = false;
  int64_t connect_timeout_ms = 120000;
  int64_t max_wait_ms = 300000;
  int64_t heartbeat_ms = 1000;
  int64_t middleman_workers = 0;
  /// --dead_peer_timeout_ms (old spelling --connection_timeout_ms); -1:
  /// 10 s, or off with TLS (see configure_system).
  int64_t connection_timeout_ms = -1;
  int64_t push_part_kib = default_push_part_bytes / 1024;
  int32_t workers_per_task = 1;

  /// The middleman's connection timeout in effect. CAF 0.17's TLS
  /// transport closes healthy connections within seconds when one is set
  /// (measured here), so under TLS a frozen peer is seen by the request
  /// timeouts instead.
  std::chrono::milliseconds connection_timeout() const {
    if (connection_timeout_ms >= 0)
      return std::chrono::milliseconds{connection_timeout_ms};
    return std::chrono::milliseconds{tls_dir.empty() ? 10000 : 0};
  }

  distributed_options() {
    // 0: take the count from the cluster file (a value given must agree);
    // R by the rule of runtime/sync/replica_counts.hpp, as in one process.
    worker_replicas = 0;
    ps_tasks = 0;
    replicas_to_aggregate = 0;
    opt_group{custom_options_, "global"}
      .add(cluster, "cluster", "cluster file (TF_CONFIG's shape); else the "
                               "TF_CONFIG environment variable")
      .add(job_name, "job_name", "this task's job (overrides the file's)")
      .add(task, "task", "this task's index (overrides the file's)")
      .add(layout, "layout",
           "under srun/mpirun: ranks per job, in the order chief, ps, "
           "covariance, inverse, the rest workers (default chief=1,ps=1)")
      .add(port_base, "port_base",
           "under srun/mpirun: rank r on a host listens on port_base + "
           "its local rank (default 25000)")
      .add(hosts, "hosts",
           "under mpirun: the ranks' hosts as h1:SLOTS,h2:SLOTS, filled in "
           "order (default SYNCFAC_HOSTS, else localhost when every rank "
           "is local)")
      .add(tls_dir, "tls_dir", "TLS with mutual authentication: directory "
                               "with ca.pem, node.pem, node.key")
      .add(bind, "bind", "listen on this address instead of the cluster "
                         "entry's host (e.g. 0.0.0.0 in a container)")
      .add(insecure, "insecure", "allow plaintext when the cluster reaches "
                                 "beyond loopback (docs/tls.md)")
      .add(print_cluster, "print_cluster",
           "print the cluster this task (or, in a Slurm job's batch script, "
           "the job's tasks) will run as a cluster file, and exit: for "
           "scripts/make-cluster-certs.sh --cluster")
      .add(connect_timeout_ms, "connect_timeout_ms",
           "longest wait for the peers a node needs to be reachable")
      .add(max_wait_ms, "max_wait_ms",
           "longest a non-chief node waits for word from the chief")
      .add(middleman_workers, "middleman_workers",
           "threads deserialising incoming messages (0: the I/O thread "
           "itself, one copy less per tensor)")
      .add(heartbeat_ms, "heartbeat_ms",
           "middleman heartbeat interval (0: off)")
      .add(connection_timeout_ms, "dead_peer_timeout_ms",
           "a peer silent this long is taken for dead (0: never; "
           "default 10000, off with --tls_dir)")
      .add(connection_timeout_ms, "connection_timeout_ms",
           "the old spelling of --dead_peer_timeout_ms (not "
           "--connect_timeout_ms, the wait for peers at the start)")
      .add(push_part_kib, "push_part_kib",
           "a gradient push to another process goes as parts of about this "
           "many KiB, two at least above half that (default 1024; 0: whole)")
      .add(workers_per_task, "workers_per_task",
           "worker actors per worker task, each a peer of the chief and the "
           "shards: worker task t hosts workers t*K .. t*K+K-1, N = worker "
           "tasks times K (first-order runs; benchmarks of many workers)");
    // 0: from the cluster file (a value given must agree).
    limit("worker_replicas", at_least(0));
    limit("ps_tasks", at_least(0));
    limit("task", at_least(0));
    limit("port_base", between(0, 65535));
    limit("connect_timeout_ms", at_least(1));
    limit("max_wait_ms", at_least(1));
    limit("middleman_workers", at_least(0));
    limit("heartbeat_ms", at_least(0));
    limit("dead_peer_timeout_ms", at_least(0));
    limit("connection_timeout_ms", at_least(0));
    limit("push_part_kib", at_least(0));
    limit("workers_per_task", between(1, 4096));
  }
};

/// How the cluster is derived under srun or mpirun (--layout, --port_base,
/// --hosts).
inline scheduler_options launcher_options(const distributed_options& opts) {
  scheduler_options launcher;
  launcher.layout = opts.layout;
  launcher.port_base = opts.port_base;
  launcher.hosts = opts.hosts;
  return launcher;
}

inline caf::expected<cluster_run_config> make_config(distributed_options& opts) {
  if (opts.runtime != "sync")
    return make_error(ec::invalid_config,
                      "--runtime " + opts.runtime
                        + ": a cluster runs the sync runtime only");
  bool explicit_workers = opts.worker_replicas > 0;
  bool explicit_ps = opts.ps_tasks > 0;
  auto launcher = launcher_options(opts);
  auto cluster = resolve_cluster(opts.cluster, opts.job_name, opts.task,
                                 launcher);
  if (!cluster)
    return cluster.error();
  // The sync config's validation needs counts >= 1; the cluster's replace
  // them right after.
  bool default_r = opts.replicas_to_aggregate == 0;
  opts.worker_replicas = std::max(opts.worker_replicas, 1);
  opts.ps_tasks = std::max(opts.ps_tasks, 1);
  opts.replicas_to_aggregate = std::max(opts.replicas_to_aggregate, 1);
  auto sync = opts.to_sync_config();
  if (!sync)
    return sync.error();
  if (opts.push_part_kib < 0)
    return make_error(ec::invalid_config, "--push_part_kib must be >= 0, got "
                                            + std::to_string(opts.push_part_kib));
  sync->push_part_bytes = opts.push_part_kib * 1024;
  cluster_run_config cfg;
  cfg.sync = std::move(*sync);
  cfg.sync.workers_per_task = opts.workers_per_task;
  if (auto err = derive_topology(cfg.sync, *cluster, explicit_workers,
                                 explicit_ps))
    return err;
  if (default_r) {
    // The in-process rule (runtime/sync/replica_counts.hpp) with N the
    // cluster's worker count, so the same flags train the same way.
    auto counts = resolve_replica_counts(cfg.sync.worker_replicas, 0,
                                         uses_kfac(cfg.sync));
    if (!counts)
      return counts.error();
    cfg.sync.replicas_to_aggregate = counts->replicas_to_aggregate;
  }
  cfg.cluster = std::move(*cluster);
  cfg.task = *cfg.cluster.task;
  cfg.tls = !opts.tls_dir.empty();
  cfg.connect.tls = cfg.tls;
  cfg.bind = opts.bind;
  cfg.insecure = opts.insecure;
  cfg.connect.timeout = std::chrono::milliseconds{opts.connect_timeout_ms};
  cfg.connect.request_timeout = cfg.sync.base.request_timeout;
  cfg.max_wait = std::chrono::milliseconds{opts.max_wait_ms};
  // A frozen covariance or inverse task can keep its link to the chief up
  // through the other nodes: the chief probes them itself.
  cfg.sync.role_probe_timeout = opts.connection_timeout().count() > 0
                                  ? opts.connection_timeout()
                                  : cfg.sync.base.request_timeout;
  // Only the chief draws progress; the other nodes' output is interleaved
  // by the launcher.
  if (cfg.task != cfg.cluster.chief_task())
    cfg.sync.base.progress = false;
  if (auto err = cfg.validate())
    return err;
  return cfg;
}

/// Liveness and TLS go into the actor system's configuration before it
/// starts: a frozen peer is seen within heartbeat + connection timeout,
/// and half-configured TLS is refused here instead of inside CAF.
inline caf::error configure_system(distributed_options& opts,
                            const cluster_run_config& run) {
  if (opts.middleman_workers < 0)
    return make_error(ec::invalid_config,
                      "middleman_workers must be >= 0, got "
                        + std::to_string(opts.middleman_workers));
  // Deserialising on the I/O thread saves a copy of every incoming tensor
  // and a thread hop: 46% -> 59% of raw TCP for 16 MiB pushes here
  // (bench/run_net.sh); a PS shard with many workers on a big machine may
  // want a few threads instead.
  opts.set("middleman.workers",
           static_cast<size_t>(opts.middleman_workers));
  if (opts.heartbeat_ms < 0 || opts.connection_timeout_ms < -1)
    return make_error(ec::invalid_config,
                      "heartbeat_ms and dead_peer_timeout_ms must be >= 0");
  opts.set("middleman.heartbeat-interval",
           caf::timespan{std::chrono::milliseconds{opts.heartbeat_ms}});
  opts.set("middleman.connection-timeout",
           caf::timespan{opts.connection_timeout()});
  if (opts.tls_dir.empty())
    return caf::none;
  return net::configure_node_tls(opts, opts.tls_dir, run.task, run.cluster);
}

/// Runs the task `cfg` names until the run is over (actors/cluster_node.hpp)
/// in an actor system of this process configured by `opts`, with the
/// stop signals of `opts.stop_signals` (if set) wired in: the first ends
/// the run after the global step in flight, through the node's supervisor
/// or, on the chief's node, the chief itself (docs/distributed.md,
/// "Preemption"). `load` gives the data to the tasks that need it; the
/// node's log goes to `log`. `report` turns the outcome into the exit code
/// (writing the summary) before the actor system ends, bounded
/// (runtime/system_shutdown.hpp); returns that code.
template <class Report>
int run_node(distributed_options& opts, cluster_run_config& cfg,
             const data_loader& load, std::ostream& log, Report report) {
  auto* w = opts.stop_signals;
  if (w != nullptr) {
    w->say_on_stop(what_a_stop_loses(opts.checkpoint_dir, false));
    cfg.on_supervisor = [w](const supervisor_actor& sup) {
      w->on_stop([sup](const std::string& signal) {
        caf::anon_send(sup, preempt_atom::value, signal);
      });
    };
    cfg.send_stop_to = [w](const caf::actor& whom) {
      w->on_stop([whom](const std::string& signal) {
        caf::anon_send(whom, preempt_atom::value, signal);
      });
    };
    cfg.on_chief = [w, task = cfg.task.str()](const chief_actor& chief) {
      w->on_stop([chief, task](const std::string& signal) {
        caf::anon_send(chief, preempt_atom::value, task + ": " + signal);
      });
    };
  }
  auto sys = std::make_unique<caf::actor_system>(opts);
  caf::expected<node_outcome> outcome = run_cluster_node(*sys, cfg, load,
                                                         log);
  // The actors go with the system: no signal is handed to them after
  // this.
  if (w != nullptr)
    w->on_stop({});
  int code = report(outcome);
  end_actor_system(std::move(sys), system_shutdown_limit, cfg.task.str(),
                   w != nullptr ? w->exit_code_of(code) : code, std::cerr);
  return code;
}

} // namespace syncfac::examples
