#include "kernels/geometry.hpp"

#include <algorithm>
#include <cctype>

#include "runtime/base/error.hpp"

namespace syncfac {

const char* to_string(padding x) noexcept {
  switch (x) {
    case padding::same: return "same";
    case padding::valid: return "valid";
  }
  return "unknown_padding";
}

caf::expected<padding> parse_padding(const std::string& str) {
  std::string lower = str;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (auto x : {padding::same, padding::valid})
    if (lower == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown padding '" + str + "' (expected same or valid)");
}

namespace {

struct axis {
  int64_t out = 0;
  int64_t pad_before = 0;
};

// One spatial axis under TensorFlow's rules; the caller has checked that
// in, k and stride are positive and, for VALID, that k <= in.
axis make_axis(int64_t in, int64_t k, int64_t stride, padding pad) {
  axis result;
  if (pad == padding::same) {
    result.out = (in + stride - 1) / stride;
    auto total = std::max<int64_t>((result.out - 1) * stride + k - in, 0);
    result.pad_before = total / 2;
  } else {
    result.out = (in - k + stride) / stride;
  }
  return result;
}

template <class Shapes>
caf::error check_window(const char* what, const Shapes& shapes, int64_t in_h,
                        int64_t in_w, int64_t k_h, int64_t k_w,
                        int64_t stride_h, int64_t stride_w, padding pad) {
  if (stride_h < 1 || stride_w < 1)
    return make_error(ec::invalid_argument,
                      std::string{what} + ": strides must be >= 1, got "
                        + std::to_string(stride_h) + " x "
                        + std::to_string(stride_w));
  if (in_h < 1 || in_w < 1 || k_h < 1 || k_w < 1)
    return make_error(ec::shape_mismatch,
                      std::string{what} + ": " + shapes()
                        + ": spatial sizes must be positive");
  if (pad == padding::valid && (k_h > in_h || k_w > in_w))
    return make_error(ec::shape_mismatch,
                      std::string{what} + ": " + shapes()
                        + ": VALID window larger than the input");
  return caf::none;
}

// The fields a convolution and a pooling share (the window over an input
// [N, H, W, *]), checked (check_window), set and derived alike; the caller
// sets the channels.
template <class Geometry, class Shapes>
caf::expected<Geometry>
window_geometry(const char* what, const Shapes& shapes,
                const tensor_shape& input, int64_t k_h, int64_t k_w,
                int64_t stride_h, int64_t stride_w, padding pad) {
  if (auto err = check_window(what, shapes, input[1], input[2], k_h, k_w,
                              stride_h, stride_w, pad))
    return err;
  Geometry g;
  g.batch = input[0];
  g.in_h = input[1];
  g.in_w = input[2];
  g.k_h = k_h;
  g.k_w = k_w;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.pad = pad;
  auto h = make_axis(g.in_h, k_h, stride_h, pad);
  g.out_h = h.out;
  g.pad_top = h.pad_before;
  auto w = make_axis(g.in_w, k_w, stride_w, pad);
  g.out_w = w.out;
  g.pad_left = w.pad_before;
  return g;
}

} // namespace

caf::expected<conv2d_geometry>
conv2d_geometry::make(const tensor_shape& input, const tensor_shape& kernel,
                      int64_t stride_h, int64_t stride_w, padding pad) {
  // Built only on failure: make() runs on every conv call.
  auto shapes = [&] {
    return "input " + to_string(input) + " does not fit kernel "
           + to_string(kernel);
  };
  if (input.size() != 4 || kernel.size() != 4)
    return make_error(ec::shape_mismatch,
                      "conv2d: " + shapes() + ": both must have rank 4");
  if (input[3] != kernel[2])
    return make_error(ec::shape_mismatch,
                      "conv2d: " + shapes() + ": channels "
                        + std::to_string(input[3]) + " vs "
                        + std::to_string(kernel[2]));
  if (input[0] < 0 || input[3] < 1 || kernel[3] < 1)
    return make_error(ec::shape_mismatch,
                      "conv2d: " + shapes()
                        + ": batch must be >= 0 and channels >= 1");
  auto g = window_geometry<conv2d_geometry>("conv2d", shapes, input,
                                            kernel[0], kernel[1], stride_h,
                                            stride_w, pad);
  if (g) {
    g->in_c = input[3];
    g->out_c = kernel[3];
  }
  return g;
}

caf::expected<pool2d_geometry>
pool2d_geometry::make(const tensor_shape& input, int64_t k_h, int64_t k_w,
                      int64_t stride_h, int64_t stride_w, padding pad) {
  auto shapes = [&] {
    return "input " + to_string(input) + " does not fit window "
           + to_string(tensor_shape{k_h, k_w});
  };
  if (input.size() != 4)
    return make_error(ec::shape_mismatch,
                      "pooling: " + shapes() + ": input must have rank 4");
  if (input[0] < 0 || input[3] < 1)
    return make_error(ec::shape_mismatch,
                      "pooling: " + shapes()
                        + ": batch must be >= 0 and channels >= 1");
  auto g = window_geometry<pool2d_geometry>("pooling", shapes, input, k_h,
                                            k_w, stride_h, stride_w, pad);
  if (g)
    g->channels = input[3];
  return g;
}

} // namespace syncfac
