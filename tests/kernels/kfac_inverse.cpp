#define BOOST_TEST_MODULE kernels_kfac_inverse
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>

#include <Eigen/Dense>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "tests/helpers.hpp"
#include "tests/kfac_test_utils.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;
using syncfac::cpu::damping_plan;

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// vec(grad) as K-FAC uses it: the row-major flattening of grad [p, q],
// element (i, j) at i·q + j. This is the column-major vec of the paper's
// [q, p] (out × in) weight gradient gradᵀ (kron: tests/kfac_test_utils.hpp).
VectorXd vec(const tensor& grad) {
  VectorXd v(grad.size());
  for (int64_t k = 0; k < grad.size(); ++k)
    v(k) = grad[k];
  return v;
}

tensor unvec(const VectorXd& v, int64_t p, int64_t q) {
  tensor x({p, q});
  for (int64_t k = 0; k < p * q; ++k)
    x[k] = static_cast<float>(v(k));
  return x;
}

// A random Gram matrix XᵀX / m with X [m, n], rounded to float as the factor
// code delivers it; m >= n makes it positive definite (almost surely).
tensor random_gram(int64_t n, int64_t m, std::mt19937& rng) {
  auto x = to_matrix(random_tensor({m, n}, rng));
  MatrixXd gram = x.transpose() * x / static_cast<double>(m);
  return to_tensor(0.5 * (gram + gram.transpose())); // exactly symmetric
}

// A sentinel output that a failing call must leave alone.
tensor sentinel() {
  return tensor({2, 2}, {7, 7, 7, 7});
}

constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();

// The fixture of the comparisons: A 4x4 (3 inputs + bias), G 3x3, grad [4, 3].
struct tiny_layer {
  std::mt19937 rng{11};
  tensor A = random_gram(4, 9, rng);
  tensor G = random_gram(3, 7, rng);
  tensor grad = random_tensor({4, 3}, rng);
};

} // namespace

BOOST_AUTO_TEST_CASE(kronecker_of_row_major_vec_is_A_grad_G) {
  // The layout fact the kernels rely on: (A⊗G) vec(grad) = vec(A grad G).
  tiny_layer l;
  auto A = to_matrix(l.A);
  auto G = to_matrix(l.G);
  VectorXd lhs = kron(A, G) * vec(l.grad);
  MatrixXd rhs = A * to_matrix(l.grad) * G;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      BOOST_CHECK_SMALL(lhs(i * 3 + j) - rhs(i, j), 1e-12);
}

BOOST_AUTO_TEST_CASE(pi_adjustment_balances_mean_traces) {
  // (4·4/4) / (3/3) = 4 -> π = 2.
  BOOST_CHECK_CLOSE(cpu::pi_adjustment(identity(4, 4.0f), identity(3)), 2.0f,
                    1e-4);
  // (10/4) / (0.6/3) = 12.5.
  BOOST_CHECK_CLOSE(cpu::pi_adjustment(diagonal({1, 2, 3, 4}),
                                       diagonal({0.1f, 0.2f, 0.3f})),
                    std::sqrt(12.5f), 1e-4);
  // Off-diagonal entries do not count.
  auto A = identity(2, 9.0f);
  A[1] = A[2] = 100.0f;
  BOOST_CHECK_CLOSE(cpu::pi_adjustment(A, identity(5)), 3.0f, 1e-4);
  // A trace of 0 (a factor never updated) or below: no adjustment.
  BOOST_CHECK_EQUAL(cpu::pi_adjustment(tensor({4, 4}), identity(3)), 1.0f);
  BOOST_CHECK_EQUAL(cpu::pi_adjustment(identity(4), tensor({3, 3})), 1.0f);
  BOOST_CHECK_EQUAL(cpu::pi_adjustment(identity(4, -1.0f), identity(3)),
                    1.0f);
  BOOST_CHECK_EQUAL(cpu::pi_adjustment(identity(4), diagonal({nan_value})),
                    1.0f);
  BOOST_CHECK_EQUAL(cpu::pi_adjustment(tensor({4, 3}), identity(3)), 1.0f);
}

BOOST_AUTO_TEST_CASE(factored_damping_dense_and_conv) {
  auto A = identity(4, 4.0f); // π = 2 against G = I
  auto G = identity(3);
  auto dense = cpu::factored_damping(A, G, 0.01f, 1);
  BOOST_CHECK_CLOSE(dense.a_damping, 0.2f, 1e-4); // π·√0.01
  BOOST_CHECK_CLOSE(dense.g_damping, 0.05f, 1e-4); // √0.01 / π
  // Conv, T = 4: λ_eff = 0.0025, √ = 0.05.
  auto conv = cpu::factored_damping(A, G, 0.01f, 4);
  BOOST_CHECK_CLOSE(conv.a_damping, 0.1f, 1e-4);
  BOOST_CHECK_CLOSE(conv.g_damping, 0.025f, 1e-4);
  // T·a·g = λ: the Kronecker product carries λ·I.
  BOOST_CHECK_CLOSE(4.0f * conv.a_damping * conv.g_damping, 0.01f, 1e-3);
  // Trace 0: π = 1, both √λ_eff.
  auto zero = cpu::factored_damping(tensor({4, 4}), G, 0.04f, 1);
  BOOST_CHECK_CLOSE(zero.a_damping, 0.2f, 1e-4);
  BOOST_CHECK_CLOSE(zero.g_damping, 0.2f, 1e-4);
  // Invalid λ or T poison the plan, which damped_inverse then refuses.
  for (auto bad : {cpu::factored_damping(A, G, -1.0f, 1),
                   cpu::factored_damping(A, G, nan_value, 1),
                   cpu::factored_damping(A, G, 0.01f, 0)}) {
    BOOST_CHECK(std::isnan(bad.a_damping));
    BOOST_CHECK(std::isnan(bad.g_damping));
  }
  tensor inv;
  check_error(cpu::damped_inverse(A, cpu::factored_damping(A, G, -1, 1)
                                       .a_damping,
                                  inv),
              ec::non_finite, {"damping"});
}

// The explicit 12 x 12 block T·(A + a I)⊗(G + g I) of the fixture's
// layer, solved for its gradient in double.
tensor explicit_solve(const tiny_layer& l, const cpu::damping_plan& plan,
                      int64_t T) {
  MatrixXd Ad = to_matrix(l.A) + plan.a_damping * MatrixXd::Identity(4, 4);
  MatrixXd Gd = to_matrix(l.G) + plan.g_damping * MatrixXd::Identity(3, 3);
  MatrixXd K = static_cast<double>(T) * kron(Ad, Gd);
  VectorXd x = K.fullPivLu().solve(vec(l.grad));
  return unvec(x, 4, 3);
}

// The fixture's gradient preconditioned with the explicit inverses of its
// damped factors (the factored path), for T steps' statistics.
tensor precondition_by_inverses(const tiny_layer& l,
                                const cpu::damping_plan& plan, int64_t T) {
  tensor A_inv, G_inv, out;
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(l.A, plan.a_damping, A_inv));
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(l.G, plan.g_damping, G_inv));
  SYNCFAC_REQUIRE_OK(cpu::precondition_factored(
    l.grad, A_inv, G_inv, 1.0f / static_cast<float>(T), out));
  return out;
}

// Calls f(l, plan, T) on the fixture's layer for statistics of T = 1 and
// 4 steps, with its factored damping for lambda 0.05.
template <class F>
void for_each_step_count(F f) {
  tiny_layer l;
  const float lambda = 0.05f;
  for (int64_t T : {1, 4}) {
    BOOST_TEST_CONTEXT("T = " << T) {
      f(l, cpu::factored_damping(l.A, l.G, lambda, T), T);
    }
  }
}

BOOST_AUTO_TEST_CASE(factored_preconditioning_matches_explicit_kronecker) {
  for_each_step_count([](const tiny_layer& l, const cpu::damping_plan& plan,
                         int64_t T) {
    check_close(precondition_by_inverses(l, plan, T),
                explicit_solve(l, plan, T), 1e-5, 1e-4, "preconditioned");
  });
}

BOOST_AUTO_TEST_CASE(cholesky_preconditioning_matches_explicit_kronecker) {
  for_each_step_count([](const tiny_layer& l, const cpu::damping_plan& plan,
                         int64_t T) {
    tensor LA, LG, out;
    SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(l.A, plan.a_damping, LA));
    SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(l.G, plan.g_damping, LG));
    SYNCFAC_REQUIRE_OK(cpu::precondition_cholesky(
      l.grad, LA, LG, 1.0f / static_cast<float>(T), out));
    check_close(out, explicit_solve(l, plan, T), 1e-5, 1e-4,
                "preconditioned");
    // The same as the explicit inverses.
    check_close(out, precondition_by_inverses(l, plan, T), 1e-5, 1e-4,
                "vs explicit inverses");
    // In place.
    auto g = l.grad;
    SYNCFAC_REQUIRE_OK(cpu::precondition_cholesky(
      g, LA, LG, 1.0f / static_cast<float>(T), g));
    check_close(g, out, 0, 0, "aliased output");
  });
}

BOOST_AUTO_TEST_CASE(cholesky_preconditioning_of_wider_layers) {
  // Few outputs (up to 32) take the row-wise solves, more take Eigen's
  // blocked ones; both equal the explicit inverses' product, also with
  // row counts that are no multiple of the vector width.
  std::mt19937 rng(17);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{37, 5}, {70, 17},
                      {9, 32}, {23, 40}, {1, 1}}) {
    BOOST_TEST_CONTEXT("[" << p << ", " << q << "]") {
      auto A = random_gram(p, 2 * p + 3, rng);
      auto G = random_gram(q, 2 * q + 3, rng);
      auto grad = random_tensor({p, q}, rng);
      tensor LA, LG, out, A_inv, G_inv, ref;
      SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(A, 0.1f, LA));
      SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(G, 0.1f, LG));
      SYNCFAC_REQUIRE_OK(cpu::precondition_cholesky(grad, LA, LG, 0.5f, out));
      SYNCFAC_REQUIRE_OK(cpu::damped_inverse(A, 0.1f, A_inv));
      SYNCFAC_REQUIRE_OK(cpu::damped_inverse(G, 0.1f, G_inv));
      SYNCFAC_REQUIRE_OK(
        cpu::precondition_factored(grad, A_inv, G_inv, 0.5f, ref));
      check_close(out, ref, 1e-4, 1e-4, "vs explicit inverses");
    }
  }
}

BOOST_AUTO_TEST_CASE(damped_cholesky_is_lower_and_reconstructs) {
  std::mt19937 rng{5};
  auto F = random_gram(6, 4, rng); // rank 4: needs the damping
  tensor L;
  SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(F, 0.1f, L));
  auto Ld = to_matrix(L);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = i + 1; j < 6; ++j)
      BOOST_TEST(Ld(i, j) == 0.0);
  MatrixXd expected = to_matrix(F) + 0.1 * MatrixXd::Identity(6, 6);
  check_close(to_tensor(Ld * Ld.transpose()), to_tensor(expected), 1e-6,
              1e-5, "L L^T");
  // Not positive definite: refused, retried with more damping.
  auto before = sentinel();
  L = before;
  auto err = cpu::damped_cholesky(identity(3, -1.0f), 0.5f, L);
  check_error(err, ec::numerical_failure, {"not positive definite"});
  BOOST_CHECK(L == before);
  auto used = cpu::damped_cholesky_with_retry(identity(3, -1.0f), 0.5f, 2, L);
  BOOST_REQUIRE_MESSAGE(used, why(used));
  BOOST_CHECK_CLOSE(*used, 5.0f, 1e-4);
  check_close(L, identity(3, 2.0f), 1e-6, 1e-6, "sqrt(4) I");
  // A zero pivot in a shipped factor is refused at preconditioning.
  tensor out;
  auto bad = identity(3);
  bad[4] = 0.0f;
  check_error(cpu::precondition_cholesky(tensor({3, 3}), bad, identity(3),
                                         1.0f, out),
              ec::numerical_failure, {"LA", "pivot"});
}

BOOST_AUTO_TEST_CASE(eigen_preconditioning_is_exact_damped_block_inverse) {
  // With A = QA diag(eA) QAᵀ, G = QG diag(eG) QGᵀ, and Q = QA⊗QG orthogonal:
  //   T·(A⊗G) + λI = Q (T·diag(eA)⊗diag(eG) + λI) Qᵀ,
  //   Qᵀ vec(grad) = vec(QAᵀ grad QG),
  // so dividing that elementwise by T·eA_i·eG_j + λ and mapping back with
  // QA · V · QGᵀ gives exactly (T·(A⊗G) + λI)⁻¹ vec(grad).
  tiny_layer l;
  tensor eA, QA, eG, QG;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.A, eA, QA));
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.G, eG, QG));
  const float lambda = 0.05f;
  for (int64_t T : {1, 4}) {
    BOOST_TEST_CONTEXT("T = " << T) {
      tensor out;
      SYNCFAC_REQUIRE_OK(
        cpu::precondition_eigen(l.grad, QA, eA, QG, eG, lambda, T, out));
      MatrixXd K = static_cast<double>(T)
                     * kron(to_matrix(l.A), to_matrix(l.G))
                   + lambda * MatrixXd::Identity(12, 12);
      VectorXd x = K.fullPivLu().solve(vec(l.grad));
      check_close(out, unvec(x, 4, 3), 1e-5, 1e-4, "preconditioned");
    }
  }
}

BOOST_AUTO_TEST_CASE(eigen_preconditioning_refuses_zero_divisors) {
  tiny_layer l;
  tensor eA, QA, eG, QG;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(tensor({4, 4}), eA, QA));
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.G, eG, QG));
  auto out = sentinel();
  check_error(cpu::precondition_eigen(l.grad, QA, eA, QG, eG, 0.0f, 1, out),
              ec::numerical_failure, {"eA[0]", "not positive"});
  check_error(cpu::precondition_eigen(l.grad, QA, eA, QG, eG, 0.1f, 0, out),
              ec::invalid_argument, {"locations 0"});
  check_error(cpu::precondition_eigen(l.grad, QA, eA, QG, eG, -0.1f, 1, out),
              ec::invalid_argument, {"lambda"});
  check_error(
    cpu::precondition_eigen(l.grad, QA, eA, QG, eG, nan_value, 1, out),
    ec::non_finite, {"lambda"});
  BOOST_CHECK(out == sentinel());
}

BOOST_AUTO_TEST_CASE(damped_inverse_inverts_and_is_symmetric) {
  std::mt19937 rng(3);
  auto F = random_gram(6, 10, rng);
  tensor inv;
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(F, 0.1f, inv));
  BOOST_REQUIRE(inv.shape() == (tensor_shape{6, 6}));
  MatrixXd prod = (to_matrix(F) + 0.1 * MatrixXd::Identity(6, 6))
                  * to_matrix(inv);
  BOOST_CHECK_SMALL((prod - MatrixXd::Identity(6, 6)).cwiseAbs().maxCoeff(),
                    1e-5);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j)
      BOOST_CHECK_EQUAL(inv[i * 6 + j], inv[j * 6 + i]);
  // An asymmetric factor is read as its symmetric part, whichever triangle
  // holds the larger value.
  auto skewed = F;
  skewed[1] += 0.01f;
  skewed[6] -= 0.01f;
  tensor inv_skewed;
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(skewed, 0.1f, inv_skewed));
  check_close(inv_skewed, inv, 1e-6, 1e-5, "symmetric part");
  // In place.
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(F, 0.1f, F));
  check_close(F, inv, 0, 0, "in place");
}

BOOST_AUTO_TEST_CASE(damped_inverse_of_non_positive_definite_fails) {
  auto inv = sentinel();
  // Negative definite: -I + 0.5 I.
  check_error(cpu::damped_inverse(identity(4, -1.0f), 0.5f, inv),
              ec::numerical_failure,
              {"dimension 4", "damping 0.5", "not positive definite"});
  // Exactly rank 2 (small integers, so the float factor is exactly
  // singular) with damping 0.
  std::vector<double> v{1, 2, 0, 1};
  std::vector<double> w{0, 1, 1, -1};
  tensor rank2({4, 4});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j)
      rank2[i * 4 + j] = static_cast<float>(v[i] * v[j] + w[i] * w[j]);
  check_error(cpu::damped_inverse(rank2, 0.0f, inv), ec::numerical_failure,
              {"dimension 4", "damping 0 "});
  // Exactly rank 3, where Eigen's LLT alone succeeds: round-off leaves a
  // pivot of about +5e-15 instead of 0. The round-off threshold catches it.
  MatrixXd x(3, 6);
  x << 1, 2, 3, 0, 2, 2, -1, 1, -3, 3, -2, -2, 0, 2, -1, 3, 2, -2;
  MatrixXd rank3 = x.transpose() * x;
  Eigen::LLT<MatrixXd> plain(rank3);
  BOOST_REQUIRE_MESSAGE(plain.info() == Eigen::Success,
                        "the example no longer slips through plain LLT");
  check_error(cpu::damped_inverse(to_tensor(rank3), 0.0f, inv),
              ec::numerical_failure, {"dimension 6", "round-off level"});
  // All zeros (a factor before any update), damping 0.
  check_error(cpu::damped_inverse(tensor({3, 3}), 0.0f, inv),
              ec::numerical_failure, {"dimension 3"});
  BOOST_CHECK(inv == sentinel());
  // The same rank-2 factor is fine once damped.
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(rank2, 1e-3f, inv));
}

BOOST_AUTO_TEST_CASE(damped_inverse_refuses_bad_arguments) {
  auto inv = sentinel();
  check_error(cpu::damped_inverse(tensor({4, 3}), 0.1f, inv),
              ec::shape_mismatch, {"[4, 3]", "[4, 4]"});
  check_error(cpu::damped_inverse(tensor({4}), 0.1f, inv),
              ec::shape_mismatch, {"[4]", "[4, 4]"});
  auto F = identity(3);
  F[4] = std::numeric_limits<float>::infinity();
  check_error(cpu::damped_inverse(F, 0.1f, inv), ec::non_finite,
              {"factor [3, 3]", "index 4"});
  check_error(cpu::damped_inverse(identity(3), nan_value, inv),
              ec::non_finite, {"damping"});
  check_error(cpu::damped_inverse(identity(3), -0.1f, inv),
              ec::invalid_argument, {"damping", "negative"});
  BOOST_CHECK(inv == sentinel());
}

BOOST_AUTO_TEST_CASE(retry_raises_damping_tenfold_and_reports_it) {
  tensor inv;
  // -I: 0.5 fails, 5 works (eigenvalues 4).
  auto used = cpu::damped_inverse_with_retry(identity(4, -1.0f), 0.5f, 3, inv);
  BOOST_REQUIRE_MESSAGE(used, why(used));
  BOOST_CHECK_CLOSE(*used, 5.0f, 1e-4);
  check_close(inv, identity(4, 0.25f), 1e-6, 1e-5, "(-I + 5 I)^-1");
  // Works at once: the damping asked for comes back.
  used = cpu::damped_inverse_with_retry(identity(4), 0.5f, 3, inv);
  BOOST_REQUIRE_MESSAGE(used, why(used));
  BOOST_CHECK_EQUAL(*used, 0.5f);
  // 0.01, 0.1, 1 all fail (-I + I is singular): reported with the range.
  auto before = sentinel();
  inv = before;
  used = cpu::damped_inverse_with_retry(identity(4, -1.0f), 0.01f, 2, inv);
  BOOST_REQUIRE(!used);
  check_error(used.error(), ec::numerical_failure,
              {"damping 0.01", "up to 1 ", "2 retries"});
  BOOST_CHECK(inv == before);
  // No retries allowed.
  used = cpu::damped_inverse_with_retry(identity(4, -1.0f), 0.5f, 0, inv);
  BOOST_REQUIRE(!used);
  check_error(used.error(), ec::numerical_failure, {"not positive definite"});
  // Damping 0 cannot grow by x10: it starts from 1e-6 x mean diagonal.
  auto singular = diagonal({2, 0, 4, 0}); // mean diagonal 1.5
  used = cpu::damped_inverse_with_retry(singular, 0.0f, 1, inv);
  BOOST_REQUIRE_MESSAGE(used, why(used));
  BOOST_CHECK_CLOSE(*used, 1.5e-6f, 1e-3);
  // Errors other than numerical failures are not retried.
  used = cpu::damped_inverse_with_retry(tensor({4, 3}), 0.5f, 3, inv);
  BOOST_REQUIRE(!used);
  check_error(used.error(), ec::shape_mismatch, {"[4, 3]"});
  used = cpu::damped_inverse_with_retry(identity(2), 0.5f, -1, inv);
  BOOST_REQUIRE(!used);
  check_error(used.error(), ec::invalid_argument, {"max_retries -1"});
}

// Q diag(e) Qᵀ is F.
void check_reconstructs(const tensor& F, const tensor& e, const tensor& Q) {
  MatrixXd q = to_matrix(Q);
  VectorXd d(e.size());
  for (int64_t k = 0; k < e.size(); ++k)
    d(k) = e[k];
  check_close(to_tensor(q * d.asDiagonal() * q.transpose()), F, 1e-6, 1e-5,
              "Q diag(e) Q^T");
}

BOOST_AUTO_TEST_CASE(symmetric_eigen_reconstructs_the_factor) {
  std::mt19937 rng(5);
  auto F = random_gram(5, 8, rng);
  tensor e, Q;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(F, e, Q));
  BOOST_REQUIRE(e.shape() == (tensor_shape{5}));
  BOOST_REQUIRE(Q.shape() == (tensor_shape{5, 5}));
  for (int64_t k = 1; k < 5; ++k)
    BOOST_CHECK_LE(e[k - 1], e[k]);
  check_reconstructs(F, e, Q);
  MatrixXd q = to_matrix(Q);
  BOOST_CHECK_SMALL(
    (q.transpose() * q - MatrixXd::Identity(5, 5)).cwiseAbs().maxCoeff(),
    1e-6);
  // Column k is the eigenvector of eigenvalue k.
  VectorXd residual = to_matrix(F) * q.col(4) - double{e[4]} * q.col(4);
  BOOST_CHECK_SMALL(residual.cwiseAbs().maxCoeff(), 1e-5);
}

BOOST_AUTO_TEST_CASE(symmetric_eigen_clamps_round_off_negatives) {
  // A float-rounded rank-2 Gram matrix has null eigenvalues of about
  // ±1e-8 · scale; find one whose raw spectrum dips below zero.
  tensor F;
  double raw_min = 0;
  for (unsigned seed = 0; seed < 200 && raw_min >= 0; ++seed) {
    std::mt19937 rng(seed);
    F = random_gram(6, 2, rng);
    Eigen::SelfAdjointEigenSolver<MatrixXd> raw(to_matrix(F),
                                                Eigen::EigenvaluesOnly);
    raw_min = raw.eigenvalues().minCoeff();
  }
  BOOST_REQUIRE_MESSAGE(raw_min < 0, "no seed gave a negative eigenvalue");
  tensor e, Q;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(F, e, Q));
  for (int64_t k = 0; k < 6; ++k)
    BOOST_CHECK_GE(e[k], 0.0f);
  BOOST_CHECK_EQUAL(e[0], 0.0f);
  check_reconstructs(F, e, Q);
  // A genuinely indefinite factor is not round-off.
  auto out_e = sentinel();
  auto out_q = sentinel();
  check_error(cpu::symmetric_eigen(diagonal({1, -1, 2}), out_e, out_q),
              ec::numerical_failure,
              {"dimension 3", "not positive semi-definite"});
  BOOST_CHECK(out_e == sentinel());
  BOOST_CHECK(out_q == sentinel());
  check_error(cpu::symmetric_eigen(tensor({2, 3}), out_e, out_q),
              ec::shape_mismatch, {"[2, 3]", "[2, 2]"});
  check_error(cpu::symmetric_eigen(diagonal({1, nan_value}), out_e, out_q),
              ec::non_finite, {"factor"});
}

BOOST_AUTO_TEST_CASE(kl_clip_scale_values) {
  // sqrt(1e-3 / (0.01 · 10)) = 0.1.
  BOOST_CHECK_CLOSE(cpu::kl_clip_scale(0.1, 1e-3, 10.0), 0.1, 1e-9);
  // sqrt(1e-2 / (1e-4 · 4)) = 5 -> 1.
  BOOST_CHECK_EQUAL(cpu::kl_clip_scale(0.01, 1e-2, 4.0), 1.0);
  // Exactly at the bound.
  BOOST_CHECK_CLOSE(cpu::kl_clip_scale(1.0, 2.0, 2.0), 1.0, 1e-12);
  BOOST_CHECK_EQUAL(cpu::kl_clip_scale(0.1, 1e-3, 0.0), 1.0);
  BOOST_CHECK_EQUAL(cpu::kl_clip_scale(0.1, 1e-3, -5.0), 1.0);
  BOOST_CHECK_EQUAL(cpu::kl_clip_scale(0.0, 1e-3, 5.0), 1.0);
  BOOST_CHECK_EQUAL(
    cpu::kl_clip_scale(0.1, 1e-3, std::numeric_limits<double>::quiet_NaN()),
    1.0);
  BOOST_CHECK_EQUAL(cpu::kl_clip_scale(0.1, 0.0, 5.0), 1.0);
}

BOOST_AUTO_TEST_CASE(preconditioning_shape_errors_name_both_shapes) {
  tiny_layer l;
  tensor eA, QA, eG, QG;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.A, eA, QA));
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.G, eG, QG));
  auto out = sentinel();
  check_error(
    cpu::precondition_factored(l.grad, identity(5), identity(3), 1, out),
    ec::shape_mismatch, {"A_inv [5, 5]", "grad [4, 3]"});
  check_error(
    cpu::precondition_factored(l.grad, identity(4), identity(4), 1, out),
    ec::shape_mismatch, {"G_inv [4, 4]", "grad [4, 3]"});
  check_error(
    cpu::precondition_factored(tensor({12}), identity(4), identity(3), 1, out),
    ec::shape_mismatch, {"grad [12]", "[4, 4]"});
  check_error(cpu::precondition_eigen(l.grad, QA, eG, QG, eG, 0.1f, 1, out),
              ec::shape_mismatch, {"eA [3]", "QA [4, 4]"});
  check_error(cpu::precondition_eigen(l.grad, QA, eA, QG, eA, 0.1f, 1, out),
              ec::shape_mismatch, {"eG [4]", "QG [3, 3]"});
  check_error(cpu::precondition_eigen(l.grad, QG, eA, QA, eG, 0.1f, 1, out),
              ec::shape_mismatch, {"QA [3, 3]", "grad [4, 3]"});
  BOOST_CHECK(out == sentinel());
}

BOOST_AUTO_TEST_CASE(preconditioning_refuses_non_finite_inputs) {
  tiny_layer l;
  auto out = sentinel();
  auto bad = l.grad;
  bad[5] = nan_value;
  check_error(
    cpu::precondition_factored(bad, identity(4), identity(3), 1, out),
    ec::non_finite, {"grad [4, 3]", "index 5"});
  check_error(
    cpu::precondition_factored(l.grad, identity(4), identity(3), nan_value,
                               out),
    ec::non_finite, {"scale"});
  auto bad_g = identity(3);
  bad_g[0] = std::numeric_limits<float>::infinity();
  check_error(cpu::precondition_factored(l.grad, identity(4), bad_g, 1, out),
              ec::non_finite, {"G_inv"});
  tensor eA({4}), eG({3});
  eA.fill(1);
  eG.fill(1);
  check_error(cpu::precondition_eigen(bad, identity(4), eA, identity(3), eG,
                                      0.1f, 1, out),
              ec::non_finite, {"grad"});
  BOOST_CHECK(out == sentinel());
}

BOOST_AUTO_TEST_CASE(preconditioning_output_may_alias_an_input) {
  tiny_layer l;
  tensor A_inv, G_inv, expected;
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(l.A, 0.1f, A_inv));
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(l.G, 0.1f, G_inv));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(l.grad, A_inv, G_inv, 0.5f, expected));
  auto g = l.grad;
  SYNCFAC_REQUIRE_OK(cpu::precondition_factored(g, A_inv, G_inv, 0.5f, g));
  check_close(g, expected, 0, 0, "in place factored");
  // Square layer: out may also be one of the factors.
  std::mt19937 rng(8);
  auto grad = random_tensor({3, 3}, rng);
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(grad, G_inv, G_inv, 1.0f, expected));
  auto factor = G_inv;
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(grad, factor, G_inv, 1.0f, factor));
  check_close(factor, expected, 0, 0, "out is A_inv");
  tensor eA, QA, eG, QG;
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.A, eA, QA));
  SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(l.G, eG, QG));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_eigen(l.grad, QA, eA, QG, eG, 0.1f, 2, expected));
  g = l.grad;
  SYNCFAC_REQUIRE_OK(cpu::precondition_eigen(g, QA, eA, QG, eG, 0.1f, 2, g));
  check_close(g, expected, 0, 0, "in place eigen");
}

// -- float inverses and bfloat16 products (--kfac_precision bf16) -----------

BOOST_AUTO_TEST_CASE(float_inverse_matches_the_double_one) {
  // A rank-deficient Gram factor (fewer rows than inputs) as a dense layer's
  // A at a small batch, damped as K-FAC damps it: the float inverse is
  // exactly symmetric and within 1e-4 of the double one relative to its
  // largest entry (~1e-6 measured), far below bfloat16's 4e-3 rounding.
  std::mt19937 rng(21);
  auto F = random_gram(300, 200, rng);
  tensor inv64, inv32;
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(F, 0.05f, inv64));
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse_f32(F, 0.05f, inv32));
  BOOST_REQUIRE(inv32.shape() == inv64.shape());
  double largest = 0, worst = 0;
  for (int64_t i = 0; i < inv64.size(); ++i) {
    largest = std::max(largest, std::abs(double{inv64[i]}));
    worst = std::max(worst, std::abs(double{inv32[i]} - inv64[i]));
  }
  BOOST_TEST_MESSAGE("float inverse: max error " << worst / largest
                                                 << " of the largest entry");
  BOOST_TEST(worst <= 1e-4 * largest);
  BOOST_TEST(worst > 0.0); // a float factorisation, not the double one
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < i; ++j)
      BOOST_REQUIRE_EQUAL(inv32[i * 300 + j], inv32[j * 300 + i]);
  // In place.
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse_f32(F, 0.05f, F));
  check_close(F, inv32, 0, 0, "in place");
}

BOOST_AUTO_TEST_CASE(float_inverse_refuses_what_the_double_one_refuses) {
  auto inv = sentinel();
  check_error(cpu::damped_inverse_f32(identity(4, -1.0f), 0.5f, inv),
              ec::numerical_failure,
              {"damped_inverse_f32", "dimension 4", "not positive definite"});
  check_error(cpu::damped_inverse_f32(tensor({3, 3}), 0.0f, inv),
              ec::numerical_failure, {"dimension 3"});
  check_error(cpu::damped_inverse_f32(tensor({4, 3}), 0.1f, inv),
              ec::shape_mismatch, {"[4, 3]", "[4, 4]"});
  auto F = identity(3);
  F[4] = nan_value;
  check_error(cpu::damped_inverse_f32(F, 0.1f, inv), ec::non_finite,
              {"factor [3, 3]", "index 4"});
  BOOST_CHECK(inv == sentinel());
  // The retry raises the damping of a factor that fails as it is.
  tensor zero({3, 3});
  auto used = cpu::damped_inverse_f32_with_retry(zero, 0.0f, 4, inv);
  if (!used)
    BOOST_FAIL(render(used.error()));
  BOOST_TEST(*used > 0.0f);
}

BOOST_AUTO_TEST_CASE(bfloat16_preconditioning_matches_fp32_to_its_precision) {
  if (!cpu::bf16_products_backend()) {
    // Without AMX and AVX512-BF16 (or capped below avx512) the products are
    // refused by name, whatever the inputs.
    tiny_layer l;
    auto out = sentinel();
    check_error(cpu::precondition_factored_bf16(l.grad, identity(4),
                                                identity(3), 1, out),
                ec::unavailable,
                {"precondition_factored_bf16", "AMX", "AVX512-BF16"});
    BOOST_CHECK(out == sentinel());
    return;
  }
  BOOST_TEST_MESSAGE("bfloat16 products on "
                     << cpu::to_string(*cpu::bf16_products_backend()));
  // The autoencoder's code layer and a wide layer: |bf16 - fp32| within
  // 2e-2 of the largest entry (two roundings to 8 bits, ~4e-3 each,
  // summed over k terms of mixed signs); a wrong element is off by O(1).
  std::mt19937 rng(31);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{251, 30}, {401, 160}}) {
    auto A = random_gram(p, 2 * p, rng);
    auto G = random_gram(q, 2 * q, rng);
    tensor A_inv, G_inv, ref, out;
    SYNCFAC_REQUIRE_OK(cpu::damped_inverse(A, 0.1f, A_inv));
    SYNCFAC_REQUIRE_OK(cpu::damped_inverse(G, 0.1f, G_inv));
    auto grad = random_tensor({p, q}, rng);
    SYNCFAC_REQUIRE_OK(
      cpu::precondition_factored(grad, A_inv, G_inv, 0.5f, ref));
    SYNCFAC_REQUIRE_OK(
      cpu::precondition_factored_bf16(grad, A_inv, G_inv, 0.5f, out));
    BOOST_REQUIRE(out.shape() == ref.shape());
    double largest = 0, worst = 0;
    for (int64_t i = 0; i < ref.size(); ++i) {
      largest = std::max(largest, std::abs(double{ref[i]}));
      worst = std::max(worst, std::abs(double{out[i]} - ref[i]));
    }
    BOOST_TEST_INFO("layer [" << p << ", " << q << "]");
    BOOST_TEST(worst <= 2e-2 * largest);
    BOOST_TEST(worst > 0.0); // bfloat16 products, not fp32 ones
    // In place gives the same bits.
    auto g = grad;
    SYNCFAC_REQUIRE_OK(
      cpu::precondition_factored_bf16(g, A_inv, G_inv, 0.5f, g));
    check_close(g, out, 0, 0, "in place bf16");
  }
  // The same refusals as the fp32 products.
  tiny_layer l;
  auto out = sentinel();
  check_error(cpu::precondition_factored_bf16(l.grad, identity(5),
                                              identity(3), 1, out),
              ec::shape_mismatch, {"A_inv [5, 5]", "grad [4, 3]"});
  auto bad = l.grad;
  bad[5] = nan_value;
  check_error(cpu::precondition_factored_bf16(bad, identity(4), identity(3),
                                              1, out),
              ec::non_finite, {"grad [4, 3]", "index 5"});
  BOOST_CHECK(out == sentinel());
}
