#include "runtime/process_stats.hpp"

#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

namespace syncfac {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0; // KiB on Linux
}

double current_rss_mib() {
  std::ifstream statm{"/proc/self/statm"};
  long pages = 0;
  long resident = 0;
  if (!(statm >> pages >> resident))
    return 0.0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE))
         / (1024.0 * 1024.0);
}

} // namespace syncfac
