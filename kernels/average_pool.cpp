// Average pooling on the host: the default of backend::avg_pool_forward
// and avg_pool_backward (kernels/backend.hpp), for every backend. A mean
// counts the window's positions inside the image only, as TF's avg_pool
// does with SAME padding (Keras's AveragePooling2D too), so a border
// output is not pulled towards zero by the padding.

#include <algorithm>

#include "kernels/backend.hpp"
#include "kernels/shape_checks.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

/// The window of output (oy, ox) clipped to the image: rows [y0, y1),
/// columns [x0, x1).
struct clipped_window {
  int64_t y0, y1, x0, x1;

  int64_t count() const noexcept {
    return (y1 - y0) * (x1 - x0);
  }
};

clipped_window window_at(const pool2d_geometry& g, int64_t oy, int64_t ox) {
  auto top = oy * g.stride_h - g.pad_top;
  auto left = ox * g.stride_w - g.pad_left;
  return {std::max<int64_t>(top, 0), std::min(top + g.k_h, g.in_h),
          std::max<int64_t>(left, 0), std::min(left + g.k_w, g.in_w)};
}

} // namespace

caf::error backend::avg_pool_forward(const pool2d_geometry& g,
                                     const tensor& x, tensor& y) {
  if (auto err = shape_checks::check_pool_operand(
        "avg_pool_forward", "input", x, g.input_shape(), "input"))
    return err;
  y.resize(g.output_shape());
  const auto c = g.channels;
  const float* in = x.data();
  float* out = y.data();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oy = 0; oy < g.out_h; ++oy)
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        auto w = window_at(g, oy, ox);
        float* o = out + ((n * g.out_h + oy) * g.out_w + ox) * c;
        std::fill(o, o + c, 0.0f);
        for (auto iy = w.y0; iy < w.y1; ++iy)
          for (auto ix = w.x0; ix < w.x1; ++ix) {
            const float* i = in + ((n * g.in_h + iy) * g.in_w + ix) * c;
            for (int64_t k = 0; k < c; ++k)
              o[k] += i[k];
          }
        // A window always holds one position of the image at least
        // (window_geometry's output sizes), so count() > 0.
        const float scale = 1.0f / static_cast<float>(w.count());
        for (int64_t k = 0; k < c; ++k)
          o[k] *= scale;
      }
  return caf::none;
}

caf::error backend::avg_pool_backward(const pool2d_geometry& g,
                                      const tensor& dy, tensor& dx) {
  if (auto err = shape_checks::check_pool_operand(
        "avg_pool_backward", "gradient", dy, g.output_shape(), "output"))
    return err;
  dx.resize(g.input_shape());
  dx.fill(0.0f);
  const auto c = g.channels;
  const float* in = dy.data();
  float* out = dx.data();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oy = 0; oy < g.out_h; ++oy)
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        auto w = window_at(g, oy, ox);
        const float scale = 1.0f / static_cast<float>(w.count());
        const float* d = in + ((n * g.out_h + oy) * g.out_w + ox) * c;
        for (auto iy = w.y0; iy < w.y1; ++iy)
          for (auto ix = w.x0; ix < w.x1; ++ix) {
            float* o = out + ((n * g.in_h + iy) * g.in_w + ix) * c;
            for (int64_t k = 0; k < c; ++k)
              o[k] += scale * d[k];
          }
      }
  return caf::none;
}

} // namespace syncfac
