// The K-FAC kernels a device gets (kernels/kfac_inverter.hpp): the CPU
// kernels for the CPU backend, bit for bit the cpu:: functions (statistics,
// inversions, preconditioning); an error naming the device, never the CPU
// kernels, for a backend without K-FAC kernels of its own; and what the
// CUDA adapter sends to the device kernels and what it leaves on the CPU
// (with recording stand-in kernels, so in every build). The CUDA kernels
// against the CPU ones are in cuda_kfac.cpp.

#define BOOST_TEST_MODULE kernels_kfac_inverter
#include <boost/test/unit_test.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kfac_factors.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/kfac_inverter.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/kernel_test_utils.hpp"
#include "tests/kernels/preconditioning_inputs.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// A backend that only has a name: what a GPU backend without K-FAC
/// kernels looks like to make_kfac_inverter.
class named_backend final : public backend {
public:
  explicit named_backend(std::string name) : name_(std::move(name)) {
    // nop
  }

  std::string name() const override {
    return name_;
  }

  int threads() const override {
    return 1;
  }

  caf::error gemm(const tensor&, bool, const tensor&, bool, float, float,
                  tensor&) override {
    return unsupported();
  }

  caf::error gemm_batched(const tensor&, bool, const tensor&, bool, float,
                          float, tensor&) override {
    return unsupported();
  }

  caf::error dense_forward(const tensor&, const tensor&, const tensor&,
                           activation, tensor&) override {
    return unsupported();
  }

  caf::error dense_backward(const tensor&, const tensor&, const tensor&,
                            const tensor&, activation, tensor&, tensor&,
                            tensor&, tensor*) override {
    return unsupported();
  }

  caf::error conv2d_forward(const conv2d_geometry&, const tensor&,
                            const tensor&, const tensor&, activation,
                            tensor&) override {
    return unsupported();
  }

  caf::error conv2d_backward(const conv2d_geometry&, const tensor&,
                             const tensor&, const tensor&, const tensor&,
                             activation, tensor&, tensor&, tensor&,
                             tensor*) override {
    return unsupported();
  }

  caf::error activation_forward(activation, const tensor&, tensor&) override {
    return unsupported();
  }

  caf::error activation_backward(activation, const tensor&, const tensor&,
                                 tensor&) override {
    return unsupported();
  }

  caf::error max_pool_forward(const pool2d_geometry&, const tensor&, tensor&,
                              std::vector<int32_t>&) override {
    return unsupported();
  }

  caf::error max_pool_backward(const pool2d_geometry&, const tensor&,
                               const std::vector<int32_t>&,
                               tensor&) override {
    return unsupported();
  }

  caf::error softmax_xent_forward(const tensor&, const label_vector&,
                                  tensor&, float&) override {
    return unsupported();
  }

  caf::error softmax_xent_backward(const tensor&, const label_vector&,
                                   tensor&) override {
    return unsupported();
  }

  caf::error sigmoid_xent_forward(const tensor&, const tensor&, tensor&,
                                  float&) override {
    return unsupported();
  }

  caf::error sigmoid_xent_backward(const tensor&, const tensor&,
                                   tensor&) override {
    return unsupported();
  }

  caf::expected<int64_t> count_correct(const tensor&,
                                       const label_vector&) override {
    return unsupported();
  }

private:
  caf::error unsupported() const {
    return make_error(ec::unavailable, name_ + ": no kernels");
  }

  std::string name_;
};

/// A symmetric positive definite [n, n] factor.
tensor spd(int64_t n, std::mt19937& rng) {
  auto x = random_tensor({n, n}, rng);
  tensor result({n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = i == j ? 0.1 : 0.0;
      for (int64_t k = 0; k < n; ++k)
        sum += double{x[i * n + k]} * double{x[j * n + k]};
      result[i * n + j] = static_cast<float>(sum / static_cast<double>(n));
    }
  return result;
}

/// cuda::kfac_kernels that run the CPU functions and count the calls: what
/// the CUDA adapter hands to the device.
class recording_kernels final : public cuda::kfac_kernels {
public:
  int statistics = 0;
  int preconditioning = 0;
  int inversions = 0;

  caf::error damped_inverse(const tensor& f, float d, tensor& o) override {
    ++inversions;
    return cpu::damped_inverse(f, d, o);
  }

  caf::error damped_cholesky(const tensor& f, float d, tensor& o) override {
    ++inversions;
    return cpu::damped_cholesky(f, d, o);
  }

  caf::error symmetric_eigen(const tensor& f, tensor& e,
                             tensor& q) override {
    ++inversions;
    return cpu::symmetric_eigen(f, e, q);
  }

  caf::error precondition_factored(const tensor& g, const tensor& a,
                                   const tensor& b, float s,
                                   tensor& o) override {
    ++preconditioning;
    return cpu::precondition_factored(g, a, b, s, o);
  }

  caf::error precondition_cholesky(const tensor& g, const tensor& a,
                                   const tensor& b, float s,
                                   tensor& o) override {
    ++preconditioning;
    return cpu::precondition_cholesky(g, a, b, s, o);
  }

  caf::error precondition_eigen(const tensor& g, const tensor& qa,
                                const tensor& ea, const tensor& qg,
                                const tensor& eg, float l, int64_t t,
                                tensor& o) override {
    ++preconditioning;
    return cpu::precondition_eigen(g, qa, ea, qg, eg, l, t, o);
  }

  caf::error dense_factors(const tensor& x, const tensor& ds, bool b,
                           const factor_sampling& s, int t, tensor& A,
                           tensor& G) override {
    ++statistics;
    return cpu::dense_factors(x, ds, b, s, t, A, G);
  }

  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool b,
                          const factor_sampling& s, int t, tensor& A,
                          tensor& G) override {
    ++statistics;
    return cpu::conv_factors(g, x, ds, b, s, t, A, G);
  }

  caf::error reserve_workspace(int64_t) override {
    return caf::none;
  }
};

/// The outputs of one statistics call.
struct stats_out {
  caf::error err;
  tensor A;
  tensor G;
  gram_rows A_rows;
  gram_rows G_rows;
};

void check_same(const stats_out& got, const stats_out& want) {
  BOOST_CHECK_EQUAL(render(got.err), render(want.err));
  BOOST_CHECK(got.A == want.A);
  BOOST_CHECK(got.G == want.G);
  BOOST_CHECK(got.A_rows.x == want.A_rows.x);
  BOOST_CHECK_EQUAL(got.A_rows.scale, want.A_rows.scale);
  BOOST_CHECK(got.G_rows.x == want.G_rows.x);
  BOOST_CHECK_EQUAL(got.G_rows.scale, want.G_rows.scale);
}

factor_sampling sampling(int64_t examples, int64_t locations = 0) {
  factor_sampling s;
  s.max_examples = examples;
  s.max_locations = locations;
  s.seed = 11;
  return s;
}

/// Dense statistics by `k` and by the cpu:: function: matrices, then with
/// rows.
std::pair<stats_out, stats_out> dense_both(kfac_inverter& k,
                                           const layer_inputs& in,
                                           const factor_sampling& s,
                                           int threads, bool rows) {
  stats_out got, want;
  if (rows) {
    got.err = k.dense_factors(in.input, in.ds, true, s, threads, got.A,
                              got.G, got.A_rows, got.G_rows);
    want.err = cpu::dense_factors(in.input, in.ds, true, s, threads, want.A,
                                  want.G, want.A_rows, want.G_rows);
  } else {
    got.err = k.dense_factors(in.input, in.ds, true, s, threads, got.A,
                              got.G);
    want.err = cpu::dense_factors(in.input, in.ds, true, s, threads, want.A,
                                  want.G);
  }
  return {std::move(got), std::move(want)};
}

std::pair<stats_out, stats_out> conv_both(kfac_inverter& k,
                                          const layer_inputs& in,
                                          const factor_sampling& s,
                                          int threads, bool rows) {
  stats_out got, want;
  const auto& g = in.geometry;
  if (rows) {
    got.err = k.conv_factors(g, in.x, in.conv_ds, true, s, threads, got.A,
                             got.G, got.A_rows, got.G_rows);
    want.err = cpu::conv_factors(g, in.x, in.conv_ds, true, s, threads,
                                 want.A, want.G, want.A_rows, want.G_rows);
  } else {
    got.err = k.conv_factors(g, in.x, in.conv_ds, true, s, threads, got.A,
                             got.G);
    want.err = cpu::conv_factors(g, in.x, in.conv_ds, true, s, threads,
                                 want.A, want.G);
  }
  return {std::move(got), std::move(want)};
}

/// preconditioning_inputs of random factors, with a gradient [19, 7].
preconditioning_inputs random_preconditioning_inputs(std::mt19937& rng) {
  auto A = spd(19, rng);
  auto G = spd(7, rng);
  return {A, G, random_tensor({19, 7}, rng)};
}

} // namespace

BOOST_AUTO_TEST_CASE(the_cpu_backend_gets_the_cpu_kernels_bit_for_bit) {
  auto made = make_kfac_inverter(make_cpu_backend(2));
  BOOST_REQUIRE_MESSAGE(made, why(made));
  auto& inverter = **made;
  BOOST_CHECK_EQUAL(inverter.device(), "cpu");
  BOOST_CHECK_EQUAL(cpu_kfac_inverter().device(), "cpu");
  std::mt19937 rng{3};
  auto f = spd(17, rng);
  tensor lower, lower_cpu;
  auto d = inverter.damped_cholesky_with_retry(f, 1e-3f, 2, lower);
  auto d_cpu = cpu::damped_cholesky_with_retry(f, 1e-3f, 2, lower_cpu);
  BOOST_REQUIRE(d && d_cpu);
  BOOST_CHECK_EQUAL(*d, *d_cpu);
  BOOST_CHECK(lower == lower_cpu);
  tensor e, q, e_cpu, q_cpu;
  BOOST_REQUIRE(!inverter.symmetric_eigen(f, e, q));
  BOOST_REQUIRE(!cpu::symmetric_eigen(f, e_cpu, q_cpu));
  BOOST_CHECK(e == e_cpu);
  BOOST_CHECK(q == q_cpu);
  // Errors pass through unchanged.
  tensor neg({2, 2}, {-1.0f, 0.0f, 0.0f, -1.0f});
  auto fail = inverter.damped_cholesky_with_retry(neg, 0.0f, 1, lower);
  auto fail_cpu = cpu::damped_cholesky_with_retry(neg, 0.0f, 1, lower_cpu);
  BOOST_REQUIRE(!fail && !fail_cpu);
  BOOST_CHECK_EQUAL(render(fail.error()), render(fail_cpu.error()));
}

BOOST_AUTO_TEST_CASE(a_backend_without_inversion_kernels_is_refused) {
  auto made = make_kfac_inverter(std::make_shared<named_backend>("cuda:3"));
  BOOST_REQUIRE(!made);
  check_error(made.error(), ec::unavailable, {"device cuda:3", "K-FAC"});
  auto none = make_kfac_inverter(nullptr);
  BOOST_REQUIRE(!none);
  check_error(none.error(), ec::invalid_argument, {"no backend"});
}

BOOST_AUTO_TEST_CASE(the_cpu_statistics_are_the_cpu_functions_bit_for_bit) {
  auto& k = cpu_kfac_inverter();
  BOOST_CHECK(k.concurrent());
  std::mt19937 rng{5};
  layer_inputs in{rng};
  // Dense: 37 rows (both matrices) and 16 (A as rows, G a matrix); conv:
  // 1176 rows (matrices), 80 (A as rows) and 8 (both as rows).
  for (int threads : {1, 2})
    for (bool rows : {false, true}) {
      BOOST_TEST_CONTEXT("threads " << threads << ", rows " << rows) {
        for (int64_t examples : {0, 16}) {
          auto [got, want] = dense_both(k, in, sampling(examples), threads,
                                        rows);
          BOOST_REQUIRE(!want.err);
          check_same(got, want);
        }
        for (auto [examples, locations] :
             {std::pair{0, 0}, std::pair{4, 20}, std::pair{2, 4}}) {
          auto [got, want] = conv_both(k, in, sampling(examples, locations),
                                       threads, rows);
          BOOST_REQUIRE(!want.err);
          check_same(got, want);
        }
      }
    }
  // Errors pass through unchanged.
  auto bad = sampling(-1);
  auto [got, want] = dense_both(k, in, bad, 1, true);
  BOOST_REQUIRE(want.err);
  check_same(got, want);
  auto [cgot, cwant] = conv_both(k, in, bad, 1, false);
  BOOST_REQUIRE(cwant.err);
  check_same(cgot, cwant);
}

BOOST_AUTO_TEST_CASE(the_cpu_preconditioning_is_the_cpu_functions_bit_for_bit) {
  auto& k = cpu_kfac_inverter();
  std::mt19937 rng{6};
  auto in = random_preconditioning_inputs(rng);
  tensor got, want;
  SYNCFAC_REQUIRE_OK(
    k.precondition_factored(in.grad, in.A_inv, in.G_inv, 0.25f, got));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(in.grad, in.A_inv, in.G_inv, 0.25f, want));
  BOOST_CHECK(got == want);
  for (auto scan : {cpu::factor_scan::scan, cpu::factor_scan::trusted}) {
    SYNCFAC_REQUIRE_OK(
      k.precondition_cholesky(in.grad, in.LA, in.LG, 0.25f, got, scan));
    SYNCFAC_REQUIRE_OK(
      cpu::precondition_cholesky(in.grad, in.LA, in.LG, 0.25f, want, scan));
    BOOST_CHECK(got == want);
    SYNCFAC_REQUIRE_OK(k.precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                            in.eG, 1e-3f, 4, got, scan));
    SYNCFAC_REQUIRE_OK(cpu::precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                               in.eG, 1e-3f, 4, want, scan));
    BOOST_CHECK(got == want);
  }
  // Errors pass through unchanged.
  auto bad = in.LA;
  bad[0] = -1.0f;
  auto err = k.precondition_cholesky(in.grad, bad, in.LG, 1.0f, got,
                                     cpu::factor_scan::scan);
  auto err_cpu = cpu::precondition_cholesky(in.grad, bad, in.LG, 1.0f, want);
  BOOST_REQUIRE(err);
  BOOST_CHECK_EQUAL(render(err), render(err_cpu));
}

BOOST_AUTO_TEST_CASE(the_cuda_adapter_runs_the_statistics_on_the_device) {
  recording_kernels dev;
  auto k = make_cuda_kfac_inverter(dev, "cuda:1");
  BOOST_CHECK_EQUAL(k->device(), "cuda:1");
  // One stream and one set of buffers: callers must take turns.
  BOOST_CHECK(!k->concurrent());
  std::mt19937 rng{8};
  layer_inputs in{rng};
  // Matrices: always the device's (results bit for bit the stand-in's,
  // which are the CPU functions).
  for (int64_t examples : {0, 16}) {
    auto [got, want] = dense_both(*k, in, sampling(examples), 2, false);
    check_same(got, want);
  }
  auto [cgot, cwant] = conv_both(*k, in, sampling(4, 20), 2, false);
  check_same(cgot, cwant);
  BOOST_CHECK_EQUAL(dev.statistics, 3);
  // With rows: the device when both factors are matrices, and the rows
  // outputs are then emptied like the CPU function's.
  dev.statistics = 0;
  auto [got, want] = dense_both(*k, in, sampling(0), 2, true);
  check_same(got, want);
  BOOST_CHECK(got.A_rows.x.empty() && got.G_rows.x.empty());
  auto [cg, cw] = conv_both(*k, in, sampling(0), 2, true);
  check_same(cg, cw);
  BOOST_CHECK_EQUAL(dev.statistics, 2);
  // Rows left from an earlier call are cleared too.
  gram_rows a_rows{random_tensor({2, 3}, rng), 0.5};
  auto g_rows = a_rows;
  tensor A, G;
  SYNCFAC_REQUIRE_OK(k->dense_factors(in.input, in.ds, true, sampling(0), 1,
                                      A, G, a_rows, g_rows));
  BOOST_CHECK(a_rows.x.empty() && g_rows.x.empty());
  BOOST_CHECK_EQUAL(a_rows.scale, 0.0);
  // A factor as rows: the CPU function, the rows gathered on the host.
  dev.statistics = 0;
  for (int64_t examples : {16, 3}) {
    auto [rgot, rwant] = dense_both(*k, in, sampling(examples), 2, true);
    BOOST_CHECK(!rwant.A_rows.x.empty());
    check_same(rgot, rwant);
  }
  for (auto [examples, locations] : {std::pair{4, 20}, std::pair{2, 4}}) {
    auto [rgot, rwant] = conv_both(*k, in, sampling(examples, locations), 2,
                                   true);
    BOOST_CHECK(!rwant.A_rows.x.empty());
    check_same(rgot, rwant);
  }
  BOOST_CHECK_EQUAL(dev.statistics, 0);
  // Malformed inputs are reported like the CPU's.
  tensor flat({37});
  stats_out err_got, err_want;
  err_got.err = k->dense_factors(flat, in.ds, true, {}, 1, err_got.A,
                                 err_got.G, err_got.A_rows, err_got.G_rows);
  err_want.err = cpu::dense_factors(flat, in.ds, true, {}, 1, err_want.A,
                                    err_want.G, err_want.A_rows,
                                    err_want.G_rows);
  check_error(err_got.err, ec::shape_mismatch, {"[37]"});
  check_same(err_got, err_want);
}

BOOST_AUTO_TEST_CASE(the_cuda_adapter_preconditions_on_the_device) {
  recording_kernels dev;
  auto k = make_cuda_kfac_inverter(dev, "cuda:0");
  std::mt19937 rng{9};
  auto in = random_preconditioning_inputs(rng);
  tensor got, want;
  SYNCFAC_REQUIRE_OK(
    k->precondition_factored(in.grad, in.A_inv, in.G_inv, 0.5f, got));
  SYNCFAC_REQUIRE_OK(
    cpu::precondition_factored(in.grad, in.A_inv, in.G_inv, 0.5f, want));
  BOOST_CHECK(got == want);
  // Trusted factors too: the device scans them anyway.
  for (auto scan : {cpu::factor_scan::scan, cpu::factor_scan::trusted}) {
    SYNCFAC_REQUIRE_OK(
      k->precondition_cholesky(in.grad, in.LA, in.LG, 0.5f, got, scan));
    SYNCFAC_REQUIRE_OK(
      cpu::precondition_cholesky(in.grad, in.LA, in.LG, 0.5f, want, scan));
    BOOST_CHECK(got == want);
    SYNCFAC_REQUIRE_OK(k->precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                             in.eG, 1e-3f, 2, got, scan));
    SYNCFAC_REQUIRE_OK(cpu::precondition_eigen(in.grad, in.QA, in.eA, in.QG,
                                               in.eG, 1e-3f, 2, want, scan));
    BOOST_CHECK(got == want);
  }
  BOOST_CHECK_EQUAL(dev.preconditioning, 5);
  BOOST_CHECK_EQUAL(dev.statistics, 0);
  BOOST_CHECK_EQUAL(dev.inversions, 0);
}
