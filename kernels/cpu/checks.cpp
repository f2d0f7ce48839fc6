#include "kernels/cpu/checks.hpp"

#include "runtime/error.hpp"

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

caf::error inconsistent(const char* op, const tensor_shape& input) {
  return make_error(ec::invalid_argument,
                    std::string{op} + ": geometry for input "
                      + to_string(input)
                      + " is not the one its make() derives");
}

} // namespace

caf::error check_geometry(const char* op, const conv2d_geometry& g) {
  auto ref = conv2d_geometry::make(g.input_shape(), g.kernel_shape(),
                                   g.stride_h, g.stride_w, g.pad);
  if (!ref)
    return std::move(ref.error());
  if (ref->out_h != g.out_h || ref->out_w != g.out_w
      || ref->pad_top != g.pad_top || ref->pad_left != g.pad_left)
    return inconsistent(op, g.input_shape());
  return caf::none;
}

caf::error check_geometry(const char* op, const pool2d_geometry& g) {
  auto ref = pool2d_geometry::make(g.input_shape(), g.k_h, g.k_w, g.stride_h,
                                   g.stride_w, g.pad);
  if (!ref)
    return std::move(ref.error());
  if (ref->out_h != g.out_h || ref->out_w != g.out_w
      || ref->pad_top != g.pad_top || ref->pad_left != g.pad_left)
    return inconsistent(op, g.input_shape());
  return caf::none;
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

} // namespace syncfac::cpu
