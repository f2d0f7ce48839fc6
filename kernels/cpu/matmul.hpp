#pragma once

// Row-major matrix products through Eigen, on parts of the output so that
// callers can share one OpenMP team among a product and what surrounds it.

#include <cstdint>

#include "kernels/cpu/parallel.hpp"

namespace syncfac::cpu {

/// A row-major [rows, cols] matrix used as op(m) = trans ? m^T : m.
struct matrix_operand {
  const float* data;
  int64_t rows;
  int64_t cols;
  bool trans;

  int64_t op_rows() const {
    return trans ? cols : rows;
  }
  int64_t op_cols() const {
    return trans ? rows : cols;
  }
};

/// c[r, q] = alpha * (op(a) op(b))[r, q] + beta * c[r, q] for r in rows and
/// q in cols; c is row-major with op(a).rows x op(b).cols elements. With
/// beta == 0, c is not read. Runs Eigen on the calling thread only when
/// called from eigen_team (or any OpenMP region).
void matmul_block(const matrix_operand& a, const matrix_operand& b,
                  float alpha, float beta, float* c, range rows, range cols);

/// The whole product on up to `threads` threads, split along the longer
/// side of c; small products stay on one thread.
void matmul(int threads, const matrix_operand& a, const matrix_operand& b,
            float alpha, float beta, float* c);

/// How many threads a product of m x n x k flops is worth.
int matmul_team(int threads, int64_t m, int64_t n, int64_t k);

} // namespace syncfac::cpu
