#pragma once

// The geometry of a pooling layer's window over its input, or an error
// that names the layer: what max_pool, avg_pool and global_avg_pool
// (runtime/layers.cpp, runtime/average_pool_layers.cpp) each compute on
// every forward pass.

#include <string>

#include <caf/expected.hpp>

#include "kernels/geometry.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

inline caf::expected<pool2d_geometry>
pool_window(const std::string& layer, const tensor_shape& input, int64_t k_h,
            int64_t k_w, int64_t stride, padding pad) {
  auto g = pool2d_geometry::make(input, k_h, k_w, stride, stride, pad);
  if (!g)
    return make_error(ec::shape_mismatch, layer + ": " + render(g.error()));
  return g;
}

} // namespace syncfac
