#pragma once

// Elapsed wall time as roles and programs report it: seconds, from the
// monotonic clock, so that a clock change mid-run cannot make it negative.

#include <chrono>

namespace syncfac {

/// Seconds since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - start)
    .count();
}

} // namespace syncfac
