// Max-pooling over NHWC, parallel over images; each image's windows at the
// selected instruction-set level (kernels/cpu/pool_kernels.hpp).

#include <algorithm>
#include <limits>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/isa_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

// Whether lo <= x[i] < hi for all i < n; branch-free so that it vectorises
// (the validation pass costs about a quarter of the scatter otherwise).
bool within(const int32_t* x, int64_t n, int64_t lo, int64_t hi) {
  int32_t mn = std::numeric_limits<int32_t>::max();
  int32_t mx = std::numeric_limits<int32_t>::min();
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  return n == 0 || (mn >= lo && mx < hi);
}

int64_t image_size(const pool2d_geometry& g) {
  return g.in_h * g.in_w * g.channels;
}

int64_t output_image_size(const pool2d_geometry& g) {
  return g.out_h * g.out_w * g.channels;
}

} // namespace

caf::error cpu_backend::max_pool_forward(const pool2d_geometry& g,
                                         const tensor& x, tensor& y,
                                         std::vector<int32_t>& argmax) {
  if (auto err = check_pool_forward("max_pool_forward", g, x))
    return err;
  y.resize(g.output_shape());
  argmax.resize(static_cast<size_t>(y.size()));
  auto in_size = image_size(g);
  auto out_size = output_image_size(g);
  auto* pool_image = isa_table().max_pool_image;
  parallel_for(threads_, g.batch, [&](int64_t n, int) {
    pool_image(g, x.data() + n * in_size, static_cast<int32_t>(n * in_size),
               y.data() + n * out_size, argmax.data() + n * out_size);
  });
  return caf::none;
}

caf::error cpu_backend::max_pool_backward(const pool2d_geometry& g,
                                          const tensor& dy,
                                          const std::vector<int32_t>& argmax,
                                          tensor& dx) {
  const char* op = "max_pool_backward";
  if (auto err = check_pool_backward(op, g, dy,
                                     static_cast<int64_t>(argmax.size())))
    return err;
  auto in_size = image_size(g);
  auto out_size = output_image_size(g);
  // Each image's indices must stay inside that image: this keeps the
  // parallel scatter race-free, and nothing is written on an error.
  bad_pool_index_.assign(static_cast<size_t>(g.batch), -1);
  parallel_for(threads_, g.batch, [&](int64_t n, int) {
    const int32_t* arg = argmax.data() + n * out_size;
    if (within(arg, out_size, n * in_size, (n + 1) * in_size))
      return;
    for (int64_t i = 0; i < out_size; ++i)
      if (arg[i] < n * in_size || arg[i] >= (n + 1) * in_size) {
        bad_pool_index_[static_cast<size_t>(n)] = n * out_size + i;
        return;
      }
  });
  for (auto i : bad_pool_index_)
    if (i >= 0)
      return pool_index_outside(op, g, i, argmax[static_cast<size_t>(i)]);
  dx.resize(g.input_shape());
  parallel_for(threads_, g.batch, [&](int64_t n, int) {
    float* dst = dx.data();
    std::fill(dst + n * in_size, dst + (n + 1) * in_size, 0.0f);
    const int32_t* arg = argmax.data() + n * out_size;
    const float* src = dy.data() + n * out_size;
    for (int64_t i = 0; i < out_size; ++i)
      dst[arg[i]] += src[i];
  });
  return caf::none;
}

} // namespace syncfac::cpu
