#pragma once

// The cluster file: which task of which job listens where, in the shape of
// TensorFlow's TF_CONFIG:
//
//   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...],
//                "covariance": [...], "inverse": [...]},
//    "task": {"type": "worker", "index": 0}}
//
// parse() checks the syntax *and* the meaning (validate()), so a spec that
// comes out of parse(), load() or resolve_cluster() is usable as it is.
// Every problem is an ec::invalid_config error whose message says where the
// spec came from and names the entry, e.g.
//   cluster file 'x.json': cluster.worker[1] "localhost:99999": port out of
//   range (1..65535)
// docs/cluster.md describes the format and every check.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac {

/// A network address. `host` is a name or an IPv4/IPv6 address (IPv6
/// without brackets; they are written "[::1]:port").
struct host_port {
  std::string host;
  uint16_t port = 0;

  /// "host:port", "[v6]:port" for IPv6 addresses.
  std::string str() const;

  /// Parses "host:port" or "[v6]:port". The error context names what is
  /// wrong (empty host, missing port, bad port, port out of range).
  static caf::expected<host_port> parse(const std::string& text);
};

bool operator==(const host_port& x, const host_port& y);
bool operator!=(const host_port& x, const host_port& y);

/// One task of a cluster: a job name and an index into its address list.
struct task_id {
  std::string job;
  int32_t index = 0;

  /// "worker:1".
  std::string str() const;

  /// Parses "job:index" (e.g. "worker:1"); the index must be >= 0.
  static caf::expected<task_id> parse(const std::string& text);
};

bool operator==(const task_id& x, const task_id& y);
bool operator!=(const task_id& x, const task_id& y);
bool operator<(const task_id& x, const task_id& y);

/// chief, worker, ps, covariance, inverse, evaluator
std::vector<std::string> default_cluster_jobs();

struct cluster_spec {
  /// job name -> addresses, in file order
  std::map<std::string, std::vector<host_port>> jobs;

  /// The task this process runs, if the spec names one.
  std::optional<task_id> task;

  /// The number of tasks of `job`; 0 if absent.
  int32_t count(const std::string& job) const;

  /// The task that hosts the chief's roles: chief:0, or worker:0 in a
  /// cluster without a chief job, where worker 0 is the chief beside its
  /// own worker (TensorFlow's rule, and the seeds' K-FAC cluster).
  task_id chief_task() const;

  /// Whether `t` names an entry of the cluster.
  bool contains(const task_id& t) const;

  /// Whether the task is TensorFlow's evaluator outside "cluster":
  /// {"type": "evaluator", "index": 0} with no cluster.evaluator. It joins
  /// the others (it connects to the chief and the shards) but has no
  /// address of its own, so it listens nowhere (docs/cluster.md).
  bool task_outside_cluster() const;

  /// The address of task `t`. Precondition: contains(t).
  const host_port& address(const task_id& t) const;

  /// Every task: chief first, then worker, ps, covariance, inverse, then
  /// the other jobs by name; by index within a job.
  std::vector<task_id> tasks() const;

  /// Checks the meaning: every job known, no empty host or port 0, no
  /// address twice, one chief at most (none: worker 0 is the chief, and a
  /// worker job is needed), and the task (if set) in the cluster, or
  /// evaluator:0 outside it (task_outside_cluster()). The error
  /// (ec::invalid_config) names the entry.
  caf::error
  validate(const std::vector<std::string>& known_jobs
           = default_cluster_jobs()) const;

  /// The spec as one line of JSON in the TF_CONFIG shape (jobs in tasks()
  /// order), which parse() reads back to an equal spec.
  std::string to_json() const;

  /// Parses and validates (with default_cluster_jobs()) a cluster in the
  /// TF_CONFIG shape. `source` names where the text came from: a file name,
  /// or "TF_CONFIG" for the environment variable; messages start with
  /// "cluster file 'NAME'" or "TF_CONFIG".
  static caf::expected<cluster_spec> parse(const std::string& json_text,
                                           const std::string& source);

  /// Reads `path` and parse()s it (ec::io_error if it cannot be read).
  static caf::expected<cluster_spec> load(const std::string& path);
};

bool operator==(const cluster_spec& x, const cluster_spec& y);

/// How messages about a spec from `source` begin: "cluster file 'x.json'",
/// or "TF_CONFIG" when source is "TF_CONFIG".
std::string cluster_source_name(const std::string& source);

struct scheduler_options; // runtime/cluster/scheduler_env.hpp

/// From --cluster FILE (if non-empty), else the TF_CONFIG environment
/// variable, else derived from the launcher that started this process:
/// Slurm's srun, then mpirun / PMI / PMIx (runtime/cluster/scheduler_env.hpp,
/// with `launcher`: --layout, --port_base, --hosts, which a cluster spec
/// refuses); then job_name (if non-empty) and task (if >= 0) override the
/// task; validated in full (the task must be set and exist). Errors say
/// where the spec came from.
caf::expected<cluster_spec>
resolve_cluster(const std::string& cluster_file, const std::string& job_name,
                int32_t task, const scheduler_options& launcher,
                const std::vector<std::string>& known_jobs
                = default_cluster_jobs());

/// resolve_cluster() with the launcher's options at their defaults.
caf::expected<cluster_spec>
resolve_cluster(const std::string& cluster_file, const std::string& job_name,
                int32_t task,
                const std::vector<std::string>& known_jobs
                = default_cluster_jobs());

} // namespace syncfac
