#pragma once

// The cluster of a program started by a launcher, derived from the
// environment the launcher gives each rank: Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), Open MPI's
// mpirun (OMPI_COMM_WORLD_*), and PMI/PMIx launchers (PMI_RANK/PMI_SIZE,
// PMIX_RANK). Every rank derives the same cluster and its own task, so no
// cluster file is needed. Pure: the environment comes in as a map.
// docs/distributed.md ("Under Slurm", "Under mpirun") describes the rules.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <caf/expected.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

using environment_map = std::map<std::string, std::string>;

/// This process's environment.
environment_map current_environment();

/// What the command line says about a launcher's ranks.
struct scheduler_options {
  /// --layout: ranks per job (runtime/cluster/rank_layout.hpp); empty:
  /// default_rank_layout.
  std::string layout;
  /// --port_base: the first port on every host; 0: default_port_base.
  int32_t port_base = 0;
  /// --hosts (MPI only): "h1:2,h2:2", host names with slots, as mpirun's
  /// -H; empty: SYNCFAC_HOSTS, else localhost when every rank is local.
  std::string hosts;

  /// Whether any option differs from its default (they apply only under
  /// a launcher).
  bool any() const {
    return !layout.empty() || port_base != 0 || !hosts.empty();
  }
};

/// A cluster derived from a launcher's environment.
struct scheduler_cluster {
  /// The cluster with this rank's task set.
  cluster_spec spec;
  /// Where it came from, for messages: "Slurm (SLURM_PROCID=1 of
  /// SLURM_NTASKS=4)", "mpirun (OMPI_COMM_WORLD_RANK=0 of ...)".
  std::string source;
};

/// The cluster of the launcher that started this process: Slurm when
/// SLURM_PROCID and SLURM_STEP_ID are set (srun's task; unless an MPI rank
/// variable disagrees: mpirun inside a Slurm job), else Open MPI when
/// OMPI_COMM_WORLD_RANK is set, else PMI when PMI_RANK is set, else PMIx
/// when PMIX_RANK is set; SLURM_PROCID alone (a batch script) is an
/// error; none
/// (an empty optional) when no launcher's variables are there. Errors
/// (ec::invalid_config) name the variable and its value.
caf::expected<std::optional<scheduler_cluster>>
cluster_from_scheduler(const environment_map& env,
                       const scheduler_options& opts);

/// The cluster the tasks of a Slurm job will derive under srun, as the
/// job's batch script (or salloc's shell) can see it: from
/// SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE and SLURM_NTASKS (the step
/// variables of the batch step itself left aside), with rank 0's task set.
/// For making the job's per-task certificates before srun starts it
/// (examples/slurm/). ec::invalid_config naming a missing or malformed
/// variable.
caf::expected<cluster_spec> slurm_job_cluster(const environment_map& env,
                                              const scheduler_options& opts);

} // namespace syncfac
