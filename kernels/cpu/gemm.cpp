#include <algorithm>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

// The last two dimensions of x as a row-major matrix at `data`, used as
// op(matrix).
matrix_operand operand(const float* data, const tensor& x, bool trans) {
  return {data, x.dim(x.rank() - 2), x.dim(x.rank() - 1), trans};
}

// The products read a and b while writing c: an input that is c is read
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

caf::error cpu_backend::gemm_batched(const tensor& a, bool trans_a,
                                     const tensor& b, bool trans_b,
                                     float alpha, float beta, tensor& c) {
  auto sizes = check_gemm_batched("gemm_batched", a, trans_a, b, trans_b,
                                  beta, c);
  if (!sizes)
    return std::move(sizes.error());
  auto batch = sizes->batch;
  auto m = sizes->m;
  auto n = sizes->n;
  auto k = sizes->k;
  // The first entries' operands, taken before c (which may be a or b)
  // is resized.
  auto first_a = operand(unaliased(a, c, alias_a_), a, trans_a);
  auto first_b = operand(unaliased(b, c, alias_b_), b, trans_b);
  if (beta == 0.0f)
    c.resize(sizes->c_shape);
  if (batch == 0 || m == 0 || n == 0)
    return caf::none; // c is empty
  auto b_stride = sizes->shared_b ? 0 : k * n;
  auto entry_a = [&](int64_t i) {
    auto result = first_a;
    result.data += i * m * k;
    return result;
  };
  auto entry_b = [&](int64_t i) {
    auto result = first_b;
    result.data += i * b_stride;
    return result;
  };
  auto entry_c = [&](int64_t i) { return c.data() + i * m * n; };
  auto team = matmul_team(threads_, batch * m, n, k);
  if (batch < team) {
    // Few entries, each worth several threads: one after the other, each
    // split by matmul along its longer side.
    for (int64_t i = 0; i < batch; ++i)
      matmul(threads_, entry_a(i), entry_b(i), alpha, beta, entry_c(i));
    return caf::none;
  }
  // Many (or small) entries: the batch's batch * m output rows split evenly
  // over the team, so that no thread waits for one holding an extra entry.
  eigen_team(team, [&](int t, int size) {
    auto part = split(batch * m, size, t);
    for (auto i = part.begin / m; i * m < part.end; ++i) {
      auto first = std::max(part.begin - i * m, int64_t{0});
      auto last = std::min(part.end - i * m, m);
      matmul_block(entry_a(i), entry_b(i), alpha, beta, entry_c(i),
                   {first, last}, {0, n});
    }
  });
  return caf::none;
}

} // namespace syncfac::cpu
