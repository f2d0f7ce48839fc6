#include "kernels/cpu/kfac_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "kernels/cpu/checks.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

// Used as a threshold on |eigenvalue| / largest |eigenvalue|; see
// clamp_eigenvalues.
constexpr double max_negative_eigen_ratio = 1e-3;

} // namespace

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

caf::error check_square(const char* op, const char* what, const tensor& x) {
  if (x.rank() == 2 && x.dim(0) == x.dim(1))
    return caf::none;
  auto n = x.rank() >= 1 ? x.dim(0) : 0;
  return mismatch(op, what, x.shape(), "a square matrix", {n, n},
                  "factors are [n, n]");
}

caf::error check_finite(const char* op, const char* what, const tensor& x) {
  // The vectorised scan first: the shard checks a 785^2 factor per step.
  if (x.all_finite())
    return caf::none;
  for (int64_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      return make_error(ec::non_finite,
                        std::string{op} + ": " + what + " " + x.shape_string()
                          + " holds " + std::to_string(x[i]) + " at index "
                          + std::to_string(i));
  return caf::none;
}

caf::error check_scalar(const char* op, const char* what, double x,
                        bool non_negative) {
  if (!std::isfinite(x))
    return make_error(ec::non_finite, std::string{op} + ": " + what + " is "
                                        + std::to_string(x));
  if (non_negative && x < 0)
    return make_error(ec::invalid_argument, std::string{op} + ": " + what
                                              + " " + std::to_string(x)
                                              + " is negative");
  return caf::none;
}

caf::error not_positive_definite(const char* op, int64_t n, float damping,
                                 const std::string& detail) {
  return make_error(ec::numerical_failure,
                    std::string{op} + ": factor [" + std::to_string(n) + ", "
                      + std::to_string(n) + "] (dimension "
                      + std::to_string(n) + ") + damping "
                      + number_text(damping)
                      + " * I is not positive definite: " + detail);
}

caf::error check_round_off_pivots(const char* op, int64_t n, float damping,
                                  double max_diag, const double* l_diag,
                                  int64_t stride, double epsilon) {
  auto tol = static_cast<double>(n) * epsilon * max_diag;
  for (int64_t k = 0; k < n; ++k) {
    auto l = l_diag[k * stride];
    auto pivot = l * l;
    if (!(pivot > tol))
      return not_positive_definite(op, n, damping,
                                   "Cholesky pivot " + std::to_string(k)
                                     + " is " + number_text(pivot)
                                     + ", at most the round-off level "
                                     + number_text(tol));
  }
  return caf::none;
}

caf::error clamp_eigenvalues(const char* op, double* e, int64_t n) {
  double largest = 0.0;
  for (int64_t k = 0; k < n; ++k)
    largest = std::max(largest, std::abs(e[k]));
  for (int64_t k = 0; k < n; ++k) {
    if (e[k] < -max_negative_eigen_ratio * largest)
      return make_error(ec::numerical_failure,
                        std::string{op} + ": factor of dimension "
                          + std::to_string(n)
                          + " is not positive semi-definite: eigenvalue "
                          + number_text(e[k]) + " against largest magnitude "
                          + number_text(largest));
    e[k] = std::max(e[k], 0.0);
  }
  return caf::none;
}

caf::error inverse_out_of_range(const char* op, int64_t n, double value,
                                int64_t i, int64_t j) {
  return make_error(ec::numerical_failure,
                    std::string{op} + ": inverse of dimension "
                      + std::to_string(n) + " has " + number_text(value)
                      + " at [" + std::to_string(i) + ", " + std::to_string(j)
                      + "], outside float range");
}

caf::error check_sides(const char* op, const tensor& grad,
                       const char* left_what, const tensor& left,
                       const char* right_what, const tensor& right) {
  if (grad.rank() != 2)
    return mismatch(op, "grad", grad.shape(), left_what, left.shape(),
                    "grad must be a matrix [in+1, out]");
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (left.shape() != tensor_shape{p, p})
    return mismatch(op, left_what, left.shape(), "grad", grad.shape(),
                    std::string{left_what} + " must be [" + std::to_string(p)
                      + ", " + std::to_string(p) + "] (rows of grad)");
  if (right.shape() != tensor_shape{q, q})
    return mismatch(op, right_what, right.shape(), "grad", grad.shape(),
                    std::string{right_what} + " must be [" + std::to_string(q)
                      + ", " + std::to_string(q) + "] (columns of grad)");
  return caf::none;
}

caf::error check_sided_operands(const char* op, const tensor& grad,
                                const char* left_what, const tensor& left,
                                const char* right_what, const tensor& right,
                                float scale, factor_scan scan) {
  if (auto err = check_sides(op, grad, left_what, left, right_what, right))
    return err;
  if (auto err = check_scalar(op, "scale", scale, false))
    return err;
  if (auto err = check_finite(op, "grad", grad))
    return err;
  if (scan == factor_scan::scan)
    for (auto [what, x] : {std::pair{left_what, &left},
                           std::pair{right_what, &right}})
      if (auto err = check_finite(op, what, *x))
        return err;
  return caf::none;
}

caf::error check_positive_pivots(const char* op, const char* what,
                                 const tensor& L) {
  auto n = L.dim(0);
  for (int64_t i = 0; i < n; ++i)
    if (!(L[i * n + i] > 0))
      return make_error(ec::numerical_failure,
                        std::string{op} + ": " + what + " has pivot "
                          + number_text(L[i * n + i]) + " at "
                          + std::to_string(i));
  return caf::none;
}

namespace {

caf::error check_eigenvalues(const char* op, const char* what,
                             const tensor& e, const char* q_what,
                             const tensor& q) {
  auto n = q.dim(0);
  if (e.shape() == tensor_shape{n})
    return caf::none;
  return mismatch(op, what, e.shape(), q_what, q.shape(),
                  "one eigenvalue per eigenvector column");
}

// The first i, j with T·eA_i·eG_j + λ not positive, as an error.
caf::error check_divisors(const char* op, const tensor& eA, const tensor& eG,
                          float lambda, float T) {
  for (int64_t i = 0; i < eA.size(); ++i)
    for (int64_t j = 0; j < eG.size(); ++j) {
      auto d = T * eA[i] * eG[j] + lambda;
      if (!(d > 0.0f) || !std::isfinite(d))
        return make_error(ec::numerical_failure,
                          std::string{op} + ": divisor T*eA["
                            + std::to_string(i) + "]*eG[" + std::to_string(j)
                            + "] + lambda = " + number_text(T) + " * "
                            + number_text(eA[i]) + " * " + number_text(eG[j])
                            + " + " + number_text(lambda) + " = "
                            + number_text(d) + " is not positive");
    }
  return caf::none;
}

} // namespace

caf::error check_eigen_operands(const char* op, const tensor& grad,
                                const tensor& QA, const tensor& eA,
                                const tensor& QG, const tensor& eG,
                                float lambda, int64_t locations,
                                factor_scan scan) {
  if (auto err = check_sides(op, grad, "QA", QA, "QG", QG))
    return err;
  if (auto err = check_eigenvalues(op, "eA", eA, "QA", QA))
    return err;
  if (auto err = check_eigenvalues(op, "eG", eG, "QG", QG))
    return err;
  if (auto err = check_scalar(op, "lambda", lambda, true))
    return err;
  if (locations < 1)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": locations "
                        + std::to_string(locations) + " must be >= 1");
  if (auto err = check_finite(op, "grad", grad))
    return err;
  if (scan == factor_scan::scan)
    for (auto [what, x] : {std::pair{"QA", &QA}, std::pair{"eA", &eA},
                           std::pair{"QG", &QG}, std::pair{"eG", &eG}})
      if (auto err = check_finite(op, what, *x))
        return err;
  return check_divisors(op, eA, eG, lambda, static_cast<float>(locations));
}

namespace {

// The factor kernels' thread count (>= 1) and sampling counts (>= 0).
caf::error check_sampling(const char* op, const factor_sampling& s,
                          int threads) {
  if (threads < 1)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": threads must be >= 1, got "
                        + std::to_string(threads));
  if (s.max_examples < 0 || s.max_locations < 0)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": sampling counts must be >= 0, got"
                        + " max_examples " + std::to_string(s.max_examples)
                        + " and max_locations "
                        + std::to_string(s.max_locations));
  return caf::none;
}

} // namespace

caf::error check_dense_factors(const char* op, const tensor& input,
                               const tensor& ds, const factor_sampling& s,
                               int threads) {
  if (auto err = check_sampling(op, s, threads))
    return err;
  if (input.rank() != 2 || ds.rank() != 2)
    return mismatch(op, "input", input.shape(), "preactivation gradient",
                    ds.shape(), "both must have rank 2");
  if (input.dim(0) != ds.dim(0))
    return mismatch(op, "input", input.shape(), "preactivation gradient",
                    ds.shape(),
                    "examples " + std::to_string(input.dim(0)) + " vs "
                      + std::to_string(ds.dim(0)));
  if (input.dim(0) == 0)
    return mismatch(op, "input", input.shape(), "preactivation gradient",
                    ds.shape(), "the batch is empty");
  return caf::none;
}

caf::error check_conv_factors(const char* op, const conv2d_geometry& g,
                              const tensor& x, const tensor& ds,
                              const factor_sampling& s, int threads) {
  if (auto err = check_sampling(op, s, threads))
    return err;
  if (auto err = check_geometry_input(op, g, x))
    return err;
  if (ds.shape() != g.output_shape())
    return mismatch(op, "preactivation gradient", ds.shape(), "input",
                    x.shape(),
                    "the geometry's output is "
                      + to_string(g.output_shape()));
  if (g.batch == 0)
    return mismatch(op, "input", x.shape(), "preactivation gradient",
                    ds.shape(), "the batch is empty");
  return caf::none;
}

} // namespace syncfac::cpu
