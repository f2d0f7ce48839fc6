#pragma once

// One node's plan, computed once before it spawns anything: the roles the
// node hosts (in the order it spawns them), where every role of the run
// lives, whom it connects to and who connects to it, what its supervisor
// watches, and the bounds of its waits. Pure: the node program
// (actors/cluster_node.hpp) and the in-process trainer (a "cluster" of one
// process that hosts every role, single_process_plan) build their roles
// from it. docs/design.md §6 and docs/distributed.md ("Who hosts what")
// describe who hosts what.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

/// What the plan needs of the run's configuration: how many roles of each
/// kind and which worker tasks send K-FAC statistics (actors/topology.hpp
/// computes it from the run's sync_training_config).
struct run_shape {
  int32_t ps_tasks = 1;
  int32_t gradient_workers = 1;
  int32_t statistics_workers = 0;
  bool kfac = false;
  /// cov_inv_op_strategy dedicated_workers: without an "inverse" job the
  /// last worker task hosts the inverse actors.
  bool dedicated_workers = false;
  int32_t covariance_actors = 1;
  int32_t inverse_actors = 1;
  /// Per worker (workers() of them): whether it sends statistics.
  std::vector<bool> sends_statistics;
  /// Worker actors per worker task (--workers_per_task K): worker task t
  /// hosts workers t*K .. t*K+K-1, each its own peer of the chief and the
  /// shards. More than one only for first-order runs.
  int32_t workers_per_task = 1;

  /// Worker actors: gradient, then statistics workers.
  int32_t workers() const {
    return gradient_workers + statistics_workers;
  }

  /// Tasks that run worker actors.
  int32_t worker_tasks() const {
    return workers_per_task > 0 ? workers() / workers_per_task : workers();
  }
};

/// The bounds a node's waits start from (flags of the node program).
struct node_wait_flags {
  /// Longest wait of a task for word from the chief (--max_wait_ms).
  std::chrono::milliseconds max_wait{300000};
  /// Longest wait for one answer (--request_timeout_ms).
  std::chrono::milliseconds request_timeout{10000};
  /// Longest wait for the peers at the start (--connect_timeout_ms).
  std::chrono::milliseconds connect_timeout{60000};
  /// Longest wait for one global step (--step_timeout_ms).
  std::chrono::milliseconds step_timeout{60000};
};

/// The node's waits, each computed once from the flags.
struct node_waits {
  std::chrono::milliseconds max_wait{300000};
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds connect_timeout{60000};
  std::chrono::milliseconds step_timeout{60000};
  /// One attempt of a supervisor's connector: a second of connecting (so
  /// that a connector stops soon after the run ends) plus its answers.
  std::chrono::milliseconds connect_attempt{4000};
  /// How long a supervisor waits for the chief's word after passing on a
  /// preemption: the chief's own bound on the step in flight
  /// (chief_config::preempt_wait), its checkpoint and its word.
  std::chrono::milliseconds preempt_wait{60000};

  /// How long the chief waits for the tasks that connect to it: a chief
  /// that restarted goes on with the workers that come back soon.
  std::chrono::milliseconds await_wait(bool restarted) const;

  /// Bounds a node's wait for the end of a run of `steps` global steps:
  /// each within the step timeout, the chief's absences within max_wait
  /// each; a year when the node does not know the run's length (`steps`
  /// <= 0: no data here and --num_epochs).
  std::chrono::milliseconds end_wait(int64_t steps) const;
};

node_waits make_node_waits(const node_wait_flags& flags);

enum class role_type { shard, inverse, covariance, metrics, chief, worker };

/// The job a role kind runs as ("ps", "inverse", ...).
const char* job_of(role_type kind) noexcept;

/// One role of the run and the task that hosts it.
struct planned_role {
  role_type kind = role_type::shard;
  int32_t index = 0;
  task_id host;

  /// What the role goes by in hellos, logs and the metrics directory:
  /// "ps:1", "worker:0", "covariance:0", "inverse:2", "chief", "metrics".
  std::string name() const;
};

bool operator==(const planned_role& x, const planned_role& y);

struct node_plan {
  /// This node's task and the chief's (chief:0, or worker:0 in a cluster
  /// without a chief job).
  task_id task;
  task_id chief;
  /// The roles this node hosts, in the order it spawns them: shards,
  /// inverse actors (they need the shards), covariance actors (they need
  /// the inverse actors), the metrics sink and the chief, then the
  /// workers (they need all of the former).
  std::vector<planned_role> hosted;
  /// Every role of the run, by kind, in index order.
  std::vector<planned_role> shards;
  std::vector<planned_role> workers;
  std::vector<planned_role> stats_workers;
  std::vector<planned_role> covariance;
  std::vector<planned_role> inverses;
  /// The chief's node: the tasks it connects to (`active`) and the ones
  /// that connect to it themselves (`passive`: their hellos are awaited; a
  /// second connection between two nodes confuses CAF's TLS transport).
  /// Evaluators join on their own and are in neither.
  std::vector<task_id> active;
  std::vector<task_id> passive;
  /// Every node but the chief's: the peer tasks its supervisor watches and
  /// connects to again (the hosts of the shards and of the K-FAC roles,
  /// neither itself nor the chief), and whether it connects to the chief
  /// itself.
  std::vector<task_id> watched;
  bool connects_to_chief = false;
  /// Whether this node needs the training and test sets (the chief and
  /// the workers that train; they go into the run's fingerprint).
  bool loads_data = false;
  /// This node's workers, if it hosts any: the first one's index, how many
  /// (consecutive indices; run_shape::workers_per_task), whether they
  /// compute gradients (else statistics) and whether they send statistics
  /// (the same for all: several per task only without K-FAC).
  int32_t worker = -1;
  int32_t hosted_workers = 0;
  bool gradient_worker = false;
  bool sends_statistics = false;
  /// Where its metrics server listens (--metrics_port plus the task's
  /// position in the cluster file); 0: none.
  int32_t metrics_port = 0;
  node_waits waits;

  bool is_chief() const {
    return task == chief;
  }

  /// The roles of `kind` this node hosts.
  std::vector<planned_role> hosted_of(role_type kind) const;

  /// The hosts of `roles`, in order (duplicates kept: one per role).
  static std::vector<task_id> hosts_of(const std::vector<planned_role>& roles);
};

/// The task hosting covariance actor `c`, inverse actor `k` (the cluster's
/// "covariance" and "inverse" jobs, else the chief; with dedicated_workers
/// and no "inverse" job the last worker task inverts).
task_id covariance_host(const cluster_spec& cluster, int32_t c);
task_id inverse_host(const run_shape& shape, const cluster_spec& cluster,
                     int32_t k);

/// Whether task `t` connects to the chief on its own: a worker that
/// trains, and a covariance task when an inverse actor lives on the
/// chief's node.
bool connects_to_chief(const run_shape& shape, const cluster_spec& cluster,
                       const task_id& t);

/// The plan of `task` in `cluster`. Refused, with an ec::invalid_config
/// error naming the thing: a task the cluster does not name, a job this
/// program has no role for, a worker task beyond the run's workers, a
/// shape that contradicts the cluster (its ps, covariance or inverse
/// tasks), workers per task below 1, not dividing the workers or with
/// K-FAC, a metrics port above 65535, a wait that is not positive.
caf::expected<node_plan> make_node_plan(const cluster_spec& cluster,
                                        const task_id& task,
                                        const run_shape& shape,
                                        const node_wait_flags& flags,
                                        int32_t metrics_port_base = 0);

/// The in-process trainer's plan: a cluster of one process (chief:0) that
/// hosts every role but the metrics sink (no other process reports to
/// it); it connects to nobody, so its waits are left as they are. A shape
/// make_node_plan would refuse is refused alike.
caf::expected<node_plan> single_process_plan(const run_shape& shape);

} // namespace syncfac
