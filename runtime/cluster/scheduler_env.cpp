#include "runtime/cluster/scheduler_env.hpp"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "runtime/cluster/rank_layout.hpp"
#include "runtime/cluster/slurm_lists.hpp"
#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

extern char** environ;

namespace syncfac {

namespace {

/// "SLURM_PROCID='x': what", or "--hosts 'x': what" for a flag.
caf::error bad_var(const std::string& name, const std::string& value,
                   const std::string& what) {
  auto sep = name.rfind("--", 0) == 0 ? " " : "=";
  return make_error(ec::invalid_config,
                    name + sep + in_quotes(value) + ": " + what);
}

const std::string* find(const environment_map& env, const std::string& name) {
  auto i = env.find(name);
  return i == env.end() ? nullptr : &i->second;
}

/// The integer value of `name` (>= `lo`), which must be set.
caf::expected<int32_t> int_var(const environment_map& env,
                               const std::string& name, int32_t lo,
                               const std::string& needed_by) {
  auto value = find(env, name);
  if (value == nullptr)
    return make_error(ec::invalid_config, needed_by + " is set but " + name
                                            + " is not");
  if (value->empty() || value->size() > 9
      || !std::all_of(value->begin(), value->end(),
                      [](unsigned char c) { return std::isdigit(c); })
      || std::stol(*value) < lo)
    return bad_var(name, *value,
                   "not a number >= " + std::to_string(lo));
  return static_cast<int32_t>(std::stol(*value));
}

/// The first of `names` that is set, or nullptr; its name in `which`.
const std::string* first_of(const environment_map& env,
                            const std::vector<std::string>& names,
                            std::string& which) {
  for (const auto& name : names)
    if (auto value = find(env, name)) {
      which = name;
      return value;
    }
  return nullptr;
}

caf::error check_rank(const std::string& rank_name, int32_t rank,
                      const std::string& size_name, int32_t size) {
  if (rank >= size)
    return make_error(ec::invalid_config,
                      rank_name + "=" + std::to_string(rank)
                        + ": out of range for " + size_name + "="
                        + std::to_string(size) + " (ranks 0.."
                        + std::to_string(size - 1) + ")");
  return caf::none;
}

/// The launcher's local rank of this rank, if it says, must be the one
/// derived from the hosts (ranks filled in host order, block by block).
caf::error check_local_rank(const environment_map& env,
                            const std::string& name, int32_t derived,
                            const std::string& how) {
  auto value = find(env, name);
  if (value == nullptr)
    return caf::none;
  auto given = int_var(env, name, 0, name);
  if (!given)
    return given.error();
  if (*given != derived)
    return bad_var(name, *value,
                   "the derived local rank is " + std::to_string(derived)
                     + " (" + how + "); ranks must fill the hosts in order "
                     "(block distribution)");
  return caf::none;
}

caf::expected<scheduler_cluster>
finish(const std::vector<std::string>& host_of_rank, int32_t rank,
       const std::string& ranks_source, const scheduler_options& opts,
       std::string source) {
  auto tasks = assign_ranks(opts.layout, static_cast<int32_t>(
                                           host_of_rank.size()),
                            ranks_source);
  if (!tasks)
    return tasks.error();
  auto spec = cluster_of_ranks(host_of_rank, *tasks,
                               opts.port_base == 0 ? default_port_base
                                                   : opts.port_base);
  if (!spec)
    return spec.error();
  spec->task = (*tasks)[static_cast<size_t>(rank)];
  return scheduler_cluster{std::move(*spec), std::move(source)};
}

caf::expected<scheduler_cluster>
from_slurm(const environment_map& env, const scheduler_options& opts) {
  if (!opts.hosts.empty())
    return make_error(ec::invalid_config,
                      "--hosts " + in_quotes(opts.hosts)
                        + ": under Slurm the hosts come from "
                          "SLURM_JOB_NODELIST; --hosts is for mpirun");
  auto rank = int_var(env, "SLURM_PROCID", 0, "SLURM_PROCID");
  if (!rank)
    return rank.error();
  std::string size_name = find(env, "SLURM_NTASKS") == nullptr
                              && find(env, "SLURM_NPROCS") != nullptr
                            ? "SLURM_NPROCS"
                            : "SLURM_NTASKS";
  auto size = int_var(env, size_name, 1, "SLURM_PROCID");
  if (!size)
    return size.error();
  if (auto err = check_rank("SLURM_PROCID", *rank, size_name, *size))
    return err;
  // A step's own lists when srun gives them (a step may use part of the
  // allocation), else the job's; always as a pair, so that they agree.
  std::string list_name;
  std::string counts_name;
  const std::string* list = nullptr;
  const std::string* counts = nullptr;
  if (find(env, "SLURM_STEP_NODELIST") && find(env,
                                               "SLURM_STEP_TASKS_PER_NODE")) {
    list_name = "SLURM_STEP_NODELIST";
    counts_name = "SLURM_STEP_TASKS_PER_NODE";
    list = find(env, list_name);
    counts = find(env, counts_name);
  } else {
    list = first_of(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"},
                    list_name);
    // A step over the whole allocation may give only the step's counts.
    counts = first_of(env, {"SLURM_TASKS_PER_NODE",
                            "SLURM_STEP_TASKS_PER_NODE"},
                      counts_name);
    if (list == nullptr)
      return make_error(ec::invalid_config,
                        "SLURM_PROCID is set but SLURM_JOB_NODELIST is not");
    if (counts == nullptr)
      return make_error(ec::invalid_config,
                        "SLURM_PROCID is set but neither "
                        "SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE "
                        "is");
  }
  auto hosts = expand_slurm_hostlist(list_name, *list);
  if (!hosts)
    return hosts.error();
  auto per_node = expand_slurm_tasks_per_node(counts_name, *counts);
  if (!per_node)
    return per_node.error();
  if (per_node->size() != hosts->size())
    return bad_var(counts_name, *counts,
                   "counts " + std::to_string(per_node->size())
                     + " nodes but " + list_name + "=" + in_quotes(*list)
                     + " names " + std::to_string(hosts->size()));
  std::vector<std::string> host_of_rank;
  for (size_t i = 0; i < hosts->size(); ++i)
    host_of_rank.insert(host_of_rank.end(),
                        static_cast<size_t>((*per_node)[i]), (*hosts)[i]);
  if (host_of_rank.size() != static_cast<size_t>(*size))
    return bad_var(counts_name, *counts,
                   "counts " + std::to_string(host_of_rank.size())
                     + " tasks but " + size_name + "="
                     + std::to_string(*size));
  auto local = local_ranks(host_of_rank);
  if (auto err = check_local_rank(env, "SLURM_LOCALID",
                                  local[static_cast<size_t>(*rank)],
                                  "from " + list_name + " and "
                                    + counts_name))
    return err;
  auto ranks_source = size_name + "=" + std::to_string(*size);
  return finish(host_of_rank, *rank, ranks_source, opts,
                "Slurm (SLURM_PROCID=" + std::to_string(*rank) + " of "
                  + ranks_source + ")");
}

/// "h1:2,h2:2" (mpirun -H's form) -> one host per slot.
caf::expected<std::vector<std::string>>
expand_hosts(const std::string& name, const std::string& value) {
  std::vector<std::string> result;
  if (value.empty())
    return bad_var(name, value, "empty host list");
  for (const auto& item : comma_items(value)) {
    auto colon = item.rfind(':');
    auto host = item.substr(0, colon);
    std::string slots = colon == std::string::npos ? "1"
                                                   : item.substr(colon + 1);
    if (host.empty() || host.find_first_of(" \t[]/:") != std::string::npos)
      return bad_var(name, value, "bad host " + in_quotes(item)
                                    + " (expected HOST or HOST:SLOTS, e.g. "
                                      "h1:2,h2:2; no IPv6)");
    if (slots.empty() || slots.size() > 6
        || !std::all_of(slots.begin(), slots.end(),
                        [](unsigned char c) { return std::isdigit(c); })
        || std::stol(slots) < 1)
      return bad_var(name, value, "bad slot count in " + in_quotes(item)
                                    + " (expected a number >= 1)");
    result.insert(result.end(), static_cast<size_t>(std::stol(slots)), host);
    if (result.size() > (1u << 20))
      return bad_var(name, value, "too many slots");
  }
  return result;
}

/// One MPI-style launcher's variables.
struct mpi_names {
  std::string launcher;   // "mpirun", "PMI", "PMIx"
  std::string rank;       // OMPI_COMM_WORLD_RANK
  std::string size;       // OMPI_COMM_WORLD_SIZE ("" if none)
  std::string local_rank; // OMPI_COMM_WORLD_LOCAL_RANK ("" if none)
  std::string local_size; // OMPI_COMM_WORLD_LOCAL_SIZE ("" if none)
};

caf::expected<scheduler_cluster>
from_mpi(const environment_map& env, const scheduler_options& opts,
         const mpi_names& names) {
  auto rank = int_var(env, names.rank, 0, names.rank);
  if (!rank)
    return rank.error();
  // The host list: --hosts, else SYNCFAC_HOSTS.
  std::string hosts_name = "--hosts";
  const std::string* hosts_text = opts.hosts.empty() ? nullptr : &opts.hosts;
  if (hosts_text == nullptr && (hosts_text = find(env, "SYNCFAC_HOSTS")))
    hosts_name = "SYNCFAC_HOSTS";
  std::vector<std::string> host_of_rank;
  if (hosts_text != nullptr) {
    auto hosts = expand_hosts(hosts_name, *hosts_text);
    if (!hosts)
      return hosts.error();
    host_of_rank = std::move(*hosts);
  }
  // The world size: the launcher's, else (PMIx) the host list's slots.
  int32_t size = 0;
  std::string size_source;
  if (!names.size.empty() && find(env, names.size)) {
    auto n = int_var(env, names.size, 1, names.rank);
    if (!n)
      return n.error();
    size = *n;
    size_source = names.size + "=" + std::to_string(size);
    if (hosts_text != nullptr
        && host_of_rank.size() != static_cast<size_t>(size))
      return bad_var(hosts_name, *hosts_text,
                     "has " + std::to_string(host_of_rank.size())
                       + " slots but " + size_source
                       + " (give one slot per rank: HOST:SLOTS)");
  } else if (hosts_text != nullptr) {
    size = static_cast<int32_t>(host_of_rank.size());
    size_source = hosts_name + " with " + std::to_string(size) + " slots";
  } else {
    return make_error(ec::invalid_config,
                      names.rank + " is set but neither "
                        + (names.size.empty() ? std::string{}
                                              : names.size + " nor ")
                        + "a host list (--hosts or SYNCFAC_HOSTS) says how "
                          "many ranks there are");
  }
  if (auto err = check_rank(names.rank, *rank,
                            names.size.empty() ? hosts_name : names.size,
                            size))
    return err;
  if (hosts_text == nullptr) {
    // No host list: only when the launcher says every rank is on this
    // host can the addresses be known.
    const std::string* local_size = names.local_size.empty()
                                      ? nullptr
                                      : find(env, names.local_size);
    if (local_size == nullptr || *local_size != std::to_string(size))
      return make_error(ec::invalid_config,
                        names.rank + "=" + std::to_string(*rank) + " of "
                          + size_source
                          + ": the launcher does not say which host each "
                            "rank runs on; give them as --hosts h1:SLOTS,"
                            "h2:SLOTS or SYNCFAC_HOSTS (ranks fill the slots "
                            "in order)"
                          + (local_size == nullptr
                               ? std::string{}
                               : " (" + names.local_size + "="
                                   + in_quotes(*local_size)
                                   + ": not every rank is local)"));
    host_of_rank.assign(static_cast<size_t>(size), "localhost");
  }
  if (!names.local_rank.empty()) {
    auto local = local_ranks(host_of_rank);
    if (auto err = check_local_rank(env, names.local_rank,
                                    local[static_cast<size_t>(*rank)],
                                    "from " + hosts_name))
      return err;
  }
  return finish(host_of_rank, *rank, size_source, opts,
                names.launcher + " (" + names.rank + "="
                  + std::to_string(*rank) + " of " + size_source + ")");
}

/// Whether an MPI launcher's rank variables are there and disagree with
/// SLURM_PROCID / SLURM_NTASKS (mpirun started this process, inside a
/// Slurm job).
bool mpi_started_inside_slurm(const environment_map& env) {
  static const std::pair<const char*, const char*> launchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
    {"PMIX_RANK", nullptr},
  };
  auto value = [&](const char* name) {
    auto v = name == nullptr ? nullptr : find(env, name);
    return v == nullptr ? std::string{} : *v;
  };
  for (const auto& [rank, size] : launchers) {
    if (find(env, rank) == nullptr)
      continue;
    if (value(rank) != value("SLURM_PROCID"))
      return true;
    if (size != nullptr && find(env, size) != nullptr
        && value(size) != value("SLURM_NTASKS"))
      return true;
    return false;
  }
  return false;
}

} // namespace

environment_map current_environment() {
  environment_map env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string entry = *p;
    auto eq = entry.find('=');
    if (eq != std::string::npos)
      env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

caf::expected<std::optional<scheduler_cluster>>
cluster_from_scheduler(const environment_map& env,
                       const scheduler_options& opts) {
  using result = std::optional<scheduler_cluster>;
  auto wrap = [](caf::expected<scheduler_cluster> x)
    -> caf::expected<result> {
    if (!x)
      return x.error();
    return result{std::move(*x)};
  };
  // srun sets SLURM_STEP_ID in every task; a job's batch script has
  // SLURM_PROCID=0 without it. mpirun inside a Slurm job leaves the job's
  // (or its daemons' step's) SLURM_PROCID in every rank's environment,
  // where it says nothing about the rank: there the MPI variables win.
  // Under srun --mpi=pmix both agree, and Slurm's lists are used.
  if (auto procid = find(env, "SLURM_PROCID")) {
    bool srun_step = find(env, "SLURM_STEP_ID") || find(env, "SLURM_STEPID");
    bool mpi_rank = find(env, "OMPI_COMM_WORLD_RANK") || find(env, "PMI_RANK")
                    || find(env, "PMIX_RANK");
    if (srun_step && !mpi_started_inside_slurm(env))
      return wrap(from_slurm(env, opts));
    if (!mpi_rank)
      return make_error(ec::invalid_config,
                        "SLURM_PROCID=" + in_quotes(*procid)
                          + " without SLURM_STEP_ID: this process is a Slurm "
                            "job's batch script (or salloc's shell), not a "
                            "task srun started; start the node programs "
                            "with srun (examples/slurm/"
                            "convnet_mnist_distributed.sbatch)");
  }
  if (find(env, "OMPI_COMM_WORLD_RANK"))
    return wrap(from_mpi(env, opts,
                         {"mpirun", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"}));
  // MPICH's and Intel MPI's Hydra.
  if (find(env, "PMI_RANK"))
    return wrap(from_mpi(env, opts,
                         {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                          "MPI_LOCALNRANKS"}));
  // PMIx launchers other than Open MPI's mpirun (prterun) give no size.
  if (find(env, "PMIX_RANK"))
    return wrap(from_mpi(env, opts, {"PMIx", "PMIX_RANK", "", "", ""}));
  return result{};
}

caf::expected<cluster_spec> slurm_job_cluster(const environment_map& env,
                                              const scheduler_options& opts) {
  if (find(env, "SLURM_JOB_NODELIST") == nullptr
      && find(env, "SLURM_NODELIST") == nullptr)
    return make_error(ec::invalid_config,
                      "SLURM_JOB_NODELIST is not set: not inside a Slurm "
                      "job (run this in its batch script or salloc's shell)");
  // As srun's rank 0 over the whole allocation would see it.
  auto job = env;
  for (const char* step : {"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
                           "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES"})
    job.erase(step);
  job["SLURM_PROCID"] = "0";
  job["SLURM_LOCALID"] = "0";
  job["SLURM_STEP_ID"] = "0";
  auto derived = from_slurm(job, opts);
  if (!derived)
    return derived.error();
  return std::move(derived->spec);
}

} // namespace syncfac
