#pragma once

// Elementwise activation loops shared by the CPU kernels. Each works on a
// plain range so callers can apply it to a tile while it is still in cache.

#include <cstdint>

#include "kernels/backend.hpp"

namespace syncfac::cpu {

/// y[i] = act(y[i]) for i < n.
void apply_activation(activation act, float* y, int64_t n);

/// y[i] = act(x[i]) for i < n (x may equal y).
void apply_activation(activation act, const float* x, float* y, int64_t n);

/// One element of activation_grad: dy * act'(y) from the output y. The
/// loops below and the max-pool backward that applies the activation
/// (pool.cpp) both use these, so the two give the same bits.
inline float relu_grad(float y, float dy) {
  return y > 0.0f ? dy : 0.0f;
}

inline float tanh_grad(float y, float dy) {
  return dy * (1.0f - y * y);
}

inline float sigmoid_grad(float y, float dy) {
  return dy * y * (1.0f - y);
}

/// ds[i] = dy[i] * act'(y[i]) for i < n, with act' written in terms of the
/// output y (ds may equal dy).
void activation_grad(activation act, const float* y, const float* dy,
                     float* ds, int64_t n);

} // namespace syncfac::cpu
