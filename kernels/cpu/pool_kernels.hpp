#pragma once

// Max-pooling's per-image kernel, compiled once per instruction-set level
// (kernels/cpu/isa_kernels.hpp): over NHWC, one pixel's channels a vector
// at a time, so the ConvNet's 16 channels are one AVX-512 vector instead
// of two AVX2 ones (pool.cpp, the caller, validates and splits the batch).

#include <cstdint>

#include "kernels/geometry.hpp"

namespace syncfac::cpu {

/// y = the maxima of image x's windows (clipped to the input, so padding
/// never wins), arg = each maximum's element index in the batch (x_base +
/// its index in x). The first in-window element seeds a maximum and a
/// later one replaces it only when strictly greater: ties go to the first
/// and a NaN never displaces a number.
using max_pool_image_fn = void(const pool2d_geometry& g, const float* x,
                               int32_t x_base, float* y, int32_t* arg);

} // namespace syncfac::cpu
