#pragma once

// The shape the CPU's cross-entropy losses share (softmax.cpp,
// sigmoid_xent.cpp): a loss that is the mean over the rows of a batch, its
// rows computed on the backend's threads, and its gradient row by row.

#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/row_loss.hpp"
#include "kernels/tensor.hpp"

namespace syncfac::cpu {

/// row_losses[r] = row_loss(r) for the rows of a [rows, cols] batch, on up
/// to `threads` threads (for_row_parts), and their mean_row_loss.
template <class RowLoss>
float mean_row_loss(int threads, int64_t rows, int64_t cols,
                    std::vector<double>& row_losses, RowLoss&& row_loss) {
  row_losses.resize(static_cast<size_t>(rows));
  for_row_parts(threads, rows, cols, [&](range part) {
    for (auto r = part.begin; r < part.end; ++r)
      row_losses[static_cast<size_t>(r)] = row_loss(r);
  });
  return mean_row_loss(row_losses);
}

/// The gradient of such a mean loss: dlogits gets probs' shape [N, K] and
/// row(r, p, d, scale) writes row r of it (p and d its rows of probs and
/// dlogits, scale = 1 / N), on up to `threads` threads.
template <class Row>
void mean_loss_gradient(int threads, const tensor& probs, tensor& dlogits,
                        Row&& row) {
  auto N = probs.dim(0);
  auto K = probs.dim(1);
  dlogits.resize(probs.shape());
  auto scale = N > 0 ? 1.0f / static_cast<float>(N) : 0.0f;
  for_row_parts(threads, N, K, [&](range rows) {
    for (auto r = rows.begin; r < rows.end; ++r)
      row(r, probs.data() + r * K, dlogits.data() + r * K, scale);
  });
}

} // namespace syncfac::cpu
