#pragma once

// Implicit-GEMM micro-kernels for convolution. No im2col matrix is built:
// a patch row m, patch index k = (kh, j) with j < kw * C, lives at
//   base[row_offsets[m] + kh * tap_stride + j]
// in a (padded) NHWC tile, because the kw * C values of one kernel row are
// contiguous in NHWC. Reading the patch in place saves writing and packing
// a matrix kh * kw times larger than the input, which is what made
// im2col + Eigen reach only ~55% of the FMA peak at out_c = 16.
//
// Each kernel's type is declared once here: the dispatching functions
// below, each level's copies (isa_kernels.hpp) and the level table's
// pointers are all declared through it.

#include <cstdint>

namespace syncfac::cpu {

struct patch_layout {
  const int64_t* row_offsets; // per output row: offset of its first tap
  int64_t k_h = 0;            // kernel rows
  int64_t tap_stride = 0;     // padded W * C: from one kernel row to the next
  int64_t segment = 0;        // kw * C: one kernel row's contiguous values
  // stride_w * C: from one output row (patch) to the next along one row of
  // the output image, where neighbouring patches are row_step apart.
  int64_t row_step = 0;
};

/// out[m, o] = act(bias[o] + sum_k patch(m, k) * w[k, o]) for m < rows,
/// o < out_c; w is [K, opad] and bias [opad], both zero past out_c (opad is
/// out_c rounded up to 8); act is ReLU when relu, else the identity.
using conv_forward_rows_fn = void(const float* base, const patch_layout& p,
                                  int64_t rows, const float* w, int64_t opad,
                                  const float* bias, int64_t out_c, bool relu,
                                  float* out);

/// dw[k, o] += sum_{m < rows} patch(m, k) * ds[m, o] for k < K, o < out_c,
/// where patch(m, k) = base[row_offsets[m] + tap_offsets[k]]; dw is [K, opad].
using conv_weight_grad_fn = void(const float* base, const patch_layout& p,
                                 const int64_t* tap_offsets, int64_t K,
                                 int64_t rows, const float* ds, int64_t out_c,
                                 float* dw, int64_t opad);

/// patch(m, k) += sum_o ds[m, o] * wt[o, k] for m < rows, k < K, scattered
/// into dx (the col2im of ds w^T, without the col matrix); wt is [out_c,
/// ldwt] with ldwt >= K + 16 so full-vector reads never leave it.
using conv_input_grad_fn = void(float* dx, const patch_layout& p,
                                int64_t rows, const float* ds, int64_t out_c,
                                const float* wt, int64_t ldwt);

// The selected level's kernels (conv_dispatch.cpp).
conv_forward_rows_fn conv_forward_rows;
conv_weight_grad_fn conv_weight_grad;
conv_input_grad_fn conv_input_grad;

} // namespace syncfac::cpu
