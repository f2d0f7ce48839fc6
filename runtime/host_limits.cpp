#include "runtime/host_limits.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
#include "runtime/cgroup.hpp"

namespace syncfac {

namespace {

/// The first number in the file at `path`; UINT64_MAX when it is missing
/// or says "max".
uint64_t read_number(const std::string& path) {
  std::ifstream in{path};
  std::string word;
  if (!(in >> word) || word == "max")
    return UINT64_MAX;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return UINT64_MAX;
  }
}

/// A field of /proc/self/status in bytes ("VmSize:", "VmRSS:").
uint64_t status_bytes(const std::string& field) {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0)
      return std::stoull(line.substr(field.size())) * 1024;
  return 0;
}

void take_least(host_limit& limit, uint64_t amount, std::string source) {
  if (amount < limit.amount) {
    limit.amount = amount;
    limit.source = std::move(source);
  }
}

uint64_t less_used(uint64_t limit, uint64_t used) {
  return limit == UINT64_MAX ? limit : (limit > used ? limit - used : 0);
}

} // namespace

host_limit usable_memory() {
  host_limit limit;
  auto rss = status_bytes("VmRSS:");
  auto pages = sysconf(_SC_PHYS_PAGES);
  auto page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0)
    take_least(limit,
               less_used(saturating_mul(static_cast<uint64_t>(pages),
                                        static_cast<uint64_t>(page)),
                         rss),
               "physical memory");
  // The own cgroup's limit and those of its parents: each bounds it.
  // cgroup v2's memory.max, or v1's memory.limit_in_bytes (a value near
  // 2^63 there means none).
  for (const auto& dir : cgroup_dirs("memory")) {
    auto max = read_number(dir.path + (dir.v2 ? "/memory.max"
                                              : "/memory.limit_in_bytes"));
    if (max >= (uint64_t{1} << 62))
      continue; // "max", or v1's page-rounded 2^63: no limit
    auto used = read_number(dir.path + (dir.v2 ? "/memory.current"
                                               : "/memory.usage_in_bytes"));
    take_least(limit, less_used(max, used == UINT64_MAX ? rss : used),
               std::string{dir.v2 ? "cgroup memory.max of "
                                  : "cgroup memory.limit_in_bytes of "}
                 + dir.group);
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    take_least(limit, less_used(as.rlim_cur, status_bytes("VmSize:")),
               "RLIMIT_AS (ulimit -v)");
  return limit;
}

host_limit usable_threads() {
  host_limit limit;
  // The threads of the whole machine now: /proc/loadavg's "running/total".
  uint64_t running = 0;
  {
    std::ifstream in{"/proc/loadavg"};
    std::string a, b, c, counts;
    if (in >> a >> b >> c >> counts) {
      auto slash = counts.find('/');
      if (slash != std::string::npos)
        running = std::strtoull(counts.c_str() + slash + 1, nullptr, 10);
    }
  }
  take_least(limit,
             less_used(read_number("/proc/sys/kernel/threads-max"), running),
             "/proc/sys/kernel/threads-max");
  take_least(limit, less_used(read_number("/proc/sys/kernel/pid_max"), running),
             "/proc/sys/kernel/pid_max");
  rlimit nproc{};
  if (getrlimit(RLIMIT_NPROC, &nproc) == 0
      && nproc.rlim_cur != RLIM_INFINITY)
    take_least(limit, nproc.rlim_cur, "RLIMIT_NPROC (ulimit -u)");
  return limit;
}

std::string byte_size(uint64_t bytes) {
  if (bytes == UINT64_MAX)
    return "more than 16 EiB";
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024)
    return std::to_string(bytes) + " bytes";
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, units[unit]);
  return buf;
}

caf::error check_memory(uint64_t need, const std::string& what,
                        const host_limit& limit) {
  if (need <= limit.amount)
    return caf::none;
  return make_error(ec::invalid_config,
                    what + " needs " + byte_size(need) + ", more than the "
                      + byte_size(limit.amount) + " this process may use ("
                      + limit.source + ")");
}

} // namespace syncfac
