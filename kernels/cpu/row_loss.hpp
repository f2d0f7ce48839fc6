#pragma once

// The mean of a loss over the rows of a batch (softmax and sigmoid
// cross-entropy, on the CPU and the CUDA device): per-row losses summed in
// row order, so the loss is the same for any thread count and device. Host
// code without OpenMP (the CUDA files include it); the CPU's parallel form
// is in kernels/cpu/mean_loss.hpp.

#include <numeric>
#include <vector>

namespace syncfac::cpu {

/// The mean of row_losses in row order; 0 without rows.
inline float mean_row_loss(const std::vector<double>& row_losses) {
  auto total = std::accumulate(row_losses.begin(), row_losses.end(), 0.0);
  auto rows = row_losses.size();
  return rows > 0 ? static_cast<float>(total / static_cast<double>(rows))
                  : 0.0f;
}

} // namespace syncfac::cpu
