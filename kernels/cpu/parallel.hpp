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

/// Elementwise work below this many elements per part runs faster on one
/// thread than split.
inline constexpr int64_t min_elements_per_part = int64_t{1} << 15;

/// f(rows) over contiguous row ranges of a [rows, cols] matrix, on as many
/// threads (at most `threads`) as the elements are worth; row-wise kernels
/// (softmax, sigmoid cross-entropy) are small and mostly stay on the
/// calling thread.
template <class F>
void for_row_parts(int threads, int64_t rows, int64_t cols, F&& f) {
  auto parts = std::clamp<int64_t>(rows * cols / min_elements_per_part, 1,
                                   threads);
  parts = std::min(parts, std::max<int64_t>(rows, 1));
  parallel_for(static_cast<int>(parts), parts,
               [&](int64_t i, int) { f(split(rows, parts, i)); });
}

} // namespace syncfac::cpu
