#include "python/run_slot.hpp"

#include <atomic>

#include "python/failure.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::python {

namespace {

std::atomic<bool> taken{false};

} // namespace

run_slot::run_slot(const std::string& who) {
  bool expected = false;
  if (!taken.compare_exchange_strong(expected, true))
    throw failure{make_error(ec::unavailable,
                             who + ": another run of this process is in "
                                   "progress (one at a time: the CPU "
                                   "kernels' level, memory settings and CPU "
                                   "share belong to the process; start "
                                   "another process for a second run)")};
}

run_slot::~run_slot() {
  taken = false;
}

bool run_in_progress() noexcept {
  return taken;
}

} // namespace syncfac::python
