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

inline tensor identity(int64_t n) {
  return diagonal(std::vector<float>(static_cast<size_t>(n), 1.0f));
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

} // namespace syncfac::test
