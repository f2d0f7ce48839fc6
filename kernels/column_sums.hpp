#pragma once

// Per-column sums over a chunk of rows, for the host defaults of batch
// norm (kernels/batch_norm.cpp): N sums of elementwise terms at once
// (a channel's sum and its sum of squares, or ds and ds x̂).
//
// Why not a plain loop over rows and then columns into double: the
// accumulators then live in memory, and every row loads, converts and
// stores them again; that chain, not the reading of x, bounded batch
// norm's sums. Here the rows go in blocks of at most block_floats
// floats; within a block each group of `lanes` columns is summed in
// float accumulators the compiler keeps in registers, two rows at a time
// for independent chains, and the block's float partials are then added
// into the double sums. A float partial holds at most a block's rows
// (64 for 16 channels), so the sums stay as close as the double loop's
// for any use here, and their order depends on the rows and columns
// only: the same bits on any number of threads.

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace syncfac::column_sums {

/// Columns summed together: one AVX2 register of floats.
inline constexpr int64_t lanes = 8;

/// A group of `lanes` floats, one per column (GCC's and Clang's vector
/// extension: one register where the build targets AVX2, two halves
/// where it does not).
using group = float __attribute__((vector_size(lanes * sizeof(float))));

/// Floats of one input per block of rows: a block of x and of what is
/// read beside it stays in L1 while its column groups are summed.
inline constexpr int64_t block_floats = 1024;

/// The `width` floats at p (at most `lanes`), the rest zero.
inline group load(const float* p, int64_t width) {
  group g = {};
  if (width == lanes)
    std::memcpy(&g, p, sizeof g);
  else
    for (int64_t j = 0; j < width; ++j)
      g[j] = p[j];
  return g;
}

/// Adds into out[n][k], for every row r in [first, last) and column k in
/// [0, c), the n-th term of (r, k): terms(r, k0, width, v) writes into
/// v[n] the terms of row r's columns k0 .. k0 + width - 1 (width <
/// `lanes` only for the last group; the lanes past it are not added).
template <int N, class Terms>
void add(int64_t first, int64_t last, int64_t c, double* const (&out)[N],
         const Terms& terms) {
  const int64_t block_rows
    = std::max<int64_t>(2, block_floats / std::max<int64_t>(c, 1));
  for (int64_t r0 = first; r0 < last; r0 += block_rows) {
    const int64_t r1 = std::min(last, r0 + block_rows);
    for (int64_t k0 = 0; k0 < c; k0 += lanes) {
      const int64_t width = std::min(lanes, c - k0);
      group even[N] = {};
      group odd[N] = {};
      int64_t r = r0;
      for (; r + 1 < r1; r += 2) {
        group v[N];
        group w[N];
        terms(r, k0, width, v);
        terms(r + 1, k0, width, w);
        for (int n = 0; n < N; ++n) {
          even[n] += v[n];
          odd[n] += w[n];
        }
      }
      if (r < r1) {
        group v[N];
        terms(r, k0, width, v);
        for (int n = 0; n < N; ++n)
          even[n] += v[n];
      }
      for (int n = 0; n < N; ++n)
        for (int64_t j = 0; j < width; ++j)
          out[n][k0 + j] += static_cast<double>(even[n][j]) + odd[n][j];
    }
  }
}

} // namespace syncfac::column_sums
