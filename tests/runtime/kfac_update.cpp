#define BOOST_TEST_MODULE runtime_kfac_update
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/kfac_inverter.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "runtime/kfac/layer_inversion.hpp"
#include "tests/helpers.hpp"
#include "tests/kfac_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

// -- tensors and matrices ----------------------------------------------------

/// The layer's gradient matrix [in + 1, out]: weight rows, bias row last.
matrix layer_grad(const tensor& w, const tensor& b) {
  return to_matrix(layer_matrix(w, b));
}

// -- a dense layer fc0: w [2, 2], b [2] (a_dim 3, g_dim 2), plus a variable
//    `scale` [3] of no layer -----------------------------------------------

constexpr float lr = 0.1f;
constexpr float mu = 0.9f;

parameter_set variables() {
  return {{"fc0/w", mat(2, 2, {0.5f, -0.25f, 1.0f, 0.75f})},
          {"fc0/b", vec({0.1f, -0.2f})},
          {"scale", vec({1.0f, 2.0f, 3.0f})}};
}

std::vector<tensor> gradients(float k) {
  return {mat(2, 2, {0.3f * k, -0.1f, 0.2f, 0.4f * k}), vec({-0.5f, 0.25f * k}),
          vec({0.1f * k, -0.2f, 0.3f})};
}

optimizer make_optimizer(kfac_momentum momentum, float kl_clip = 0) {
  auto cfg = test::optimizer_of(optimizer_kind::kfac, lr);
  cfg.momentum = mu;
  cfg.kfac.momentum = momentum;
  cfg.kfac.kl_clip = kl_clip;
  auto opt = optimizer::make(cfg, variables());
  BOOST_REQUIRE_MESSAGE(opt, test::why(opt));
  return std::move(*opt);
}

/// A Cholesky-mode inverse given directly by its two (symmetric) parts.
layer_inverse cholesky_inverse(const matrix& a_inv, const matrix& g_inv) {
  layer_inverse inv;
  inv.layer = "fc0";
  inv.mode = inverse_mode::cholesky;
  inv.damping = 0.01f;
  inv.a = to_tensor(a_inv);
  inv.g = to_tensor(g_inv);
  return inv;
}

/// A matrix rows x cols of `entries`, row by row.
matrix matrix_of(Eigen::Index rows, Eigen::Index cols,
                 std::initializer_list<double> entries) {
  BOOST_REQUIRE_EQUAL(static_cast<Eigen::Index>(entries.size()), rows * cols);
  matrix m(rows, cols);
  auto x = entries.begin();
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j)
      m(i, j) = *x++;
  return m;
}

matrix a_inv_1() {
  return matrix_of(3, 3, {2.0, 0.5, 0.0, 0.5, 1.0, 0.25, 0.0, 0.25, 0.5});
}

matrix g_inv_1() {
  return matrix_of(2, 2, {1.5, -0.5, -0.5, 1.0});
}

matrix a_inv_2() {
  return matrix_of(3, 3, {1.0, 0.0, 0.2, 0.0, 3.0, 0.0, 0.2, 0.0, 1.0});
}

matrix g_inv_2() {
  return matrix_of(2, 2, {0.5, 0.1, 0.1, 2.0});
}

/// The plain part of the variables (everything but the layer) as vectors.
Eigen::VectorXd as_vector(const tensor& t) {
  Eigen::VectorXd v(t.size());
  for (int64_t i = 0; i < t.size(); ++i)
    v(i) = t[i];
  return v;
}

void require_close(const tensor& got, const Eigen::VectorXd& want,
                   const std::string& what, double tol = 1e-5) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  // Absolute near zero, relative elsewhere.
  for (int64_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want(i))
                 <= tol * std::max(1.0, std::abs(want(i))),
               what << "[" << i << "]: " << got[i] << " vs " << want(i));
}

/// The layer matrix split back into weight [4] and bias [2] vectors.
void require_layer(const parameter_set& params, const matrix& want,
                   const std::string& what, double tol = 1e-5) {
  Eigen::VectorXd w(4), b(2);
  w << want(0, 0), want(0, 1), want(1, 0), want(1, 1);
  b << want(2, 0), want(2, 1);
  require_close(params[0].value, w, what + " weight", tol);
  require_close(params[1].value, b, what + " bias", tol);
}

matrix theta_layer(const parameter_set& params) {
  return layer_grad(params[0].value, params[1].value);
}

/// Symmetric positive definite A [3, 3] and G [2, 2] for layer fc0.
std::pair<matrix, matrix> small_factors() {
  matrix A(3, 3), G(2, 2);
  A << 2.0, 0.3, 0.1, 0.3, 1.0, 0.2, 0.1, 0.2, 0.5;
  G << 1.0, 0.4, 0.4, 0.8;
  return {A, G};
}

/// fc0's factors after one covariance update.
layer_factors factors_of(const matrix& A, const matrix& G) {
  layer_factors f;
  f.layer = "fc0";
  f.cov_updates = 1;
  f.a = to_tensor(A);
  f.g = to_tensor(G);
  return f;
}

} // namespace

// -- kfac_apply --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(without_inverses_every_variable_takes_plain_momentum) {
  for (auto momentum : {kfac_momentum::adam, kfac_momentum::regular}) {
    auto opt = make_optimizer(momentum);
    auto params = variables();
    std::vector<kfac_layer_slot> slots{{0, 1, nullptr}};
    auto g1 = gradients(1.0f);
    auto g2 = gradients(-2.0f);
    auto s1 = kfac_apply(opt, params, g1, slots);
    BOOST_REQUIRE_MESSAGE(s1, test::why(s1));
    BOOST_TEST(s1->preconditioned == 0u);
    BOOST_TEST(s1->scale == 1.0);
    auto s2 = kfac_apply(opt, params, g2, slots);
    BOOST_REQUIRE_MESSAGE(s2, test::why(s2));
    // v1 = g1, v2 = mu g1 + g2; theta2 = theta0 - lr (v1 + v2).
    auto init = variables();
    for (size_t i = 0; i < params.size(); ++i) {
      Eigen::VectorXd v1 = as_vector(g1[i]);
      Eigen::VectorXd v2 = mu * v1 + as_vector(g2[i]);
      Eigen::VectorXd want = as_vector(init[i].value) - lr * (v1 + v2);
      require_close(params[i].value, want, params[i].name);
      require_close(opt.velocity(i), v2, params[i].name + " velocity");
    }
    BOOST_TEST(opt.slots().step == 2);
  }
}

/// Two steps of `opt` on `params`, with gradients(1) and then
/// gradients(0.5), the layer's inverse changing between them (1, then 2:
/// as when the shard installs a newer one); both must succeed.
std::pair<kfac_step_info, kfac_step_info> two_steps(optimizer& opt,
                                                    parameter_set& params) {
  auto inv1 = cholesky_inverse(a_inv_1(), g_inv_1());
  auto inv2 = cholesky_inverse(a_inv_2(), g_inv_2());
  std::vector<kfac_layer_slot> slots{{0, 1, &inv1}};
  auto s1 = kfac_apply(opt, params, gradients(1.0f), slots);
  BOOST_REQUIRE_MESSAGE(s1, test::why(s1));
  slots[0].inverse = &inv2;
  auto s2 = kfac_apply(opt, params, gradients(0.5f), slots);
  BOOST_REQUIRE_MESSAGE(s2, test::why(s2));
  return {*s1, *s2};
}

BOOST_AUTO_TEST_CASE(adam_momentum_preconditions_the_velocity) {
  // v <- mu v + g; theta <- theta - lr F^-1 v, with the inverse changing
  // between the steps (as when the shard installs a newer one).
  auto opt = make_optimizer(kfac_momentum::adam);
  auto params = variables();
  auto g1 = gradients(1.0f);
  auto g2 = gradients(0.5f);
  auto [s1, s2] = two_steps(opt, params);
  BOOST_TEST(s1.preconditioned == 1u);
  matrix v1 = layer_grad(g1[0], g1[1]);
  matrix v2 = mu * v1 + layer_grad(g2[0], g2[1]);
  matrix theta = theta_layer(variables())
                 - lr * a_inv_1() * v1 * g_inv_1()
                 - lr * a_inv_2() * v2 * g_inv_2();
  require_layer(params, theta, "fc0");
  // The velocity is kept unpreconditioned.
  require_layer({{"w", opt.velocity(0)}, {"b", opt.velocity(1)}}, v2,
                "fc0 velocity");
  // The variable of no layer: plain momentum.
  Eigen::VectorXd u1 = as_vector(g1[2]);
  Eigen::VectorXd u2 = mu * u1 + as_vector(g2[2]);
  require_close(params[2].value,
                as_vector(variables()[2].value) - lr * (u1 + u2), "scale");
  // dot = <v2, F^-1 v2> of the second step.
  double dot = (v2.array() * (a_inv_2() * v2 * g_inv_2()).array()).sum();
  BOOST_TEST(s2.dot == dot, tt::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(regular_momentum_accumulates_preconditioned_gradients) {
  // u = F^-1 g; v <- mu v + u; theta <- theta - lr v.
  auto opt = make_optimizer(kfac_momentum::regular);
  auto params = variables();
  auto g1 = gradients(1.0f);
  auto g2 = gradients(0.5f);
  two_steps(opt, params);
  matrix v1 = a_inv_1() * layer_grad(g1[0], g1[1]) * g_inv_1();
  matrix v2 = mu * v1 + a_inv_2() * layer_grad(g2[0], g2[1]) * g_inv_2();
  require_layer(params, theta_layer(variables()) - lr * (v1 + v2), "fc0");
  require_layer({{"w", opt.velocity(0)}, {"b", opt.velocity(1)}}, v2,
                "fc0 velocity");
  // With the inverse changing, the two momentum types differ.
  auto adam = make_optimizer(kfac_momentum::adam);
  auto other = variables();
  two_steps(adam, other);
  float diff = 0;
  for (int64_t k = 0; k < 4; ++k)
    diff = std::max(diff, std::abs(other[0].value[k] - params[0].value[k]));
  BOOST_TEST(diff > 1e-4f);
}

BOOST_AUTO_TEST_CASE(the_kl_clip_scales_the_whole_step) {
  const float kl_clip = 1e-4f;
  for (auto momentum : {kfac_momentum::adam, kfac_momentum::regular}) {
    auto opt = make_optimizer(momentum, kl_clip);
    auto params = variables();
    auto inv = cholesky_inverse(a_inv_1(), g_inv_1());
    auto g = gradients(1.0f);
    std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
    auto step = kfac_apply(opt, params, g, slots);
    BOOST_REQUIRE_MESSAGE(step, test::why(step));
    matrix m = layer_grad(g[0], g[1]);
    matrix u = a_inv_1() * m * g_inv_1();
    double dot = (m.array() * u.array()).sum();
    double c = std::sqrt(kl_clip / (double{lr} * lr * dot));
    BOOST_REQUIRE(c < 1.0);
    BOOST_TEST(step->dot == dot, tt::tolerance(1e-5));
    BOOST_TEST(step->scale == c, tt::tolerance(1e-5));
    require_layer(params, theta_layer(variables()) - lr * c * u, "fc0");
    // The variable of no layer is scaled alike: the clip bounds the step.
    require_close(params[2].value,
                  as_vector(variables()[2].value) - lr * c * as_vector(g[2]),
                  "scale");
  }
  // A large clip leaves the step alone.
  auto opt = make_optimizer(kfac_momentum::adam, 1e6f);
  auto params = variables();
  auto inv = cholesky_inverse(a_inv_1(), g_inv_1());
  std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
  auto step = kfac_apply(opt, params, gradients(1.0f), slots);
  BOOST_REQUIRE_MESSAGE(step, test::why(step));
  BOOST_TEST(step->scale == 1.0);
}

BOOST_AUTO_TEST_CASE(an_eigen_inverse_gives_the_exactly_damped_solve) {
  auto [A, G] = small_factors();
  auto f = factors_of(A, G);
  kfac_config cfg;
  cfg.mode = inverse_mode::eigen;
  cfg.damping = 0.05f;
  bool raised = true;
  auto inv = invert_layer(f, cfg, raised);
  BOOST_REQUIRE_MESSAGE(inv, test::why(inv));
  BOOST_TEST(!raised);
  auto opt = make_optimizer(kfac_momentum::adam);
  auto params = variables();
  auto g = gradients(1.0f);
  std::vector<kfac_layer_slot> slots{{0, 1, &*inv}};
  BOOST_REQUIRE(kfac_apply(opt, params, g, slots));
  // (A ⊗ G + λ I)⁻¹ vec(grad) with the row-major vec of [3, 2].
  matrix K = kron(A, G) + 0.05 * matrix::Identity(6, 6);
  matrix um = explicit_step(K, layer_grad(g[0], g[1]));
  require_layer(params, theta_layer(variables()) - lr * um, "fc0", 1e-4);
}

BOOST_AUTO_TEST_CASE(explicit_inverses_give_the_cholesky_step) {
  // The same factored damping; the inverses formed instead of solved
  // with: the same step to float round-off, and the form says which
  // preconditioning the layer takes.
  auto [A, G] = small_factors();
  auto f = factors_of(A, G);
  auto step_with = [&](inverse_mode mode, inverse_form form) {
    kfac_config cfg;
    cfg.mode = mode;
    cfg.damping = 0.05f;
    bool raised = true;
    auto inv = invert_layer(f, cfg, raised);
    BOOST_REQUIRE_MESSAGE(inv, test::why(inv));
    BOOST_TEST(!raised);
    BOOST_TEST((inv->form == form));
    auto opt = make_optimizer(kfac_momentum::adam);
    auto params = variables();
    std::vector<kfac_layer_slot> slots{{0, 1, &*inv}};
    BOOST_REQUIRE(kfac_apply(opt, params, gradients(1.0f), slots));
    return params;
  };
  auto solved = step_with(inverse_mode::cholesky,
                          inverse_form::cholesky_factor);
  auto formed = step_with(inverse_mode::explicit_inverse,
                          inverse_form::inverse);
  require_layer(formed, theta_layer(solved), "fc0", 1e-5);
  // Against the algebra: (A + πλ½ I)⁻¹ ∇ (G + λ½/π I)⁻¹, factored damping.
  auto plan = cpu::factored_damping(f.a, f.g, 0.05f, 1);
  matrix Ad = A + plan.a_damping * matrix::Identity(3, 3);
  matrix Gd = G + plan.g_damping * matrix::Identity(2, 2);
  auto g = gradients(1.0f);
  matrix um = Ad.inverse() * layer_grad(g[0], g[1]) * Gd.inverse();
  require_layer(formed, theta_layer(variables()) - lr * um, "fc0", 1e-4);
}

BOOST_AUTO_TEST_CASE(an_inverse_of_the_wrong_size_changes_nothing) {
  for (auto momentum : {kfac_momentum::adam, kfac_momentum::regular}) {
    auto opt = make_optimizer(momentum);
    auto params = variables();
    // One good step first, so the velocity is not zero.
    std::vector<kfac_layer_slot> plain{{0, 1, nullptr}};
    BOOST_REQUIRE(kfac_apply(opt, params, gradients(1.0f), plain));
    auto before = params;
    auto velocities = opt.slots();
    matrix small(2, 2);
    small << 1.0, 0.0, 0.0, 1.0;
    auto inv = cholesky_inverse(small, g_inv_1()); // A part 2x2, not 3x3
    std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
    auto msg = failure(kfac_apply(opt, params, gradients(2.0f), slots),
                       ec::shape_mismatch);
    BOOST_TEST(contains(msg, "fc0"), msg);
    for (size_t i = 0; i < params.size(); ++i) {
      BOOST_TEST(params[i].value == before[i].value, params[i].name);
      BOOST_TEST(opt.velocity(i) == velocities.first[i].value,
                 params[i].name);
    }
    BOOST_TEST(opt.slots().step == velocities.step);
  }
}

BOOST_AUTO_TEST_CASE(malformed_calls_are_errors) {
  auto opt = make_optimizer(kfac_momentum::adam);
  auto params = variables();
  std::vector<kfac_layer_slot> slots{{0, 1, nullptr}};
  auto g = gradients(1.0f);
  g.pop_back();
  failure(kfac_apply(opt, params, g, slots), ec::shape_mismatch);
  std::vector<kfac_layer_slot> outside{{0, 7, nullptr}};
  failure(kfac_apply(opt, params, gradients(1.0f), outside), ec::internal);
  optimizer_config momentum;
  momentum.kind = optimizer_kind::momentum;
  auto plain = optimizer::make(momentum, variables());
  BOOST_REQUIRE(plain);
  failure(kfac_apply(*plain, params, gradients(1.0f), slots), ec::internal);
  BOOST_TEST(params[0].value == variables()[0].value);
}

BOOST_AUTO_TEST_CASE(a_left_out_variable_keeps_its_value_and_velocity) {
  // `scale` left out (as a shard leaves its embedding tables, which it
  // updates itself): its gradient is not read (an empty tensor here), it
  // and its slot stay; the layer steps as without it.
  auto opt = make_optimizer(kfac_momentum::regular);
  auto ref_opt = make_optimizer(kfac_momentum::regular);
  auto params = variables();
  auto ref = variables();
  auto inv = cholesky_inverse(a_inv_1(), g_inv_1());
  std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
  auto g = gradients(1.0f);
  auto ref_g = g;
  g[2] = tensor{};
  auto s = kfac_apply(opt, params, g, slots, {false, false, true});
  BOOST_REQUIRE_MESSAGE(s, test::why(s));
  BOOST_TEST(s->preconditioned == 1u);
  auto r = kfac_apply(ref_opt, ref, ref_g, slots);
  BOOST_REQUIRE_MESSAGE(r, test::why(r));
  BOOST_TEST(params[2].value == variables()[2].value);
  BOOST_TEST(opt.velocity(2) == vec({0, 0, 0}));
  require_close(params[0].value, as_vector(ref[0].value), "fc0/w");
  require_close(params[1].value, as_vector(ref[1].value), "fc0/b");
  // A layer's own variable cannot be left out; wrong flag counts are
  // refused; neither changes anything.
  auto before = params;
  failure(kfac_apply(opt, params, gradients(1.0f), slots,
                     {true, false, false}),
          ec::internal);
  failure(kfac_apply(opt, params, gradients(1.0f), slots, {false, true}),
          ec::internal);
  BOOST_TEST(same(params, before));
}

BOOST_AUTO_TEST_CASE(layer_matrices_round_trip) {
  auto m = layer_matrix(mat(2, 2, {1, 2, 3, 4}), vec({5, 6}));
  BOOST_TEST(m == mat(3, 2, {1, 2, 3, 4, 5, 6}));
  tensor w{2, 2};
  tensor b{2};
  split_layer_matrix(m, w, b);
  BOOST_TEST(w == mat(2, 2, {1, 2, 3, 4}));
  BOOST_TEST(b == vec({5, 6}));
}

// -- check_inverse -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_inverse_names_what_does_not_fit) {
  auto good = cholesky_inverse(a_inv_1(), g_inv_1());
  BOOST_TEST(!check_inverse(good, 3, 2));
  auto msg = failure(check_inverse(good, 4, 2), ec::bad_message);
  BOOST_TEST(contains(msg, "fc0"), msg);
  BOOST_TEST(contains(msg, "4x4"), msg);
  msg = failure(check_inverse(good, 3, 3), ec::bad_message);
  BOOST_TEST(contains(msg, "G part"), msg);
  auto bad = good;
  bad.locations = 0;
  failure(check_inverse(bad, 3, 2), ec::bad_message);
  bad = good;
  bad.damping = -1.0f;
  failure(check_inverse(bad, 3, 2), ec::bad_message);
  bad = good;
  bad.g[1] = std::numeric_limits<float>::quiet_NaN();
  failure(check_inverse(bad, 3, 2), ec::non_finite);
  bad = good;
  bad.mode = inverse_mode::eigen;
  bad.a_values = vec({1, 2, 3});
  bad.g_values = vec({1});
  msg = failure(check_inverse(bad, 3, 2), ec::bad_message);
  BOOST_TEST(contains(msg, "eigenvalue"), msg);
  bad.g_values = vec({1, std::numeric_limits<float>::infinity()});
  failure(check_inverse(bad, 3, 2), ec::non_finite);
}

// -- invert_layer and invert_factors -----------------------------------------

namespace {

layer_factors factors(const std::string& name, tensor a, tensor g,
                      int64_t cov_updates = 1) {
  layer_factors f;
  f.layer = name;
  f.cov_updates = cov_updates;
  f.a = std::move(a);
  f.g = std::move(g);
  return f;
}

} // namespace

BOOST_AUTO_TEST_CASE(invert_layer_refuses_what_it_cannot_invert) {
  kfac_config cfg;
  cfg.min_cov_updates = 2;
  bool raised = false;
  auto early = invert_layer(factors("fc0", identity(3), identity(2), 1), cfg,
                            raised);
  auto msg = failure(early, ec::invalid_argument);
  BOOST_TEST(contains(msg, "covariance updates"), msg);
  BOOST_TEST(contains(msg, "fc0"), msg);
  cfg.min_cov_updates = 1;
  msg = failure(invert_layer(factors("fc0", mat(3, 2, {1, 0, 0, 1, 0, 0}),
                                     identity(2)),
                             cfg, raised),
                ec::bad_message);
  BOOST_TEST(contains(msg, "A must be square"), msg);
  auto nan = identity(2);
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  failure(invert_layer(factors("fc0", identity(3), nan), cfg, raised),
          ec::non_finite);
  auto f = factors("fc0", identity(3), identity(2));
  f.locations = 0;
  failure(invert_layer(f, cfg, raised), ec::bad_message);
  // Indefinite beyond what the damping retries can fix.
  cfg.max_damping_retries = 0;
  msg = failure(invert_layer(factors("fc0", diagonal({1, -5, 1}),
                                     identity(2)),
                             cfg, raised),
                ec::numerical_failure);
  BOOST_TEST(contains(msg, "factor A"), msg);
  // The eigen mode refuses a factor that is clearly not PSD.
  cfg.mode = inverse_mode::eigen;
  msg = failure(invert_layer(factors("fc0", identity(3),
                                     diagonal({1, -5})),
                             cfg, raised),
                ec::numerical_failure);
  BOOST_TEST(contains(msg, "factor G"), msg);
}

BOOST_AUTO_TEST_CASE(invert_layer_raises_the_damping_when_needed) {
  kfac_config cfg;
  cfg.damping = 1e-6f;
  cfg.max_damping_retries = 4;
  bool raised = false;
  // Slightly indefinite: the factored damping (~1e-3) is too small.
  auto inv = invert_layer(factors("fc0", diagonal({1, -0.01f, 1}),
                                  identity(2)),
                          cfg, raised);
  BOOST_REQUIRE_MESSAGE(inv, test::why(inv));
  BOOST_TEST(raised);
  auto plan = cpu::factored_damping(diagonal({1, -0.01f, 1}), identity(2),
                                    cfg.damping, 1);
  BOOST_TEST(inv->a_damping > plan.a_damping);
  BOOST_TEST(inv->g_damping == plan.g_damping);
  BOOST_TEST(!check_inverse(*inv, 3, 2));
}

BOOST_AUTO_TEST_CASE(invert_factors_keeps_going_past_a_bad_layer) {
  kfac_config cfg;
  cfg.damping = 1e-6f;
  cfg.max_damping_retries = 0;
  cfg.min_cov_updates = 2;
  factor_set set;
  set.step = 7;
  set.layers = {factors("early", identity(3), identity(2), 1),
                factors("bad", diagonal({1, -5, 1}), identity(2), 3),
                factors("good", identity(3), identity(2), 3)};
  auto inv = invert_factors(set, cfg);
  BOOST_TEST(inv.step == 7);
  BOOST_REQUIRE_EQUAL(inv.layers.size(), 1u);
  BOOST_TEST(inv.layers[0].layer == "good");
  BOOST_REQUIRE_EQUAL(inv.problems.size(), 2u);
  BOOST_TEST(contains(inv.problems[0], "early"), inv.problems[0]);
  BOOST_TEST(contains(inv.problems[1], "bad"), inv.problems[1]);
  BOOST_TEST(inv.damping_raised == 0);
}

// -- the layers' products on several threads ---------------------------------

namespace {

/// A symmetric positive definite [n, n] matrix from a seed.
matrix spd(int64_t n, unsigned seed) {
  std::srand(seed);
  matrix r = matrix::Random(n, n);
  return r * r.transpose() / static_cast<double>(n)
         + matrix::Identity(n, n);
}

} // namespace

// Five dense layers of different sizes (one without an inverse yet): on two
// threads the products run side by side, largest first, and the step is
// bit-identical to one thread's, both equal to the dense computation.
BOOST_AUTO_TEST_CASE(two_threads_precondition_the_layers_as_one_does) {
  struct shape {
    int64_t in, out;
  };
  const std::vector<shape> shapes{{40, 33}, {12, 7}, {65, 50}, {3, 2},
                                  {20, 9}};
  parameter_set params;
  std::vector<tensor> grads;
  std::vector<layer_inverse> inverses(shapes.size());
  std::vector<kfac_layer_slot> slots;
  for (size_t k = 0; k < shapes.size(); ++k) {
    auto [in, out] = shapes[k];
    auto name = "fc" + std::to_string(k);
    std::srand(static_cast<unsigned>(100 + k));
    params.push_back({name + "/w", to_tensor(matrix::Random(in, out))});
    params.push_back({name + "/b", to_tensor(matrix::Random(1, out))});
    params.back().value.reshape({out});
    grads.push_back(to_tensor(matrix::Random(in, out)));
    grads.push_back(to_tensor(matrix::Random(1, out)));
    grads.back().reshape({out});
    inverses[k].layer = name;
    inverses[k].mode = inverse_mode::cholesky;
    inverses[k].a = to_tensor(spd(in + 1, static_cast<unsigned>(k)).inverse());
    inverses[k].g = to_tensor(spd(out, static_cast<unsigned>(50 + k)).inverse());
    slots.push_back({2 * k, 2 * k + 1, k == 1 ? nullptr : &inverses[k]});
  }
  auto make = [&] {
    auto cfg = test::optimizer_of(optimizer_kind::kfac, lr);
    cfg.momentum = mu;
    auto opt = optimizer::make(cfg, params);
    BOOST_REQUIRE_MESSAGE(opt, test::why(opt));
    return std::move(*opt);
  };
  auto one = params;
  auto two = params;
  auto opt1 = make();
  auto opt2 = make();
  auto s1 = kfac_apply(opt1, one, grads, slots, cpu_kfac_inverter(), {}, 1);
  auto s2 = kfac_apply(opt2, two, grads, slots, cpu_kfac_inverter(), {}, 2);
  BOOST_REQUIRE_MESSAGE(s1, test::why(s1));
  BOOST_REQUIRE_MESSAGE(s2, test::why(s2));
  BOOST_TEST(s1->preconditioned == 4u);
  BOOST_TEST(s2->preconditioned == 4u);
  BOOST_TEST(s1->dot == s2->dot);
  double dot = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    BOOST_TEST_CONTEXT("layer " << k) {
      for (size_t v : {2 * k, 2 * k + 1})
        BOOST_TEST(std::equal(one[v].value.data(),
                              one[v].value.data() + one[v].value.size(),
                              two[v].value.data()));
      // First step from zero velocity: theta - lr * F^-1 g (plain g for the
      // layer without an inverse).
      matrix g = layer_grad(grads[2 * k], grads[2 * k + 1]);
      matrix u = g;
      if (slots[k].inverse != nullptr) {
        u = to_matrix(inverses[k].a) * g * to_matrix(inverses[k].g);
        dot += (g.array() * u.array()).sum();
      }
      matrix want = layer_grad(params[2 * k].value, params[2 * k + 1].value)
                    - lr * u;
      matrix got = layer_grad(two[2 * k].value, two[2 * k + 1].value);
      BOOST_TEST((got - want).cwiseAbs().maxCoeff()
                   <= 1e-4 * std::max(1.0, want.cwiseAbs().maxCoeff()));
    }
  }
  BOOST_TEST(s2->dot == dot, tt::tolerance(1e-4));
}

// -- the schedule and the decays under K-FAC ----------------------------------

BOOST_AUTO_TEST_CASE(the_l2_penalty_is_preconditioned_and_weight_decay_is_not) {
  // The L2 form: the step equals K-FAC's step on the gradient plus
  // l2 x weight (biases and the plain `scale` [3] are rank 1: no
  // penalty). The decoupled form: the weight shrinks by (1 - rate x wd)
  // before the preconditioned step, at the rate the schedule gives the
  // global step (warming up: half the base rate at step 0 of 2).
  auto inv = cholesky_inverse(a_inv_1(), g_inv_1());
  std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
  auto config = [](float l2, float wd) {
    auto cfg = test::optimizer_of(optimizer_kind::kfac, lr);
    cfg.momentum = mu;
    cfg.l2_penalty = l2;
    cfg.weight_decay = wd;
    cfg.schedule.warmup_steps = 2;
    auto opt = optimizer::make(cfg, variables());
    BOOST_REQUIRE_MESSAGE(opt, test::why(opt));
    opt->set_global_step(0);
    return std::move(*opt);
  };
  auto penalised = config(0.5f, 0);
  auto by_hand = config(0, 0);
  auto params = variables();
  auto ref = variables();
  BOOST_REQUIRE(kfac_apply(penalised, params, gradients(1.0f), slots));
  auto g = gradients(1.0f);
  for (int64_t k = 0; k < g[0].size(); ++k)
    g[0][k] += 0.5f * ref[0].value[k];
  BOOST_REQUIRE(kfac_apply(by_hand, ref, g, slots));
  for (size_t i = 0; i < params.size(); ++i)
    require_close(params[i].value, as_vector(ref[i].value), params[i].name);
  BOOST_TEST(penalised.rate() == lr / 2);

  auto decayed = config(0, 0.1f);
  auto plain = config(0, 0);
  auto shrunk = variables();
  auto kept = variables();
  for (int64_t k = 0; k < kept[0].value.size(); ++k)
    kept[0].value[k] *= 1.0f - (lr / 2) * 0.1f;
  BOOST_REQUIRE(kfac_apply(decayed, shrunk, gradients(1.0f), slots));
  BOOST_REQUIRE(kfac_apply(plain, kept, gradients(1.0f), slots));
  for (size_t i = 0; i < shrunk.size(); ++i)
    require_close(shrunk[i].value, as_vector(kept[i].value), shrunk[i].name);
}

BOOST_AUTO_TEST_CASE(a_clipped_gradient_is_scaled_before_the_preconditioning) {
  // --clip_norm's factor multiplies the averaged gradient itself: the
  // step equals K-FAC's step on factor x gradient, the L2 penalty joining
  // unscaled, and the momentum of a variable without an inverse ([3]
  // `scale`) carries the scaled gradient too.
  auto inv = cholesky_inverse(a_inv_1(), g_inv_1());
  std::vector<kfac_layer_slot> slots{{0, 1, &inv}};
  auto config = [] {
    auto cfg = test::optimizer_of(optimizer_kind::kfac, lr);
    cfg.momentum = mu;
    cfg.l2_penalty = 0.5f;
    auto opt = optimizer::make(cfg, variables());
    BOOST_REQUIRE_MESSAGE(opt, test::why(opt));
    return std::move(*opt);
  };
  auto clipped = config();
  clipped.set_gradient_scale(0.25f);
  auto by_hand = config();
  auto params = variables();
  auto ref = variables();
  BOOST_REQUIRE(kfac_apply(clipped, params, gradients(1.0f), slots));
  auto g = gradients(1.0f);
  for (auto& x : g)
    for (int64_t k = 0; k < x.size(); ++k)
      x[k] *= 0.25f;
  BOOST_REQUIRE(kfac_apply(by_hand, ref, g, slots));
  for (size_t i = 0; i < params.size(); ++i)
    require_close(params[i].value, as_vector(ref[i].value), params[i].name);
  // And it differs from the unclipped step (the test can fail).
  auto plain = config();
  auto unclipped = variables();
  BOOST_REQUIRE(kfac_apply(plain, unclipped, gradients(1.0f), slots));
  BOOST_TEST(std::abs(unclipped[0].value[0] - params[0].value[0]) > 1e-4);
}
