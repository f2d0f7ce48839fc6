// The K-FAC kernels of the CUDA backend against the CPU ones: damped
// inverses and Cholesky factors (round trips on ill-conditioned factors),
// eigendecompositions, the three preconditioning products, the factor
// statistics, and the error paths (a factor that is not positive definite
// is reported, not a crash); the statistics and preconditioning of the
// CUDA kfac_inverter (what layer_statistics and precondition_layer call)
// against the CPU functions; and the runtime's inversions (invert_factors)
// and preconditioning (precondition_layer) through the CUDA inverter
// against the CPU. Exits 77 (skipped) without a CUDA device.

#define BOOST_TEST_MODULE kernels_cuda_kfac
#include "tests/kernels/cuda_test_utils.hpp"

#include "kernels/backend_factory.hpp"
#include "kernels/cpu/kfac_factors.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/kfac_inverter.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/cuda_inverse_sets.hpp"
#include "tests/kernels/preconditioning_inputs.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// max |(F + d I) X - I| in double.
double round_trip_error(const tensor& f, float damping, const tensor& x) {
  auto n = f.dim(0);
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = double{damping} * double{x[i * n + j]};
      for (int64_t k = 0; k < n; ++k)
        sum += double{f[i * n + k]} * double{x[k * n + j]};
      worst = std::max(worst, std::abs(sum - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

/// preconditioning_inputs of two full-rank Gram factors, [41, 41] of 60
/// rows and [13, 13] of 30, with a gradient [41, 13].
preconditioning_inputs gram_preconditioning_inputs(std::mt19937& rng) {
  auto A = gram(41, 60, rng);
  auto G = gram(13, 30, rng);
  return {A, G, random_tensor({41, 13}, rng)};
}

/// precondition_factored of `gpu` (the CUDA kernels, or an inverter on
/// them) against the CPU's, on `in`.
template <class Kernels>
void check_factored_matches_cpu(Kernels& gpu,
                                const preconditioning_inputs& in) {
  tensor out_gpu, out_cpu;
  SYNCFAC_REQUIRE_OK(
    gpu.precondition_factored(in.grad, in.A_inv, in.G_inv, 0.25f, out_gpu));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(in.grad, in.A_inv, in.G_inv, 0.25f, out_cpu));
  check_close(out_gpu, out_cpu, 1e-4 * max_abs(out_cpu), 1e-4, "factored");
}

/// hard_factor_set() in `mode`, inverted by `inverter` and by the CPU.
struct inverted_both_ways {
  factor_set set;
  kfac_config cfg;
  inverse_set on_gpu;
  inverse_set on_cpu;
};

inverted_both_ways invert_on_both(kfac_inverter& inverter, std::mt19937& rng,
                                  inverse_mode mode) {
  inverted_both_ways out;
  out.set = hard_factor_set(rng);
  out.cfg = hard_factor_config(mode);
  out.on_gpu = invert_factors(out.set, out.cfg, inverter);
  out.on_cpu = invert_factors(out.set, out.cfg);
  return out;
}

/// The GPU inverter under test: on a GPU, the one make_kfac_inverter picks
/// for a gpu:0 backend (a backend of its own next to the fixture's); in the
/// self-check, the CUDA adapter over the fixture's CPU stand-in kernels.
std::shared_ptr<kfac_inverter> gpu_inverter(cuda_fixture& fx) {
#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
  return make_cuda_kfac_inverter(*fx.kfac, "cuda:0");
#else
  (void) fx;
  auto dev = make_device_backend("gpu:0", 1);
  BOOST_REQUIRE_MESSAGE(dev, "gpu:0: " << why(dev));
  auto made = make_kfac_inverter(*dev);
  BOOST_REQUIRE_MESSAGE(made, "gpu:0: " << why(made));
  return *made;
#endif
}

/// One statistics call's outputs.
struct factor_stats {
  tensor A;
  tensor G;
  gram_rows A_rows;
  gram_rows G_rows;
};

/// Matrices within the factor_statistics_match_cpu tolerances, rows equal
/// (gathered on the host by the same code), the same ones empty.
void check_stats_close(const factor_stats& got, const factor_stats& want,
                       const std::string& what) {
  check_close(got.A, want.A, 1e-5 * max_abs(want.A), 1e-4, what + " A");
  check_close(got.G, want.G, 1e-5 * max_abs(want.G), 1e-4, what + " G");
  BOOST_CHECK_MESSAGE(got.A_rows.x == want.A_rows.x, what << " A rows");
  BOOST_CHECK_EQUAL(got.A_rows.scale, want.A_rows.scale);
  BOOST_CHECK_MESSAGE(got.G_rows.x == want.G_rows.x, what << " G rows");
  BOOST_CHECK_EQUAL(got.G_rows.scale, want.G_rows.scale);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(cuda_kfac, cuda_fixture)

BOOST_AUTO_TEST_CASE(damped_inverse_matches_cpu) {
  for (auto [n, m] : {std::pair{1, 4}, std::pair{7, 3}, std::pair{64, 200},
                      std::pair{301, 100}}) {
    BOOST_TEST_CONTEXT("n " << n << " m " << m) {
      auto f = gram(n, m, rng);
      tensor inv_gpu, inv_cpu;
      SYNCFAC_REQUIRE_OK(kfac->damped_inverse(f, 1e-2f, inv_gpu));
      SYNCFAC_REQUIRE_OK(cpu::damped_inverse(f, 1e-2f, inv_cpu));
      check_close(inv_gpu, inv_cpu, 1e-5 * max_abs(inv_cpu), 1e-4,
                  "damped inverse");
      // Exactly symmetric, as on the CPU.
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j)
          BOOST_REQUIRE_EQUAL(inv_gpu[i * n + j], inv_gpu[j * n + i]);
      BOOST_CHECK_LE(round_trip_error(f, 1e-2f, inv_gpu),
                     2.0 * round_trip_error(f, 1e-2f, inv_cpu) + 1e-4);
      tensor l_gpu, l_cpu;
      SYNCFAC_REQUIRE_OK(kfac->damped_cholesky(f, 1e-2f, l_gpu));
      SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(f, 1e-2f, l_cpu));
      check_close(l_gpu, l_cpu, 1e-6 * max_abs(l_cpu), 1e-5, "cholesky");
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j)
          BOOST_REQUIRE_EQUAL(l_gpu[i * n + j], 0.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(inverse_round_trip_on_ill_conditioned_factors) {
  // Condition numbers 1e4 and 1e5. The factorisation runs in double, but
  // the inverse is stored as float, so the round trip (F + dI) X - I is
  // about sqrt(n) · cond · 6e-8 on either device: the GPU must do as well
  // as the CPU, and stay within that bound.
  for (auto [n, smallest, tol] : {std::tuple{50, 1e-4, 5e-2},
                                  std::tuple{200, 1e-5, 1.0}}) {
    BOOST_TEST_CONTEXT("n " << n << " smallest eigenvalue " << smallest) {
      auto f = ill_conditioned(n, smallest, rng);
      tensor inv_gpu, inv_cpu;
      SYNCFAC_REQUIRE_OK(kfac->damped_inverse(f, 1e-7f, inv_gpu));
      SYNCFAC_REQUIRE_OK(cpu::damped_inverse(f, 1e-7f, inv_cpu));
      auto err_gpu = round_trip_error(f, 1e-7f, inv_gpu);
      auto err_cpu = round_trip_error(f, 1e-7f, inv_cpu);
      BOOST_TEST_MESSAGE("round trip n " << n << ": gpu " << err_gpu
                                         << ", cpu " << err_cpu);
      BOOST_CHECK_LT(err_gpu, tol);
      BOOST_CHECK_LE(err_gpu, 2.0 * err_cpu + 1e-4);
      check_close(inv_gpu, inv_cpu, 1e-4 * max_abs(inv_cpu), 1e-3,
                  "ill-conditioned inverse");
    }
  }
  // A large factor (the product by the CPU backend: a naive triple loop
  // would take longer than the rest of the suite).
  auto x = random_tensor({4096, 2048}, rng);
  tensor f;
  SYNCFAC_REQUIRE_OK(cpu->gemm(x, true, x, false, 1.0f / 4096, 0.0f, f));
  tensor inv_gpu, inv_cpu;
  SYNCFAC_REQUIRE_OK(kfac->damped_inverse(f, 1e-3f, inv_gpu));
  SYNCFAC_REQUIRE_OK(cpu::damped_inverse(f, 1e-3f, inv_cpu));
  check_close(inv_gpu, inv_cpu, 1e-4 * max_abs(inv_cpu), 1e-3,
              "inverse 2048");
}

BOOST_AUTO_TEST_CASE(not_positive_definite_is_reported) {
  auto n = int64_t{5};
  tensor neg({n, n});
  for (int64_t i = 0; i < n; ++i)
    neg[i * n + i] = -1.0f;
  tensor out({1});
  auto err = kfac->damped_inverse(neg, 0.0f, out);
  check_error(err, ec::numerical_failure,
              {"damped_inverse", "dimension 5", "not positive definite"});
  BOOST_CHECK_EQUAL(out.size(), 1); // untouched
  check_error(kfac->damped_cholesky(neg, 0.0f, out), ec::numerical_failure,
              {"damped_cholesky", "dimension 5"});
  // All zeros with no damping: the pivots are zero (the round-off test).
  tensor zero({n, n});
  check_error(kfac->damped_inverse(zero, 0.0f, out), ec::numerical_failure,
              {"dimension 5"});
  // The retry raises the damping exactly as the CPU's does.
  tensor inv_gpu, inv_cpu;
  auto d_gpu = kfac->damped_inverse_with_retry(zero, 0.0f, 3, inv_gpu);
  auto d_cpu = cpu::damped_inverse_with_retry(zero, 0.0f, 3, inv_cpu);
  BOOST_REQUIRE(d_gpu && d_cpu);
  BOOST_CHECK_EQUAL(*d_gpu, *d_cpu);
  check_close(inv_gpu, inv_cpu, 1e-3, 1e-5, "retried inverse");
  auto fail = kfac->damped_inverse_with_retry(neg, 0.0f, 1, inv_gpu);
  BOOST_REQUIRE(!fail);
  check_error(fail.error(), ec::numerical_failure, {"retries"});
  // The device is fine afterwards.
  auto f = gram(9, 20, rng);
  SYNCFAC_REQUIRE_OK(kfac->damped_inverse(f, 1e-3f, out));
  BOOST_CHECK_LT(round_trip_error(f, 1e-3f, out), 1e-3);
}

BOOST_AUTO_TEST_CASE(argument_errors_match_cpu) {
  tensor out;
  auto rect = random_tensor({3, 4}, rng);
  check_error(kfac->damped_inverse(rect, 0.1f, out), ec::shape_mismatch,
              {"[3, 4]"});
  auto f = gram(4, 8, rng);
  f[5] = std::numeric_limits<float>::quiet_NaN();
  auto e_gpu = kfac->damped_inverse(f, 0.1f, out);
  auto e_cpu = cpu::damped_inverse(f, 0.1f, out);
  check_error(e_gpu, ec::non_finite, {"index 5"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  auto g = gram(4, 8, rng);
  check_error(kfac->damped_inverse(g, -1.0f, out), ec::invalid_argument,
              {"damping"});
}

BOOST_AUTO_TEST_CASE(symmetric_eigen_matches_cpu) {
  for (auto [n, m] : {std::pair{1, 2}, std::pair{16, 8}, std::pair{150, 400}}) {
    BOOST_TEST_CONTEXT("n " << n) {
      auto f = gram(n, m, rng);
      tensor e_gpu, q_gpu, e_cpu, q_cpu;
      SYNCFAC_REQUIRE_OK(kfac->symmetric_eigen(f, e_gpu, q_gpu));
      SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(f, e_cpu, q_cpu));
      check_close(e_gpu, e_cpu, 1e-5 * max_abs(e_cpu), 1e-4, "eigenvalues");
      // Eigenvectors are unique up to sign: compare Q diag(e) Qᵀ and QᵀQ.
      double worst_f = 0.0;
      double worst_i = 0.0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double rec = 0.0;
          double orth = 0.0;
          for (int64_t k = 0; k < n; ++k) {
            rec += double{q_gpu[i * n + k]} * e_gpu[k] * q_gpu[j * n + k];
            orth += double{q_gpu[k * n + i]} * q_gpu[k * n + j];
          }
          worst_f = std::max(worst_f, std::abs(rec - f[i * n + j]));
          worst_i = std::max(worst_i, std::abs(orth - (i == j ? 1.0 : 0.0)));
        }
      BOOST_CHECK_LT(worst_f, 1e-4 * std::max(1.0, max_abs(f)));
      BOOST_CHECK_LT(worst_i, 1e-4);
    }
  }
  auto n = int64_t{4};
  tensor neg({n, n});
  for (int64_t i = 0; i < n; ++i)
    neg[i * n + i] = i == 0 ? -1.0f : 1.0f;
  tensor e, q;
  check_error(kfac->symmetric_eigen(neg, e, q), ec::numerical_failure,
              {"not positive semi-definite"});
}

BOOST_AUTO_TEST_CASE(preconditioning_matches_cpu) {
  auto in = gram_preconditioning_inputs(rng);
  check_factored_matches_cpu(*kfac, in);
  tensor out_gpu, out_cpu;
  SYNCFAC_REQUIRE_OK(
    kfac->precondition_cholesky(in.grad, in.LA, in.LG, 0.25f, out_gpu));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_cholesky(in.grad, in.LA, in.LG, 0.25f, out_cpu));
  check_close(out_gpu, out_cpu, 1e-4 * max_abs(out_cpu), 1e-4, "cholesky");
  // Both forms agree (the same damped factors).
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(in.grad, in.A_inv, in.G_inv, 0.25f, out_cpu));
  check_close(out_gpu, out_cpu, 1e-3 * max_abs(out_cpu), 1e-3,
              "cholesky vs inverses");

  SYNCFAC_REQUIRE_OK(kfac->precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                              in.eG, 1e-3f, 4, out_gpu));
  SYNCFAC_REQUIRE_OK(cpu::precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                             in.eG, 1e-3f, 4, out_cpu));
  check_close(out_gpu, out_cpu, 1e-4 * max_abs(out_cpu), 1e-3, "eigen");

  // Errors as on the CPU.
  tensor bad_l = in.LA;
  bad_l[0] = -1.0f;
  auto e_gpu = kfac->precondition_cholesky(in.grad, bad_l, in.LG, 1.0f,
                                           out_gpu);
  auto e_cpu = cpu::precondition_cholesky(in.grad, bad_l, in.LG, 1.0f,
                                          out_cpu);
  check_error(e_gpu, ec::numerical_failure, {"LA has pivot"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  tensor zero_e(in.eA.shape());
  e_gpu = kfac->precondition_eigen(in.grad, in.QA, zero_e, in.QG, in.eG,
                                   0.0f, 1, out_gpu);
  check_error(e_gpu, ec::numerical_failure, {"not positive"});
  auto wrong = random_tensor(in.G_inv.shape(), rng);
  check_error(
    kfac->precondition_factored(in.grad, wrong, in.G_inv, 1.0f, out_gpu),
    ec::shape_mismatch, {"A_inv"});
}

BOOST_AUTO_TEST_CASE(factor_statistics_match_cpu) {
  for (bool bias : {false, true}) {
    BOOST_TEST_CONTEXT("bias " << bias) {
      layer_inputs in{rng};
      for (int64_t examples : {int64_t{0}, int64_t{16}}) {
        factor_sampling s;
        s.max_examples = examples;
        tensor A_g, G_g, A_c, G_c;
        SYNCFAC_REQUIRE_OK(
          kfac->dense_factors(in.input, in.ds, bias, s, 1, A_g, G_g));
        SYNCFAC_REQUIRE_OK(
          cpu::dense_factors(in.input, in.ds, bias, s, 1, A_c, G_c));
        check_close(A_g, A_c, 1e-5 * max_abs(A_c), 1e-4, "dense A");
        check_close(G_g, G_c, 1e-5 * max_abs(G_c), 1e-4, "dense G");
      }
      for (auto [examples, locations] :
           {std::pair{int64_t{0}, int64_t{0}},
            std::pair{int64_t{4}, int64_t{20}}}) {
        factor_sampling s;
        s.max_examples = examples;
        s.max_locations = locations;
        s.seed = 7;
        tensor A_g, G_g, A_c, G_c;
        SYNCFAC_REQUIRE_OK(kfac->conv_factors(in.geometry, in.x, in.conv_ds,
                                              bias, s, 1, A_g, G_g));
        SYNCFAC_REQUIRE_OK(cpu::conv_factors(in.geometry, in.x, in.conv_ds,
                                             bias, s, 1, A_c, G_c));
        check_close(A_g, A_c, 1e-5 * max_abs(A_c), 1e-4, "conv A");
        check_close(G_g, G_c, 1e-5 * max_abs(G_c), 1e-4, "conv G");
      }
    }
  }
  // A layer without inputs or outputs: empty factors, as on the CPU (cuBLAS
  // refuses a SYRK of width 0 with its leading dimension 0).
  for (auto [in, out] : {std::pair{int64_t{0}, int64_t{3}},
                         std::pair{int64_t{4}, int64_t{0}}}) {
    BOOST_TEST_CONTEXT("dense " << in << " -> " << out) {
      auto x0 = random_tensor({5, in}, rng);
      auto ds0 = random_tensor({5, out}, rng);
      tensor A_g, G_g, A_c, G_c;
      SYNCFAC_REQUIRE_OK(kfac->dense_factors(x0, ds0, false, {}, 1, A_g, G_g));
      SYNCFAC_REQUIRE_OK(cpu::dense_factors(x0, ds0, false, {}, 1, A_c, G_c));
      check_close(A_g, A_c, 1e-5 * max_abs(A_c), 1e-4, "empty dense A");
      check_close(G_g, G_c, 1e-5 * max_abs(G_c), 1e-4, "empty dense G");
    }
  }
  tensor A, G;
  auto input = random_tensor({4, 3}, rng);
  auto ds = random_tensor({5, 2}, rng);
  check_error(kfac->dense_factors(input, ds, true, {}, 1, A, G),
              ec::shape_mismatch, {"[4, 3]", "[5, 2]"});
}

BOOST_AUTO_TEST_CASE(inverter_statistics_match_cpu) {
  auto k = gpu_inverter(*this);
  BOOST_CHECK(!k->concurrent());
  layer_inputs in{rng};
  // 37 rows: both factors are matrices; 16: A comes as rows, G as a
  // matrix; 8: both as rows.
  for (int64_t examples : {0, 16, 8}) {
    BOOST_TEST_CONTEXT("dense, examples " << examples) {
      factor_sampling s;
      s.max_examples = examples;
      factor_stats got, want;
      SYNCFAC_REQUIRE_OK(
        k->dense_factors(in.input, in.ds, true, s, 1, got.A, got.G));
      SYNCFAC_REQUIRE_OK(
        cpu::dense_factors(in.input, in.ds, true, s, 1, want.A, want.G));
      check_stats_close(got, want, "dense");
      SYNCFAC_REQUIRE_OK(k->dense_factors(in.input, in.ds, true, s, 1,
                                          got.A, got.G, got.A_rows,
                                          got.G_rows));
      SYNCFAC_REQUIRE_OK(cpu::dense_factors(in.input, in.ds, true, s, 1,
                                            want.A, want.G, want.A_rows,
                                            want.G_rows));
      check_stats_close(got, want, "dense with rows");
    }
  }
  // 1176 rows (matrices), 80 (A as rows) and 8 (both as rows).
  for (auto [examples, locations] :
       {std::pair{int64_t{0}, int64_t{0}}, std::pair{int64_t{4}, int64_t{20}},
        std::pair{int64_t{2}, int64_t{4}}}) {
    BOOST_TEST_CONTEXT("conv, examples " << examples << ", locations "
                                         << locations) {
      factor_sampling s;
      s.max_examples = examples;
      s.max_locations = locations;
      s.seed = 3;
      factor_stats got, want;
      SYNCFAC_REQUIRE_OK(k->conv_factors(in.geometry, in.x, in.conv_ds, true,
                                         s, 1, got.A, got.G));
      SYNCFAC_REQUIRE_OK(cpu::conv_factors(in.geometry, in.x, in.conv_ds,
                                           true, s, 1, want.A, want.G));
      check_stats_close(got, want, "conv");
      SYNCFAC_REQUIRE_OK(k->conv_factors(in.geometry, in.x, in.conv_ds, true,
                                         s, 1, got.A, got.G, got.A_rows,
                                         got.G_rows));
      SYNCFAC_REQUIRE_OK(cpu::conv_factors(in.geometry, in.x, in.conv_ds,
                                           true, s, 1, want.A, want.G,
                                           want.A_rows, want.G_rows));
      check_stats_close(got, want, "conv with rows");
    }
  }
  // Errors as on the CPU, with rows or without.
  auto short_ds = random_tensor({36, 11}, rng);
  factor_stats got, want;
  auto e_gpu = k->dense_factors(in.input, short_ds, true, {}, 1, got.A,
                                got.G, got.A_rows, got.G_rows);
  auto e_cpu = cpu::dense_factors(in.input, short_ds, true, {}, 1, want.A,
                                  want.G, want.A_rows, want.G_rows);
  check_error(e_gpu, ec::shape_mismatch, {"[37, 23]", "[36, 11]"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
}

BOOST_AUTO_TEST_CASE(inverter_preconditioning_matches_cpu) {
  auto k = gpu_inverter(*this);
  auto in = gram_preconditioning_inputs(rng);
  check_factored_matches_cpu(*k, in);
  tensor out_gpu, out_cpu;
  // precondition_layer passes trusted factors.
  for (auto scan : {cpu::factor_scan::scan, cpu::factor_scan::trusted}) {
    SYNCFAC_REQUIRE_OK(k->precondition_cholesky(in.grad, in.LA, in.LG, 0.25f,
                                                out_gpu, scan));
    SYNCFAC_REQUIRE_OK(cpu::precondition_cholesky(in.grad, in.LA, in.LG,
                                                  0.25f, out_cpu, scan));
    check_close(out_gpu, out_cpu, 1e-4 * max_abs(out_cpu), 1e-4,
                "cholesky");
    SYNCFAC_REQUIRE_OK(k->precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                             in.eG, 1e-3f, 4, out_gpu, scan));
    SYNCFAC_REQUIRE_OK(cpu::precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                               in.eG, 1e-3f, 4, out_cpu,
                                               scan));
    check_close(out_gpu, out_cpu, 1e-4 * max_abs(out_cpu), 1e-3, "eigen");
  }
  tensor bad_l = in.LA;
  bad_l[0] = -1.0f;
  auto e_gpu = k->precondition_cholesky(in.grad, bad_l, in.LG, 1.0f, out_gpu,
                                        cpu::factor_scan::scan);
  auto e_cpu = cpu::precondition_cholesky(in.grad, bad_l, in.LG, 1.0f,
                                          out_cpu);
  check_error(e_gpu, ec::numerical_failure, {"LA has pivot"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
}

BOOST_AUTO_TEST_CASE(invert_factors_on_the_gpu_matches_cpu) {
  auto inverter = gpu_inverter(*this);
  BOOST_CHECK_EQUAL(inverter->device(), "cuda:0");
  auto [set, cfg, on_gpu, on_cpu] = invert_on_both(*inverter, rng,
                                                   inverse_mode::cholesky);
  // Preconditioned on the GPU too.
  check_inverse_sets_close(on_gpu, on_cpu, 1e-5, rng, *inverter);
  // What the CPU tests (tests/runtime/kfac_update.cpp) expect of these
  // factors, on the GPU: the indefinite layer is inverted with more
  // damping, the hopeless one reported, and the others go on.
  BOOST_REQUIRE_EQUAL(on_gpu.layers.size(), 3u);
  BOOST_CHECK_EQUAL(on_gpu.layers[2].layer, "indefinite");
  auto plan = cpu::factored_damping(set.layers[2].a, set.layers[2].g,
                                    cfg.damping, 1);
  BOOST_CHECK_GT(on_gpu.layers[2].a_damping, plan.a_damping);
  BOOST_CHECK_EQUAL(on_gpu.layers[2].g_damping, plan.g_damping);
  BOOST_CHECK_EQUAL(on_gpu.damping_raised, 1);
  BOOST_REQUIRE_EQUAL(on_gpu.problems.size(), 1u);
  const auto& problem = on_gpu.problems[0];
  BOOST_CHECK_MESSAGE(contains(problem, "numerical_failure")
                        && contains(problem, "layer 'hopeless', factor G")
                        && contains(problem, "retries"),
                      problem);
  // The device is fine afterwards: the same answer again.
  auto again = invert_factors(set, cfg, *inverter);
  check_inverse_sets_close(again, on_cpu, 1e-5, rng);
}

BOOST_AUTO_TEST_CASE(invert_factors_on_the_gpu_matches_cpu_in_eigen_mode) {
  auto inverter = gpu_inverter(*this);
  auto [set, cfg, on_gpu, on_cpu] = invert_on_both(*inverter, rng,
                                                   inverse_mode::eigen);
  // Looser than the Cholesky mode: the preconditioning divides by
  // eigenvalues down to λ, which magnifies the eigenvectors' rounding.
  check_inverse_sets_close(on_gpu, on_cpu, 1e-4, rng, *inverter);
  BOOST_REQUIRE_EQUAL(on_gpu.layers.size(), 2u);
  BOOST_REQUIRE_EQUAL(on_gpu.problems.size(), 2u);
  BOOST_CHECK_MESSAGE(contains(on_gpu.problems[0],
                               "layer 'indefinite', factor A")
                        && contains(on_gpu.problems[0],
                                    "not positive semi-definite"),
                      on_gpu.problems[0]);
  BOOST_CHECK_MESSAGE(contains(on_gpu.problems[1],
                               "layer 'hopeless', factor G"),
                      on_gpu.problems[1]);
}

BOOST_AUTO_TEST_SUITE_END()
