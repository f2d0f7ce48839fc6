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

/// ds[i] = dy[i] * act'(y[i]) for i < n, with act' written in terms of the
/// output y (ds may equal dy).
void activation_grad(activation act, const float* y, const float* dy,
                     float* ds, int64_t n);

} // namespace syncfac::cpu
