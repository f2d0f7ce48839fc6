#pragma once

// The CPU share this process was given, and the threads it runs on it
// (docs/distributed.md, "Under Slurm, taskset and CPU limits"). A Slurm
// task, a taskset or cpuset, and a Kubernetes pod with a CPU limit each
// give a process fewer CPUs than the machine has; more threads than that
// only take turns. The budget is the smallest of
//
//   1. the CPUs of the affinity mask (sched_getaffinity: taskset, cpusets,
//      Slurm's --cpus-per-task binding),
//   2. the cgroup's CPU quota: v2 cpu.max, or v1 cpu.cfs_quota_us /
//      cpu.cfs_period_us on hosts still on cgroup v1 (Docker and
//      Kubernetes nodes before cgroup v2): quota / period, rounded down, at
//      least 1 (a pod's CPU limit), the tightest on the way up from this
//      process's cgroup,
//   3. SLURM_CPUS_PER_TASK,
//   4. OMP_NUM_THREADS,
//
// each only where set, and named by the first of that order that gives it
// (the machine's CPUs, "hardware", when none is set). An explicit
// --threads wins over all. CAF's scheduler threads are counted in the
// budget: see plan_threads. The pure parts here take their inputs as
// values, so that tests give them any machine's.

#include <optional>
#include <string>

#include <caf/expected.hpp>

namespace syncfac {

/// What the CPU share is read from.
struct cpu_share_inputs {
  /// CPUs of the affinity mask (0: unknown).
  int affinity_cpus = 0;
  /// The tightest cgroup CPU quota as CPUs (quota / period), if any, and
  /// the file it came from ("cpu.max", v2; "cpu.cfs_quota_us", v1).
  std::optional<double> cgroup_cpus;
  std::string cgroup_file = "cpu.max";
  /// The environment's values, raw (empty: not set).
  std::string slurm_cpus_per_task;
  std::string omp_num_threads;
  /// The machine's CPUs (std::thread::hardware_concurrency).
  int hardware_cpus = 1;
};

/// The CPUs this process may use and which input said so.
struct cpu_budget {
  int cpus = 1;
  /// "affinity", "cgroup cpu.max", "cgroup cpu.cfs_quota_us",
  /// "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS" or "hardware".
  std::string source = "hardware";
};

/// The CPUs of a cgroup v2 cpu.max file's text ("150000 100000": 1.5;
/// "max 100000": nullopt, no limit); ec::invalid_argument naming the text
/// when it is neither.
caf::expected<std::optional<double>> parse_cpu_max(const std::string& text);

/// The budget of `in` by the order above; an environment value that is
/// not a positive integer is ignored, named in `ignored` (for the log).
cpu_budget resolve_cpu_budget(const cpu_share_inputs& in,
                              std::string* ignored = nullptr);

/// The CPUs of a cgroup v1 quota: cpu.cfs_quota_us and cpu.cfs_period_us's
/// texts ("100000", "100000": 1; a quota of "-1": nullopt, no limit);
/// ec::invalid_argument naming the texts when they are no such numbers.
caf::expected<std::optional<double>>
parse_cfs_quota(const std::string& quota_us, const std::string& period_us);

/// This process's inputs: its affinity mask, its cgroup's CPU quota (and
/// its parents'; v2, else v1), the environment, the machine.
cpu_share_inputs read_cpu_share();

/// The threads of a run on a budget.
struct thread_plan {
  /// Compute threads (the device actors') and CAF's scheduler threads.
  int compute = 1;
  int caf = 1;
  /// Where the compute count came from: "--threads" or the budget's
  /// source.
  std::string source;
  /// The budget they were planned on.
  cpu_budget budget;

  /// "2 compute threads (affinity: 2 CPUs) + 1 CAF scheduler thread".
  std::string describe() const;
};

/// The threads on `budget`: CAF's scheduler gets `caf_threads` (0: a
/// quarter of the budget, 2 to 4, never more than the budget: the PS
/// shards and the chief work on them), the compute threads `threads` (0:
/// the budget less CAF's threads; under 8 CPUs the whole budget, for the
/// scheduler's threads sleep between messages under the sharing policy and
/// taking 2 of 4 CPUs from compute would halve the step rate).
thread_plan plan_threads(const cpu_budget& budget, int threads,
                         int caf_threads);

} // namespace syncfac
