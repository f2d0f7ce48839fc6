#pragma once

// Inputs and comparisons for the K-FAC inversion tests of the CUDA suites:
// factors like K-FAC's (rank-deficient Gram matrices, ill-conditioned SPD
// matrices), a factor set mixing them with factors that need more damping
// or cannot be inverted at all, and the comparison of invert_factors on two
// devices (a GPU inverter against the CPU one): the same layers, dampings
// and problems, and inverses that agree up to float round-off. Include
// after cuda_test_utils.hpp.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "messages/kfac_messages.hpp"
#include "runtime/kfac/layer_inversion.hpp"
#include "tests/kernels/cuda_test_utils.hpp"
#include "tests/kfac_test_utils.hpp"

namespace syncfac::test {

/// A factor like K-FAC's: (1/m) Xᵀ X of m rows, rank-deficient when
/// m < n, with entries of order `scale`.
inline tensor gram(int64_t n, int64_t m, std::mt19937& rng,
                   float scale = 1.0f) {
  auto x = random_tensor({m, n}, rng);
  tensor result({n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double sum = 0.0;
      for (int64_t r = 0; r < m; ++r)
        sum += double{x[r * n + i]} * double{x[r * n + j]};
      auto v = static_cast<float>(scale * sum / static_cast<double>(m));
      result[i * n + j] = v;
      result[j * n + i] = v;
    }
  return result;
}

/// An ill-conditioned SPD factor: Q diag(λ) Qᵀ with λ log-spaced from
/// 1 down to `smallest` and Q a product of random Householder reflections.
inline tensor ill_conditioned(int64_t n, double smallest, std::mt19937& rng) {
  std::vector<double> q(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    q[static_cast<size_t>(i * n + i)] = 1.0;
  std::normal_distribution<double> dist;
  for (int h = 0; h < 3; ++h) {
    std::vector<double> v(static_cast<size_t>(n));
    double norm = 0.0;
    for (auto& e : v) {
      e = dist(rng);
      norm += e * e;
    }
    norm = std::sqrt(norm);
    for (auto& e : v)
      e /= norm;
    // q ← q (I - 2 v vᵀ)
    for (int64_t i = 0; i < n; ++i) {
      double dot = 0.0;
      for (int64_t j = 0; j < n; ++j)
        dot += q[static_cast<size_t>(i * n + j)] * v[static_cast<size_t>(j)];
      for (int64_t j = 0; j < n; ++j)
        q[static_cast<size_t>(i * n + j)] -= 2.0 * dot
                                              * v[static_cast<size_t>(j)];
    }
  }
  tensor result({n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        auto lambda = std::pow(smallest, static_cast<double>(k)
                                           / static_cast<double>(n - 1));
        sum += q[static_cast<size_t>(i * n + k)] * lambda
               * q[static_cast<size_t>(j * n + k)];
      }
      result[i * n + j] = static_cast<float>(sum);
    }
  // Exactly symmetric.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j)
      result[j * n + i] = result[i * n + j];
  return result;
}

/// Layers for invert_factors, each with one covariance update: "conv"
/// (T = 16, A ill-conditioned with condition number 1e5, G a full-rank
/// Gram matrix), "dense" (A a rank-deficient Gram matrix, G with condition
/// number 1e4), "indefinite" (A slightly indefinite: the damping must be
/// raised once, and the eigen mode refuses it) and "hopeless" (G with an
/// eigenvalue of -500, beyond what 4 damping retries from 1e-2 reach).
inline factor_set hard_factor_set(std::mt19937& rng) {
  auto layer = [](std::string name, tensor a, tensor g, int64_t locations) {
    layer_factors f;
    f.layer = std::move(name);
    f.locations = locations;
    f.cov_updates = 1;
    f.a = std::move(a);
    f.g = std::move(g);
    return f;
  };
  factor_set result;
  result.step = 11;
  result.layers.push_back(
    layer("conv", ill_conditioned(60, 1e-5, rng), gram(24, 80, rng), 16));
  result.layers.push_back(
    layer("dense", gram(100, 40, rng), ill_conditioned(10, 1e-4, rng), 1));
  result.layers.push_back(
    layer("indefinite", diagonal({1, -0.01f, 1}), identity(2), 1));
  result.layers.push_back(
    layer("hopeless", identity(3), diagonal({1, -500}), 1));
  return result;
}

/// The configuration hard_factor_set is made for: λ = 1e-4, 4 retries.
inline kfac_config hard_factor_config(inverse_mode mode) {
  kfac_config result;
  result.damping = 1e-4f;
  result.max_damping_retries = 4;
  result.min_cov_updates = 1;
  result.mode = mode;
  return result;
}

/// The error code and the context invert_layer adds ("numerical_failure:
/// layer 'x', factor A") of a problem, without the kernel's own detail
/// (a pivot or an eigenvalue, which may differ in the last digit).
inline std::string problem_context(const std::string& problem) {
  auto first = problem.find(": ");
  if (first == std::string::npos)
    return problem;
  return problem.substr(0, problem.find(": ", first + 2));
}

/// `got` against `want` for the same factors and config. The dampings
/// are equal (both devices apply kernels/damping_retry.hpp to the same
/// failures); the Cholesky factors and eigenvalues agree within
/// `tol` x the largest magnitude (and 10 x `tol` relative); eigenvectors,
/// unique only up to sign, are compared through the preconditioning of a
/// random gradient, within 10 x `tol` of its largest magnitude: `got`'s by
/// `got_kernels` (a GPU's, to check its preconditioning too), `want`'s on
/// the CPU.
inline void check_inverse_sets_close(const inverse_set& got,
                                     const inverse_set& want, double tol,
                                     std::mt19937& rng,
                                     kfac_inverter& got_kernels
                                     = cpu_kfac_inverter()) {
  BOOST_CHECK_EQUAL(got.step, want.step);
  BOOST_CHECK_EQUAL(got.damping_raised, want.damping_raised);
  BOOST_REQUIRE_EQUAL(got.problems.size(), want.problems.size());
  for (size_t i = 0; i < got.problems.size(); ++i)
    BOOST_CHECK_EQUAL(problem_context(got.problems[i]),
                      problem_context(want.problems[i]));
  BOOST_REQUIRE_EQUAL(got.layers.size(), want.layers.size());
  for (size_t i = 0; i < got.layers.size(); ++i) {
    const auto& x = got.layers[i];
    const auto& y = want.layers[i];
    BOOST_TEST_CONTEXT("layer '" << y.layer << "'") {
      BOOST_REQUIRE_EQUAL(x.layer, y.layer);
      BOOST_CHECK(x.mode == y.mode);
      BOOST_CHECK(x.form == y.form);
      BOOST_CHECK_EQUAL(x.locations, y.locations);
      BOOST_CHECK_EQUAL(x.damping, y.damping);
      BOOST_CHECK_EQUAL(x.a_damping, y.a_damping);
      BOOST_CHECK_EQUAL(x.g_damping, y.g_damping);
      if (y.mode == inverse_mode::eigen) {
        check_close(x.a_values, y.a_values, tol * max_abs(y.a_values),
                    10 * tol, "eigenvalues of A");
        check_close(x.g_values, y.g_values, tol * max_abs(y.g_values),
                    10 * tol, "eigenvalues of G");
      } else {
        check_close(x.a, y.a, tol * max_abs(y.a), 10 * tol,
                    "Cholesky factor of A");
        check_close(x.g, y.g, tol * max_abs(y.g), 10 * tol,
                    "Cholesky factor of G");
      }
      BOOST_REQUIRE(!check_inverse(x, y.a.dim(0), y.g.dim(0)));
      auto grad = random_tensor({y.a.dim(0), y.g.dim(0)}, rng);
      tensor out_got, out_want;
      auto dot_got = precondition_layer(x, grad, out_got, got_kernels);
      auto dot_want = precondition_layer(y, grad, out_want);
      BOOST_REQUIRE(dot_got && dot_want);
      check_close(out_got, out_want, 10 * tol * max_abs(out_want), 10 * tol,
                  "preconditioned gradient");
    }
  }
}

} // namespace syncfac::test
