// Max-pooling over NHWC, parallel over images; each image's windows at the
// selected instruction-set level (kernels/cpu/pool_kernels.hpp). The
// backward scatters per image, in cache; its activated form writes the
// pre-activation gradient of the layer before the pool directly
// (kernels/backend.hpp, docs/kernels.md).

#include <algorithm>
#include <limits>

#include "kernels/cpu/activation.hpp"
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

// Per thread, n zeros (kept zero between uses).
void reserve_sums(std::vector<std::vector<float>>& sums, int threads,
                  int64_t n) {
  sums.resize(static_cast<size_t>(threads));
  for (auto& s : sums)
    if (static_cast<int64_t>(s.size()) != n)
      s.assign(static_cast<size_t>(n), 0.0f);
}

// One image of max_pool_backward_activated for an activation whose
// gradient multiplies: a position that several overlapping windows chose
// gets act'(y) times the sum of their gradients, summed in output order as
// max_pool_backward sums them, not the sum of the products (other bits).
// sums holds the image's zeros (base: the image's first index) and is left
// zero; ds the image's zeros.
template <class Grad>
void scatter_then_apply(const int32_t* arg, const float* dy, const float* y,
                        int64_t out_size, int64_t base, float* sums,
                        float* ds, Grad grad) {
  for (int64_t i = 0; i < out_size; ++i)
    sums[arg[i] - base] += dy[i];
  // Idempotent: a position won several times gets the same value each time.
  for (int64_t i = 0; i < out_size; ++i)
    ds[arg[i]] = grad(y[i], sums[arg[i] - base]);
  for (int64_t i = 0; i < out_size; ++i)
    sums[arg[i] - base] = 0.0f;
}

int64_t image_size(const pool2d_geometry& g) {
  return g.in_h * g.in_w * g.channels;
}

int64_t output_image_size(const pool2d_geometry& g) {
  return g.out_h * g.out_w * g.channels;
}

// Image n of x pooled into y and argmax (whole batches, sized), at the
// selected instruction-set level.
void pool_one_image(const pool2d_geometry& g, const tensor& x, int64_t n,
                    tensor& y, std::vector<int32_t>& argmax) {
  auto in_size = image_size(g);
  auto out_size = output_image_size(g);
  isa_table().max_pool_image(g, x.data() + n * in_size,
                             static_cast<int32_t>(n * in_size),
                             y.data() + n * out_size,
                             argmax.data() + n * out_size);
}

} // namespace

caf::error cpu_backend::max_pool_forward(const pool2d_geometry& g,
                                         const tensor& x, tensor& y,
                                         std::vector<int32_t>& argmax) {
  if (auto err = check_pool_forward("max_pool_forward", g, x))
    return err;
  y.resize(g.output_shape());
  argmax.resize(static_cast<size_t>(y.size()));
  parallel_for(threads_, g.batch, [&](int64_t n, int) {
    pool_one_image(g, x, n, y, argmax);
  });
  return caf::none;
}

caf::error cpu_backend::conv2d_max_pool_forward(
  const conv2d_geometry& conv, const tensor& x, const tensor& w,
  const tensor& b, activation act, const pool2d_geometry& pool,
  tensor& conv_y, tensor& pooled, std::vector<int32_t>& argmax) {
  const char* op = "conv2d_max_pool_forward";
  if (auto err = check_conv_forward(op, conv, x, w, b))
    return err;
  if (auto err = expect_shape(op, "pool input", pool.input_shape(),
                              "conv output", conv.output_shape()))
    return err;
  conv_y.resize(conv.output_shape());
  if (auto err = check_pool_forward(op, pool, conv_y))
    return err;
  pooled.resize(pool.output_shape());
  argmax.resize(static_cast<size_t>(pooled.size()));
  // Each tile's images pooled on the conv's thread right after the conv
  // wrote them: they are read from cache, not from memory (the ConvNet's
  // first conv writes 6 MB a batch).
  conv2d_forward_tiles(conv, x, w, b, act, conv_y,
                       [&](int64_t first, int64_t count) {
                         for (auto n = first; n < first + count; ++n)
                           pool_one_image(pool, conv_y, n, pooled, argmax);
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
  if (auto err = check_images(op, g, argmax))
    return err;
  auto in_size = image_size(g);
  auto out_size = output_image_size(g);
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

caf::error cpu_backend::check_images(const char* op,
                                     const pool2d_geometry& g,
                                     const std::vector<int32_t>& argmax) {
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
  return caf::none;
}

caf::error cpu_backend::max_pool_backward_activated(
  const pool2d_geometry& g, const tensor& dy,
  const std::vector<int32_t>& argmax, const tensor& pooled_y, activation act,
  tensor& ds) {
  const char* op = "max_pool_backward_activated";
  if (auto err = check_pool_backward(op, g, dy,
                                     static_cast<int64_t>(argmax.size())))
    return err;
  if (auto err = expect_shape(op, "pooled output", pooled_y.shape(),
                              "geometry output", g.output_shape()))
    return err;
  if (auto err = check_images(op, g, argmax))
    return err;
  auto in_size = image_size(g);
  auto out_size = output_image_size(g);
  ds.resize(g.input_shape());
  if (act == activation::tanh || act == activation::sigmoid)
    reserve_sums(pool_sums_, threads_, in_size);
  parallel_for(threads_, g.batch, [&](int64_t n, int thread) {
    float* dst = ds.data();
    std::fill(dst + n * in_size, dst + (n + 1) * in_size, 0.0f);
    const int32_t* arg = argmax.data() + n * out_size;
    const float* src = dy.data() + n * out_size;
    const float* y = pooled_y.data() + n * out_size;
    switch (act) {
      case activation::identity:
        for (int64_t i = 0; i < out_size; ++i)
          dst[arg[i]] += src[i];
        return;
      case activation::relu:
        // Every output a position won holds that position's y, so adding
        // the masked gradients gives the mask of the sum: the same bits.
        for (int64_t i = 0; i < out_size; ++i)
          dst[arg[i]] += relu_grad(y[i], src[i]);
        return;
      case activation::tanh:
        scatter_then_apply(arg, src, y, out_size, n * in_size,
                           pool_sums_[static_cast<size_t>(thread)].data(),
                           dst, tanh_grad);
        return;
      case activation::sigmoid:
        scatter_then_apply(arg, src, y, out_size, n * in_size,
                           pool_sums_[static_cast<size_t>(thread)].data(),
                           dst, sigmoid_grad);
        return;
    }
  });
  return caf::none;
}

} // namespace syncfac::cpu
