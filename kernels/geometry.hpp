#pragma once

// Spatial geometry of convolutions and poolings, with TensorFlow's padding
// rules: SAME gives out = ceil(in / stride) and pads max((out - 1) * stride
// + k - in, 0) in total, the smaller half before (top/left); VALID gives
// out = ceil((in - k + 1) / stride) and pads nothing.

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "kernels/tensor.hpp"

namespace syncfac {

enum class padding : uint8_t { same, valid };

const char* to_string(padding x) noexcept;

/// Parses "same" / "valid" (case-insensitive).
caf::expected<padding> parse_padding(const std::string& str);

/// What a convolution and a pooling share: a k_h x k_w window moved over
/// the spatial axes of an input [batch, in_h, in_w, *] with strides and
/// padding, and what make() derives from them.
struct window2d {
  int64_t batch = 0;
  int64_t in_h = 0;
  int64_t in_w = 0;
  int64_t k_h = 0;
  int64_t k_w = 0;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  padding pad = padding::same;
  // Derived by make().
  int64_t out_h = 0;
  int64_t out_w = 0;
  int64_t pad_top = 0;
  int64_t pad_left = 0;

  /// The input [batch, in_h, in_w, channels] with `channels` channels.
  tensor_shape input_of(int64_t channels) const {
    return {batch, in_h, in_w, channels};
  }
  /// The output [batch, out_h, out_w, channels].
  tensor_shape output_of(int64_t channels) const {
    return {batch, out_h, out_w, channels};
  }
};

struct conv2d_geometry : window2d {
  int64_t in_c = 0;
  int64_t out_c = 0;

  /// Geometry of an input [N, H, W, C] convolved with a kernel
  /// [kh, kw, C, O]; an error naming both shapes when they do not fit.
  static caf::expected<conv2d_geometry>
  make(const tensor_shape& input, const tensor_shape& kernel,
       int64_t stride_h, int64_t stride_w, padding pad);

  tensor_shape input_shape() const {
    return input_of(in_c);
  }
  tensor_shape kernel_shape() const {
    return {k_h, k_w, in_c, out_c};
  }
  tensor_shape output_shape() const {
    return output_of(out_c);
  }
  /// Length of one im2col patch: kh * kw * C.
  int64_t patch_size() const {
    return k_h * k_w * in_c;
  }
  /// Output locations per example (T in the KFC paper).
  int64_t locations() const {
    return out_h * out_w;
  }
};

struct pool2d_geometry : window2d {
  int64_t channels = 0;

  /// Geometry of a k_h x k_w pooling of an input [N, H, W, C].
  static caf::expected<pool2d_geometry>
  make(const tensor_shape& input, int64_t k_h, int64_t k_w, int64_t stride_h,
       int64_t stride_w, padding pad);

  tensor_shape input_shape() const {
    return input_of(channels);
  }
  tensor_shape output_shape() const {
    return output_of(channels);
  }
};

} // namespace syncfac
