#pragma once

// How the ranks of a launcher (srun, mpirun) become the tasks of a
// cluster: `--layout chief=1,ps=2,covariance=1,inverse=1` counts the
// ranks of each job; ranks go in this fixed order: chief, ps, covariance,
// inverse, then every remaining rank is a worker. So with 6 ranks and
// "chief=1,ps=2" rank 0 is chief:0, ranks 1-2 ps:0-1, ranks 3-5
// worker:0-2. docs/distributed.md ("Ranks, jobs and ports") describes it.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

/// The layout when --layout is not given.
constexpr const char* default_rank_layout = "chief=1,ps=1";

/// The first port of a host when --port_base is not given: rank r on a
/// host listens on port_base + its local rank (its place among the ranks
/// on that host). Below Linux's ephemeral range (32768-60999 by default,
/// net.ipv4.ip_local_port_range), where an outgoing connection of any
/// process on the host may hold the port at the moment a rank listens.
constexpr int32_t default_port_base = 25000;

/// The jobs --layout may count, in rank order ("worker" may be given and
/// must then equal the ranks left over).
std::vector<std::string> rank_layout_jobs();

/// The task of every rank 0..ranks-1 under `layout` (empty: the default).
/// `ranks_source` says where the rank count came from
/// ("SLURM_NTASKS=4"), for the messages. Refused (ec::invalid_config,
/// naming --layout and its value): a malformed entry, an unknown or
/// repeated job, a chief count other than 1, a layout that leaves no
/// worker, a "worker" count that is not the rest.
caf::expected<std::vector<task_id>>
assign_ranks(const std::string& layout, int32_t ranks,
             const std::string& ranks_source);

/// The cluster of ranks whose hosts are `host_of_rank` (one name per
/// rank, in rank order): rank r's address is its host and port_base plus
/// the number of ranks before r on the same host. `task_of_rank` comes
/// from assign_ranks(). The task is left unset.
caf::expected<cluster_spec>
cluster_of_ranks(const std::vector<std::string>& host_of_rank,
                 const std::vector<task_id>& task_of_rank, int32_t port_base);

/// Rank r's place among the ranks on its host (its local rank).
std::vector<int32_t>
local_ranks(const std::vector<std::string>& host_of_rank);

} // namespace syncfac
