#pragma once

// Minimal OpenMP helpers. The caller fixes the work items; where results
// must not depend on the thread count (the conv kernels), the items and the
// order in which their partial sums are combined do not depend on it.

#include <algorithm>
#include <cstdint>

#include <omp.h>

namespace syncfac::cpu {

/// Calls f(i, thread) for i in [0, n) on up to `threads` OpenMP threads.
/// f must not throw: buffers are sized before the parallel region.
template <class F>
void parallel_for(int threads, int64_t n, F&& f) {
  auto team = static_cast<int>(std::min<int64_t>(threads, n));
  if (team <= 1) {
    for (int64_t i = 0; i < n; ++i)
      f(i, 0);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i)
    f(i, omp_get_thread_num());
}

/// Half-open range [begin, end) of part `i` of `parts` equal parts of n.
struct range {
  int64_t begin;
  int64_t end;
};

inline range split(int64_t n, int64_t parts, int64_t i) {
  return {n * i / parts, n * (i + 1) / parts};
}

/// Runs f(thread, team) on a team of `threads` threads in which Eigen stays
/// single-threaded: inside a region of one thread Eigen would otherwise open
/// its own nested team of omp_get_max_threads() threads.
template <class F>
void eigen_team(int threads, F&& f) {
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1); // this implicit task only
    f(omp_get_thread_num(), omp_get_num_threads());
  }
}

} // namespace syncfac::cpu
