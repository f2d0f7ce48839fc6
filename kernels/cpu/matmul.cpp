#include "kernels/cpu/matmul.hpp"

#include <algorithm>

#include "kernels/cpu/isa.hpp"

namespace syncfac::cpu {

namespace {

// Below this many multiply-adds a second thread costs more than it saves.
constexpr int64_t min_work_per_thread = int64_t{1} << 19;

} // namespace

// The product itself is the selected level's (kernels/cpu/isa.hpp).
void matmul_block(const matrix_operand& a, const matrix_operand& b,
                  float alpha, float beta, float* c, range rows,
                  range cols) {
  isa_table().matmul_block(a, b, alpha, beta, c, rows, cols);
}

int matmul_team(int threads, int64_t m, int64_t n, int64_t k) {
  auto work = m * n * std::max<int64_t>(k, 1);
  auto useful = std::max<int64_t>(1, work / min_work_per_thread);
  return static_cast<int>(std::min<int64_t>(threads, useful));
}

void matmul(int threads, const matrix_operand& a, const matrix_operand& b,
            float alpha, float beta, float* c) {
  auto m = a.op_rows();
  auto n = b.op_cols();
  auto team = matmul_team(threads, m, n, a.op_cols());
  eigen_team(team, [&](int t, int size) {
    if (m >= n)
      matmul_block(a, b, alpha, beta, c, split(m, size, t), {0, n});
    else
      matmul_block(a, b, alpha, beta, c, {0, m}, split(n, size, t));
  });
}

} // namespace syncfac::cpu
