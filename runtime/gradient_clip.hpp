#pragma once

// Clipping by the global norm (--clip_norm), as TF's clip_by_global_norm:
// every gradient of a step is multiplied by clip_norm / max(norm,
// clip_norm), norm the Euclidean norm of all of them together. Under
// synchronous replicas the gradients are the step's averages, spread over
// the PS shards: each shard sends its sum of squares, the chief adds them
// and sends every shard the one factor (docs/models.md, "Gradient
// clipping").

#include <cstdint>

#include "kernels/tensor.hpp"

namespace syncfac {

/// The sum of the squares of n floats, in double.
double sum_of_squares(const float* x, int64_t n);

inline double sum_of_squares(const tensor& x) {
  return sum_of_squares(x.data(), x.size());
}

/// The factor every gradient is multiplied by: clip_norm / max(norm,
/// clip_norm) with norm = sqrt(sum_of_squares), so 1 when the norm is
/// within clip_norm, and 1 when clip_norm is 0 (clipping off).
float clip_factor(double sum_of_squares, float clip_norm);

} // namespace syncfac
