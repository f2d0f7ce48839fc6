// Max-pooling over NHWC, parallel over images. Windows are clipped to the
// input, so padding never wins and every argmax is a real input element.

#include <algorithm>
#include <limits>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

struct window {
  int64_t begin;
  int64_t end;
};

window clip(int64_t out, int64_t stride, int64_t pad, int64_t k,
            int64_t in) {
  auto first = out * stride - pad;
  return {std::max<int64_t>(first, 0), std::min(first + k, in)};
}

// One output pixel, 8 channels at a time: the first in-window element
// seeds the maximum, later ones replace it only when strictly greater, so
// ties go to the first and a NaN never displaces a number.
void pool_pixel(const float* x, int32_t x_base, int64_t in_w, int64_t C,
                window hw, window ww, float* y, int32_t* arg) {
  auto first = (hw.begin * in_w + ww.begin) * C;
  int64_t c = 0;
  for (; c + simd::width <= C; c += simd::width) {
    auto best = simd::load(x + first + c);
    auto best_at = simd::iota(x_base + static_cast<int32_t>(first + c));
    for (auto ih = hw.begin; ih < hw.end; ++ih)
      for (auto iw = ww.begin; iw < ww.end; ++iw) {
        auto pos = (ih * in_w + iw) * C + c;
        auto v = simd::load(x + pos);
        auto gt = simd::greater(v, best);
        best = simd::select(gt, v, best);
        best_at = simd::select(
          gt, simd::iota(x_base + static_cast<int32_t>(pos)), best_at);
      }
    simd::store(y + c, best);
    simd::store(arg + c, best_at);
  }
  for (; c < C; ++c) {
    y[c] = x[first + c];
    arg[c] = x_base + static_cast<int32_t>(first + c);
    for (auto ih = hw.begin; ih < hw.end; ++ih)
      for (auto iw = ww.begin; iw < ww.end; ++iw) {
        auto pos = (ih * in_w + iw) * C + c;
        if (x[pos] > y[c]) {
          y[c] = x[pos];
          arg[c] = x_base + static_cast<int32_t>(pos);
        }
      }
  }
}

void pool_image(const pool2d_geometry& g, const float* x, int32_t x_base,
                float* y, int32_t* arg) {
  auto C = g.channels;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    auto hw = clip(oh, g.stride_h, g.pad_top, g.k_h, g.in_h);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      auto ww = clip(ow, g.stride_w, g.pad_left, g.k_w, g.in_w);
      auto off = (oh * g.out_w + ow) * C;
      pool_pixel(x, x_base, g.in_w, C, hw, ww, y + off, arg + off);
    }
  }
}

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
