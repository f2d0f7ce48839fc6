// matmul.hpp's matmul_block through Eigen, compiled once per instruction-set
// level (kernels/cpu/isa_kernels.hpp): Eigen's GEMM picks its packets
// (8 or 16 floats) from the level's flags.
#include "kernels/cpu/isa_eigen.hpp"

#include "kernels/cpu/isa_kernels.hpp"

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

using row_matrix
  = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using const_map = Eigen::Map<const row_matrix>;
using map = Eigen::Map<row_matrix>;
using index = Eigen::Index;

template <bool TA, bool TB>
void product(const const_map& a, const const_map& b, float alpha, float beta,
             map& c, range rows, range cols) {
  auto nr = static_cast<index>(rows.end - rows.begin);
  auto nc = static_cast<index>(cols.end - cols.begin);
  auto r0 = static_cast<index>(rows.begin);
  auto c0 = static_cast<index>(cols.begin);
  auto out = c.block(r0, c0, nr, nc);
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (beta == 0.0f) {
      out.noalias() = alpha * lhs * rhs;
      return;
    }
    if (beta != 1.0f)
      out *= beta;
    out.noalias() += alpha * lhs * rhs;
  };
  auto with_rhs = [&](const auto& lhs) {
    if constexpr (TB)
      run(lhs, b.middleRows(c0, nc).transpose());
    else
      run(lhs, b.middleCols(c0, nc));
  };
  if constexpr (TA)
    with_rhs(a.middleCols(r0, nr).transpose());
  else
    with_rhs(a.middleRows(r0, nr));
}

} // namespace

void matmul_block(const matrix_operand& a, const matrix_operand& b,
                  float alpha, float beta, float* c, range rows,
                  range cols) {
  if (rows.end <= rows.begin || cols.end <= cols.begin)
    return;
  const_map ma(a.data, static_cast<index>(a.rows), static_cast<index>(a.cols));
  const_map mb(b.data, static_cast<index>(b.rows), static_cast<index>(b.cols));
  map mc(c, static_cast<index>(a.op_rows()), static_cast<index>(b.op_cols()));
  if (a.trans)
    b.trans ? product<true, true>(ma, mb, alpha, beta, mc, rows, cols)
            : product<true, false>(ma, mb, alpha, beta, mc, rows, cols);
  else
    b.trans ? product<false, true>(ma, mb, alpha, beta, mc, rows, cols)
            : product<false, false>(ma, mb, alpha, beta, mc, rows, cols);
}

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
