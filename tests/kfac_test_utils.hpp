#pragma once

// Small builders the K-FAC tests share: matrices written out by hand and
// their Eigen (double) views for explicit reference computations (vectors
// and the expected-error check: tests/helpers.hpp).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <Eigen/Dense>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"

namespace syncfac::test {

using matrix = Eigen::MatrixXd;

inline tensor mat(int64_t rows, int64_t cols, std::vector<float> xs) {
  return tensor{{rows, cols}, std::move(xs)};
}

inline tensor diagonal(std::vector<float> xs) {
  auto n = static_cast<int64_t>(xs.size());
  tensor t(tensor_shape{n, n});
  for (int64_t i = 0; i < n; ++i)
    t[i * n + i] = xs[static_cast<size_t>(i)];
  return t;
}

inline tensor identity(int64_t n, float value = 1.0f) {
  return diagonal(std::vector<float>(static_cast<size_t>(n), value));
}

inline matrix to_matrix(const tensor& t) {
  matrix m(t.dim(0), t.dim(1));
  for (int64_t i = 0; i < t.dim(0); ++i)
    for (int64_t j = 0; j < t.dim(1); ++j)
      m(i, j) = t[i * t.dim(1) + j];
  return m;
}

inline tensor to_tensor(const matrix& m) {
  tensor t(tensor_shape{m.rows(), m.cols()});
  for (int64_t i = 0; i < m.rows(); ++i)
    for (int64_t j = 0; j < m.cols(); ++j)
      t[i * m.cols() + j] = static_cast<float>(m(i, j));
  return t;
}

// The explicit Kronecker product for K-FAC's vec (the row-major
// flattening of a gradient [p, q], element (i, j) at i·q + j): the input
// factor A [p, p] is the outer (slow) index, the output factor G [q, q]
// the inner one,
//   K[(i·q + j), (k·q + l)] = A[i, k] · G[j, l],
// the paper's A ⊗ G acting on the column-major vec of the [out, in] matrix.
inline matrix kron(const matrix& A, const matrix& G) {
  auto p = A.rows();
  auto q = G.rows();
  matrix K(p * q, p * q);
  for (Eigen::Index i = 0; i < p; ++i)
    for (Eigen::Index j = 0; j < q; ++j)
      for (Eigen::Index k = 0; k < p; ++k)
        for (Eigen::Index l = 0; l < q; ++l)
          K(i * q + j, k * q + l) = A(i, k) * G(j, l);
  return K;
}

/// K⁻¹ vec(grad) for a gradient [p, q], back in its shape: the explicitly
/// preconditioned gradient for K (symmetric positive definite).
inline matrix explicit_step(const matrix& K, const matrix& grad) {
  auto p = grad.rows();
  auto q = grad.cols();
  Eigen::VectorXd v(p * q);
  for (Eigen::Index i = 0; i < p * q; ++i)
    v(i) = grad(i / q, i % q);
  Eigen::VectorXd u = K.ldlt().solve(v);
  matrix out(p, q);
  for (Eigen::Index i = 0; i < p * q; ++i)
    out(i / q, i % q) = u(i);
  return out;
}

} // namespace syncfac::test
