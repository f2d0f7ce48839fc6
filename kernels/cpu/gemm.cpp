#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/error.hpp"

namespace syncfac::cpu {

namespace {

matrix_operand operand(const tensor& x, bool trans) {
  return {x.data(), x.dim(0), x.dim(1), trans};
}

const char* side(bool trans) {
  return trans ? " (transposed)" : "";
}

} // namespace

caf::error cpu_backend::gemm(const tensor& a, bool trans_a, const tensor& b,
                             bool trans_b, float alpha, float beta,
                             tensor& c) {
  const char* op = "gemm";
  if (a.rank() != 2 || b.rank() != 2)
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    "both must have rank 2");
  auto oa = operand(a, trans_a);
  auto ob = operand(b, trans_b);
  if (oa.op_cols() != ob.op_rows())
    return mismatch(op, "a", a.shape(), "b", b.shape(),
                    std::string{"inner dimensions "}
                      + std::to_string(oa.op_cols()) + side(trans_a) + " vs "
                      + std::to_string(ob.op_rows()) + side(trans_b));
  tensor_shape out{oa.op_rows(), ob.op_cols()};
  if (beta != 0.0f) {
    if (auto err = expect_shape(op, "c", c.shape(), "op(a) op(b)", out))
      return err;
  }
  // The product reads a and b while writing c: copy an input that is c.
  if (&a == &c) {
    alias_a_ = a;
    oa.data = alias_a_.data();
  }
  if (&b == &c) {
    alias_b_ = b;
    ob.data = alias_b_.data();
  }
  if (beta == 0.0f)
    c.resize(out);
  matmul(threads_, oa, ob, alpha, beta, c.data());
  return caf::none;
}

} // namespace syncfac::cpu
