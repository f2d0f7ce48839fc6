#include "runtime/cpu_share.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include <sched.h>

#include "runtime/base/error.hpp"
#include "runtime/cgroup.hpp"

namespace syncfac {

namespace {

/// A positive integer's value, or nullopt.
std::optional<int> positive_int(const std::string& text) {
  if (text.empty() || text.size() > 9)
    return std::nullopt;
  for (char c : text)
    if (c < '0' || c > '9')
      return std::nullopt;
  auto v = std::atoi(text.c_str());
  return v > 0 ? std::optional<int>{v} : std::nullopt;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string read_text(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>{in}, {}};
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

} // namespace

caf::expected<std::optional<double>> parse_cpu_max(const std::string& text) {
  std::istringstream in{trim(text)};
  std::string quota;
  std::string period;
  std::string extra;
  in >> quota >> period;
  auto bad = [&] {
    return make_error(ec::invalid_argument,
                      "cpu.max '" + trim(text)
                        + "': expected 'QUOTA PERIOD' or 'max PERIOD'");
  };
  if (quota.empty() || (in >> extra))
    return bad();
  if (period.empty())
    period = "100000"; // the kernel's default period
  auto p = positive_int(period);
  if (!p)
    return bad();
  if (quota == "max")
    return std::optional<double>{};
  auto q = positive_int(quota);
  if (!q)
    return bad();
  return std::optional<double>{static_cast<double>(*q) / *p};
}

caf::expected<std::optional<double>>
parse_cfs_quota(const std::string& quota_us, const std::string& period_us) {
  auto bad = [&] {
    return make_error(ec::invalid_argument,
                      "cpu.cfs_quota_us '" + trim(quota_us)
                        + "', cpu.cfs_period_us '" + trim(period_us)
                        + "': expected a quota in microseconds (-1: none) "
                          "and a positive period");
  };
  auto p = positive_int(trim(period_us));
  if (!p)
    return bad();
  if (trim(quota_us) == "-1")
    return std::optional<double>{};
  auto q = positive_int(trim(quota_us));
  if (!q)
    return bad();
  return std::optional<double>{static_cast<double>(*q) / *p};
}

cpu_budget resolve_cpu_budget(const cpu_share_inputs& in,
                              std::string* ignored) {
  cpu_budget best;
  best.cpus = std::max(1, in.hardware_cpus);
  best.source = "hardware";
  // In the documented order: a later source wins only when it is smaller.
  auto consider = [&](int cpus, const std::string& source) {
    if (cpus >= 1 && (best.source == "hardware" ? cpus <= best.cpus
                                                : cpus < best.cpus)) {
      best.cpus = cpus;
      best.source = source;
    }
  };
  consider(in.affinity_cpus, "affinity");
  if (in.cgroup_cpus)
    consider(std::max(1, static_cast<int>(std::floor(*in.cgroup_cpus))),
             "cgroup " + in.cgroup_file);
  auto from_env = [&](const std::string& value, const char* name) {
    if (value.empty())
      return;
    if (auto n = positive_int(value)) {
      consider(*n, name);
    } else if (ignored != nullptr) {
      *ignored += std::string{ignored->empty() ? "" : "; "} + name + "='"
                  + value + "' is not a positive integer";
    }
  };
  from_env(in.slurm_cpus_per_task, "SLURM_CPUS_PER_TASK");
  from_env(in.omp_num_threads, "OMP_NUM_THREADS");
  return best;
}

cpu_share_inputs read_cpu_share() {
  cpu_share_inputs in;
  in.hardware_cpus = static_cast<int>(
    std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    in.affinity_cpus = CPU_COUNT(&set);
  // The tightest quota of this process's cgroup and its parents, v2's
  // cpu.max or, where the cpu controller is still v1's, cpu.cfs_quota_us.
  for (const auto& dir : cgroup_dirs("cpu")) {
    auto cpus = dir.v2 ? parse_cpu_max(read_text(dir.path + "/cpu.max"))
                       : parse_cfs_quota(
                           read_text(dir.path + "/cpu.cfs_quota_us"),
                           read_text(dir.path + "/cpu.cfs_period_us"));
    if (cpus && *cpus && (!in.cgroup_cpus || **cpus < *in.cgroup_cpus)) {
      in.cgroup_cpus = **cpus;
      in.cgroup_file = dir.v2 ? "cpu.max" : "cpu.cfs_quota_us";
    }
  }
  in.slurm_cpus_per_task = env("SLURM_CPUS_PER_TASK");
  in.omp_num_threads = env("OMP_NUM_THREADS");
  return in;
}

std::string thread_plan::describe() const {
  auto s = [](int n) { return n == 1 ? "" : "s"; };
  std::string why = source == "--threads"
                      ? std::string{"--threads"}
                      : budget.source + ": " + std::to_string(budget.cpus)
                          + " CPU" + s(budget.cpus);
  return std::to_string(compute) + " compute thread" + s(compute) + " ("
         + why + ") + " + std::to_string(caf) + " CAF scheduler thread"
         + s(caf);
}

thread_plan plan_threads(const cpu_budget& budget, int threads,
                         int caf_threads) {
  thread_plan plan;
  plan.budget = budget;
  plan.caf = caf_threads > 0 ? caf_threads
                             : std::min(budget.cpus,
                                        std::clamp(budget.cpus / 4, 2, 4));
  if (threads > 0) {
    plan.compute = threads;
    plan.source = "--threads";
  } else {
    plan.compute = budget.cpus >= 8 ? std::max(1, budget.cpus - plan.caf)
                                    : budget.cpus;
    plan.source = budget.source;
  }
  return plan;
}

} // namespace syncfac
