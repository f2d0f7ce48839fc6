#include "kernels/cpu/checks.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "runtime/base/error.hpp"

namespace syncfac::cpu {

caf::error expect_shape(const char* op, const char* what,
                        const tensor_shape& got, const char* want_what,
                        const tensor_shape& want) {
  if (got == want)
    return caf::none;
  return make_error(ec::shape_mismatch, std::string{op} + ": " + what + " "
                                          + to_string(got) + " does not fit "
                                          + want_what + " "
                                          + to_string(want));
}

caf::error mismatch(const char* op, const char* a_what,
                    const tensor_shape& a, const char* b_what,
                    const tensor_shape& b, const std::string& reason) {
  return make_error(ec::shape_mismatch,
                    std::string{op} + ": " + a_what + " " + to_string(a)
                      + " does not fit " + b_what + " " + to_string(b) + ": "
                      + reason);
}

namespace {

const char* transposed(bool trans) {
  return trans ? " (transposed)" : "";
}

// The per-entry sizes of op(a) op(b) from the last two dimensions of a and
// b (the caller has checked their ranks); c_shape is left to the caller.
caf::expected<gemm_sizes> product_sizes(const char* op, const tensor& a,
                                        bool trans_a, const tensor& b,
                                        bool trans_b) {
  auto a_rows = a.dim(a.rank() - 2);
  auto a_cols = a.dim(a.rank() - 1);
  auto b_rows = b.dim(b.rank() - 2);
  auto b_cols = b.dim(b.rank() - 1);
  gemm_sizes result;
  result.m = trans_a ? a_cols : a_rows;
  result.k = trans_a ? a_rows : a_cols;
  result.n = trans_b ? b_rows : b_cols;
  auto b_inner = trans_b ? b_cols : b_rows;
  if (result.k != b_inner)
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "inner dimensions " + std::to_string(result.k)
                      + transposed(trans_a) + " vs "
                      + std::to_string(b_inner) + transposed(trans_b));
  return result;
}

} // namespace

caf::expected<gemm_sizes> check_gemm(const char* op, const tensor& a,
                                     bool trans_a, const tensor& b,
                                     bool trans_b, float beta,
                                     const tensor& c) {
  if (a.rank() != 2 || b.rank() != 2)
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "both must have rank 2");
  auto sizes = product_sizes(op, a, trans_a, b, trans_b);
  if (!sizes)
    return sizes;
  sizes->c_shape = {sizes->m, sizes->n};
  if (beta != 0.0f)
    if (auto err = expect_shape(op, "c", c.shape(), "op(a) op(b)",
                                sizes->c_shape))
      return err;
  return sizes;
}

caf::expected<gemm_sizes> check_gemm_batched(const char* op, const tensor& a,
                                             bool trans_a, const tensor& b,
                                             bool trans_b, float beta,
                                             const tensor& c) {
  if (a.rank() != 3)
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "a must have rank 3 ([batch, rows, cols])");
  if (b.rank() != 3 && b.rank() != 2)
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "b must have rank 3 ([batch, rows, cols]) or 2 (one "
                    "matrix for every entry)");
  if (b.rank() == 3 && b.dim(0) != a.dim(0))
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "batch sizes " + std::to_string(a.dim(0)) + " vs "
                      + std::to_string(b.dim(0)));
  auto sizes = product_sizes(op, a, trans_a, b, trans_b);
  if (!sizes)
    return sizes;
  sizes->batch = a.dim(0);
  sizes->shared_b = b.rank() == 2;
  sizes->c_shape = {sizes->batch, sizes->m, sizes->n};
  if (beta != 0.0f)
    if (auto err = expect_shape(op, "c", c.shape(), "op(a) op(b)",
                                sizes->c_shape))
      return err;
  return sizes;
}

namespace {

caf::error inconsistent(const char* op, const tensor_shape& input) {
  return make_error(ec::invalid_argument,
                    std::string{op} + ": geometry for input "
                      + to_string(input)
                      + " is not the one its make() derives");
}

// g against `ref`, what make() derives from g's own fields.
template <class Geometry>
caf::error check_derived(const char* op, const Geometry& g,
                         caf::expected<Geometry> ref) {
  if (!ref)
    return std::move(ref.error());
  if (ref->out_h != g.out_h || ref->out_w != g.out_w
      || ref->pad_top != g.pad_top || ref->pad_left != g.pad_left)
    return inconsistent(op, g.input_shape());
  return caf::none;
}

} // namespace

caf::error check_geometry(const char* op, const conv2d_geometry& g) {
  return check_derived(op, g,
                       conv2d_geometry::make(g.input_shape(), g.kernel_shape(),
                                             g.stride_h, g.stride_w, g.pad));
}

caf::error check_geometry(const char* op, const pool2d_geometry& g) {
  return check_derived(op, g,
                       pool2d_geometry::make(g.input_shape(), g.k_h, g.k_w,
                                             g.stride_h, g.stride_w, g.pad));
}

namespace {

template <class Geometry>
caf::error check_input_of(const char* op, const Geometry& g,
                          const tensor& x) {
  if (auto err = check_geometry(op, g))
    return err;
  return expect_shape(op, "input", x.shape(), "geometry input",
                      g.input_shape());
}

} // namespace

caf::error check_geometry_input(const char* op, const conv2d_geometry& g,
                                const tensor& x) {
  return check_input_of(op, g, x);
}

caf::error check_geometry_input(const char* op, const pool2d_geometry& g,
                                const tensor& x) {
  return check_input_of(op, g, x);
}

caf::error check_labels(const char* op, const char* what,
                        const tensor_shape& rows, const label_vector& labels) {
  if (rows.size() != 2 || rows[1] < 1)
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": " + what + " " + to_string(rows)
                        + " must be [N, K] with K >= 1 (labels ["
                        + std::to_string(labels.size()) + "])");
  if (static_cast<int64_t>(labels.size()) != rows[0])
    return mismatch(op, what, rows, "labels",
                    {static_cast<int64_t>(labels.size())},
                    "one label per row");
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= rows[1])
      return make_error(ec::invalid_argument,
                        std::string{op} + ": label at index "
                          + std::to_string(i) + " is "
                          + std::to_string(labels[i]) + ", outside [0, "
                          + std::to_string(rows[1]) + ")");
  return caf::none;
}

namespace {

caf::error check_dense(const char* op, const tensor& x, const tensor& w) {
  if (x.rank() != 2 || w.rank() != 2)
    return mismatch(op, "input", x.shape(), "weight", w.shape(),
                    "both must have rank 2");
  if (x.dim(1) != w.dim(0))
    return mismatch(op, "input", x.shape(), "weight", w.shape(),
                    "features " + std::to_string(x.dim(1)) + " vs "
                      + std::to_string(w.dim(0)));
  return caf::none;
}

} // namespace

caf::error check_dense_forward(const char* op, const tensor& x,
                               const tensor& w, const tensor& b) {
  if (auto err = check_dense(op, x, w))
    return err;
  return expect_shape(op, "bias", b.shape(), "weight columns", {w.dim(1)});
}

caf::error check_conv_inputs(const char* op, const conv2d_geometry& g,
                             const tensor& x, const tensor& w) {
  if (auto err = check_geometry_input(op, g, x))
    return err;
  if (w.shape() != g.kernel_shape())
    return mismatch(op, "input", x.shape(), "kernel", w.shape(),
                    "the geometry expects kernel "
                      + to_string(g.kernel_shape()));
  return caf::none;
}

caf::error check_conv_forward(const char* op, const conv2d_geometry& g,
                              const tensor& x, const tensor& w,
                              const tensor& b) {
  if (auto err = check_conv_inputs(op, g, x, w))
    return err;
  return expect_shape(op, "bias", b.shape(), "out channels", {g.out_c});
}

caf::error check_conv_backward(const char* op, const conv2d_geometry& g,
                               const tensor& x, const tensor& w,
                               const tensor& y, const tensor& dy) {
  if (auto err = check_conv_inputs(op, g, x, w))
    return err;
  if (auto err = expect_shape(op, "output", y.shape(), "geometry output",
                              g.output_shape()))
    return err;
  return expect_shape(op, "output gradient", dy.shape(), "output",
                      y.shape());
}

caf::error check_dense_backward(const char* op, const tensor& x,
                                const tensor& w, const tensor& y,
                                const tensor& dy) {
  if (auto err = check_dense(op, x, w))
    return err;
  if (auto err = expect_shape(op, "output", y.shape(), "x w",
                              {x.dim(0), w.dim(1)}))
    return err;
  return expect_shape(op, "output gradient", dy.shape(), "output", y.shape());
}

caf::error check_pool_forward(const char* op, const pool2d_geometry& g,
                              const tensor& x) {
  if (auto err = check_geometry_input(op, g, x))
    return err;
  if (x.size() > std::numeric_limits<int32_t>::max())
    return make_error(ec::invalid_argument,
                      std::string{op} + ": input " + x.shape_string()
                        + " has too many elements for int32 argmax indices");
  return caf::none;
}

caf::error check_pool_backward(const char* op, const pool2d_geometry& g,
                               const tensor& dy, int64_t argmax_size) {
  if (auto err = check_geometry(op, g))
    return err;
  if (auto err = expect_shape(op, "output gradient", dy.shape(),
                              "geometry output", g.output_shape()))
    return err;
  if (argmax_size != dy.size())
    return mismatch(op, "output gradient", dy.shape(), "argmax",
                    {argmax_size}, "one index per element");
  return caf::none;
}

caf::error pool_index_outside(const char* op, const pool2d_geometry& g,
                              int64_t i, int32_t value) {
  return make_error(ec::invalid_argument,
                    std::string{op} + ": argmax[" + std::to_string(i)
                      + "] = " + std::to_string(value)
                      + " lies outside its image of input "
                      + to_string(g.input_shape()));
}

caf::error check_sigmoid_pair(const char* op, const char* what,
                              const tensor& x, const tensor& targets) {
  if (x.rank() != 2)
    return mismatch(op, what, x.shape(), "targets", targets.shape(),
                    std::string{what} + " must be rank 2 [N, D]");
  return expect_shape(op, "targets", targets.shape(), what, x.shape());
}

} // namespace syncfac::cpu
