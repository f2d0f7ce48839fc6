#pragma once

// What K-FAC's factor kernels take and give beside tensors, the same for
// every backend: how statistics are sub-sampled and a factor held as its
// rows. Messages and the K-FAC runtime use these without including a
// backend's kernels (docs/design.md §9).

#include <cstdint>

#include "kernels/tensor.hpp"

namespace syncfac {

/// Optional sub-sampling of the factor statistics. Averages are over the
/// chosen rows, so the estimate stays unbiased.
struct factor_sampling {
  /// Use the first max_examples examples of the batch; 0: all of them.
  int64_t max_examples = 0;
  /// Conv2d only: per example, this many output locations chosen without
  /// replacement by a generator seeded with `seed`; 0 (or >= T): all.
  int64_t max_locations = 0;
  uint64_t seed = 0;
};

/// A factor given by its rows: F = scale · xᵀ x, x [m, width]. A factor
/// with fewer rows than columns (the ConvNet's dense A: 16 sampled examples,
/// 785 columns) is far smaller this way, and a moving average can collect
/// such rows over several steps and fold them in one pass over the matrix
/// (fold_rows) instead of one pass per step.
struct gram_rows {
  tensor x;
  double scale = 0;
};

} // namespace syncfac
