#pragma once

// Shape checks shared by the CPU kernels. Every failure is
// ec::shape_mismatch (or ec::invalid_argument for labels) with a context
// that names the operation and both shapes, so a caller can see what to fix.

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"

namespace syncfac::cpu {

/// "<op>: <what> <got> does not fit <want_what> <want>" unless got == want.
caf::error expect_shape(const char* op, const char* what,
                        const tensor_shape& got, const char* want_what,
                        const tensor_shape& want);

/// A shape_mismatch for two shapes that do not fit, with a reason.
caf::error mismatch(const char* op, const char* a_what,
                    const tensor_shape& a, const char* b_what,
                    const tensor_shape& b, const std::string& reason);

/// The sizes of c = alpha op(a) op(b) + beta c, per entry for gemm_batched:
/// op(a) is [m, k] and op(b) [k, n].
struct gemm_sizes {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool shared_b = false; // gemm_batched's rank-2 b, used by every entry
  tensor_shape c_shape;  // [m, n], or [batch, m, n] for gemm_batched
};

/// gemm's operands: a and b of rank 2 with agreeing inner dimensions and,
/// when beta != 0 (c is read), c of the product's shape.
caf::expected<gemm_sizes> check_gemm(const char* op, const tensor& a,
                                     bool trans_a, const tensor& b,
                                     bool trans_b, float beta,
                                     const tensor& c);

/// gemm_batched's operands: a [batch, ., .], b [batch, ., .] or rank 2
/// (shared), otherwise as check_gemm.
caf::expected<gemm_sizes> check_gemm_batched(const char* op, const tensor& a,
                                             bool trans_a, const tensor& b,
                                             bool trans_b, float beta,
                                             const tensor& c);

/// Whether g is what conv2d_geometry::make derives from its own fields
/// (a hand-edited geometry would make the kernels read out of bounds).
caf::error check_geometry(const char* op, const conv2d_geometry& g);

caf::error check_geometry(const char* op, const pool2d_geometry& g);

/// check_geometry, then x of g's input shape.
caf::error check_geometry_input(const char* op, const conv2d_geometry& g,
                                const tensor& x);

caf::error check_geometry_input(const char* op, const pool2d_geometry& g,
                                const tensor& x);

/// Labels must number the rows of a [N, K] tensor and lie in [0, K).
caf::error check_labels(const char* op, const char* what,
                        const tensor_shape& rows, const label_vector& labels);

// -- the operands of backend operations, the same on every device ----------

/// dense_forward's x [n, in], w [in, out] and b [out].
caf::error check_dense_forward(const char* op, const tensor& x,
                               const tensor& w, const tensor& b);

/// dense_backward's x [n, in], w [in, out], y [n, out] and dy of y's shape.
caf::error check_dense_backward(const char* op, const tensor& x,
                                const tensor& w, const tensor& y,
                                const tensor& dy);

/// max_pool_forward's geometry and input, whose flat indices must fit the
/// int32 argmax.
caf::error check_pool_forward(const char* op, const pool2d_geometry& g,
                              const tensor& x);

/// max_pool_backward's geometry, dy of its output shape and one argmax
/// index per element of dy (argmax_size of them).
caf::error check_pool_backward(const char* op, const pool2d_geometry& g,
                               const tensor& dy, int64_t argmax_size);

/// ec::invalid_argument: argmax[i] = value lies outside its image.
caf::error pool_index_outside(const char* op, const pool2d_geometry& g,
                              int64_t i, int32_t value);

/// A convolution's inputs: its geometry (check_geometry), x of the
/// geometry's input shape and w of its kernel shape.
caf::error check_conv_inputs(const char* op, const conv2d_geometry& g,
                             const tensor& x, const tensor& w);

/// conv2d_forward's: check_conv_inputs and b [out channels].
caf::error check_conv_forward(const char* op, const conv2d_geometry& g,
                              const tensor& x, const tensor& w,
                              const tensor& b);

/// A convolution's backward passes': those of the forward pass, its output
/// y of the geometry's output shape and the output's gradient dy of y's.
caf::error check_conv_backward(const char* op, const conv2d_geometry& g,
                               const tensor& x, const tensor& w,
                               const tensor& y, const tensor& dy);

/// The sigmoid cross-entropy's x (`what`: logits or probs) of rank 2 and
/// targets of its shape.
caf::error check_sigmoid_pair(const char* op, const char* what,
                              const tensor& x, const tensor& targets);

} // namespace syncfac::cpu
