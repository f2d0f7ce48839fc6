#pragma once

// One task of a cluster file as one process: the roles the task hosts, the
// peers it connects to, and how it ends. Every node derives the run's
// topology from the same flags and cluster file (actors/topology.hpp) and
// its plan from them once (runtime/cluster/node_plan.hpp: the roles it
// hosts and in which order, its peers, its waits), so the processes of a
// cluster build exactly the actors the in-process trainer builds, only
// spread over actor systems that talk through CAF's middleman.
//
// Who hosts what:
//   chief:0       the chief and the evaluator; the covariance actors when
//                 the cluster has no "covariance" job; the inverse actors
//                 when it has no "inverse" job (chief_worker, all_workers)
//   worker:i      a worker with its device; with dedicated_workers and no
//                 "inverse" job the last worker task hosts the inverse
//                 actors instead (the seeds' "the last inverts")
//   ps:i          PS shard i
//   covariance:c  covariance actor c
//   inverse:k     inverse actor k with its device
//
// Connections follow the messages: an inverse host connects to the shards,
// a covariance host to the inverse hosts, a worker to the shards, the chief
// and the covariance hosts, the chief to everyone. A node publishes itself
// once its own roles exist, so these waits never form a cycle.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/local_trainer.hpp"
#include "actors/node.hpp"
#include "actors/supervisor.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/json.hpp"

namespace syncfac {

struct cluster_run_config {
  /// The run; its topology (workers, shards, covariance and inverse
  /// actors) must agree with the cluster (see derive_topology()).
  sync_training_config sync;
  cluster_spec cluster;
  /// The task this process runs.
  task_id task;
  /// TLS on every connection (the actor system has the openssl module
  /// loaded and configured).
  bool tls = false;
  /// Where this node listens instead of its cluster entry's host (--bind,
  /// e.g. "0.0.0.0" in a container); empty: the entry's host.
  std::string bind;
  /// Plaintext although the cluster reaches beyond loopback (--insecure):
  /// validate() refuses such a cluster without TLS otherwise, and the node
  /// warns once when it runs so (net::require_tls_off_loopback).
  bool insecure = false;
  /// Finding peers: how long, how often, how loudly.
  connect_options connect;
  /// Longest a node other than the chief waits for word from the chief:
  /// its first hello, or its return after its node went down.
  std::chrono::milliseconds max_wait{300000};
  /// Called with the node's supervisor once it exists (every node but the
  /// chief's, actors/supervisor.hpp): a SIGTERM watcher of the program
  /// keeps it and sends it (preempt_atom, why) to end the node with
  /// exit_codes::preempted. May be empty.
  std::function<void(const supervisor_actor&)> on_supervisor;
  /// Called on the chief's node with the chief once it exists: the stop
  /// signal watcher there sends it (preempt_atom, why) to end the run
  /// after the global step in flight (docs/distributed.md, "Preemption").
  /// May be empty.
  std::function<void(const chief_actor&)> on_chief;

  /// Hands the first stop signal (the program's watcher), also one that
  /// came before, to the given actor as (preempt_atom, std::string
  /// signal): a task that cannot join and waits to tell the chief why
  /// (actors/join_refusal.hpp) stops waiting then. May be empty.
  std::function<void(const caf::actor&)> send_stop_to;

  caf::error validate() const;
};

/// Sets the topology of `sync` from `cluster`: worker_replicas (worker
/// tasks times sync.workers_per_task), ps_tasks, and the covariance and
/// inverse actors (one per task of those jobs, else as many as `sync` asks
/// for, hosted as above). A flag that contradicts the cluster (e.g.
/// --worker_replicas 3 with two worker tasks) is an error naming both;
/// `explicit_*` say which were given.
caf::error derive_topology(sync_training_config& sync,
                           const cluster_spec& cluster,
                           bool explicit_workers, bool explicit_ps);

/// The training and test sets (loaded only by the tasks that need them).
using data_loader = std::function<
  caf::expected<std::pair<std::shared_ptr<const dataset>,
                          std::shared_ptr<const dataset>>>()>;

/// What a node's run ended with: the chief's summary (plus the cluster's
/// part of it), nothing for the other tasks.
struct node_outcome {
  std::optional<training_summary> summary;
  json_object cluster;
  /// What the process exits with: exit_codes::success, or preempted when
  /// a preemption ended the run (the chief's summary says which node's).
  int32_t exit_code = 0;
};

/// Runs `cfg.task` until the run is over: the chief until its last step
/// and the final evaluation (then it tells every node), any other task
/// until the chief says so. Every wait is bounded and says what it waits
/// for.
caf::expected<node_outcome> run_cluster_node(caf::actor_system& sys,
                                             const cluster_run_config& cfg,
                                             const data_loader& load,
                                             std::ostream& log);

} // namespace syncfac
