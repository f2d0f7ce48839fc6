// The K-FAC inverter a device gets (kernels/kfac_inverter.hpp): the CPU
// kernels for the CPU backend, bit for bit; an error naming the device,
// never the CPU kernels, for a backend without inversion kernels of its
// own. The CUDA inverter against the CPU one is in cuda_kfac.cpp.

#define BOOST_TEST_MODULE kernels_kfac_inverter
#include <boost/test/unit_test.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/kfac_inverter.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// A backend that only has a name: what a GPU backend without K-FAC
/// inversion kernels looks like to make_kfac_inverter.
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
