#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/error.hpp"

namespace syncfac::cpu {

namespace {

// The last two dimensions of x as a row-major matrix at `data`, used as
// op(matrix).
matrix_operand operand(const float* data, const tensor& x, bool trans) {
  return {data, x.dim(x.rank() - 2), x.dim(x.rank() - 1), trans};
}

// The product reads a and b while writing c: an input that is c is read
// from a copy taken before c changes.
const float* unaliased(const tensor& input, const tensor& c, tensor& copy) {
  if (&input != &c)
    return input.data();
  copy = input;
  return copy.data();
}

} // namespace

caf::error cpu_backend::gemm(const tensor& a, bool trans_a, const tensor& b,
                             bool trans_b, float alpha, float beta,
                             tensor& c) {
  auto sizes = check_gemm("gemm", a, trans_a, b, trans_b, beta, c);
  if (!sizes)
    return std::move(sizes.error());
  auto oa = operand(unaliased(a, c, alias_a_), a, trans_a);
  auto ob = operand(unaliased(b, c, alias_b_), b, trans_b);
  if (beta == 0.0f)
    c.resize(sizes->c_shape);
  matmul(threads_, oa, ob, alpha, beta, c.data());
  return caf::none;
}

} // namespace syncfac::cpu
