#pragma once

// Shared by the CUDA suites (tests/kernels/cuda_*.cpp): a main that skips
// (tests/hardware_skip.hpp) when no CUDA device is present, and a fixture holding one CUDA backend and the
// CPU backend the results are compared with (ggml's test-backend-ops idea:
// the same inputs through both, compared with a per-kernel tolerance).
//
// Include after defining BOOST_TEST_MODULE, in exactly one file per suite.
// With SYNCFAC_CUDA_TESTS_ON_CPU (the *_selfcheck suites) a CPU backend and
// the CPU K-FAC functions stand in for the GPU, in every build: that checks
// the suites' inputs, tolerances and expected errors without a GPU.

#ifndef BOOST_TEST_MODULE
#  error "define BOOST_TEST_MODULE before including cuda_test_utils.hpp"
#endif
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "tests/hardware_skip.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
#  include "kernels/cpu/kfac_inverse.hpp"
#endif

int main(int argc, char* argv[]) {
#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
  // A self-check of the suites' own logic: the "GPU" is a second CPU
  // backend and the K-FAC kernels are the CPU functions.
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
#else
  auto count = syncfac::cuda::device_count();
  if (count == 0)
    syncfac::test::skip_for_missing(
      syncfac::test::missing_hardware::gpu,
      "no CUDA device (cudaGetDeviceCount failed or returned 0)");
  std::printf("CUDA device 0: %s\n",
              syncfac::cuda::device_description(0).c_str());
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
#endif
}

namespace syncfac::test {

struct cuda_fixture {
  std::unique_ptr<backend> gpu;
  std::unique_ptr<backend> cpu;
  cuda::kfac_kernels* kfac = nullptr;
  std::mt19937 rng{42};

#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
  struct cpu_kfac : cuda::kfac_kernels {
    caf::error damped_inverse(const tensor& f, float d, tensor& o) override {
      return cpu::damped_inverse(f, d, o);
    }
    caf::error damped_cholesky(const tensor& f, float d, tensor& o) override {
      return cpu::damped_cholesky(f, d, o);
    }
    caf::error symmetric_eigen(const tensor& f, tensor& e,
                               tensor& q) override {
      return cpu::symmetric_eigen(f, e, q);
    }
    caf::error precondition_factored(const tensor& g, const tensor& a,
                                     const tensor& b, float s,
                                     tensor& o) override {
      return cpu::precondition_factored(g, a, b, s, o);
    }
    caf::error precondition_cholesky(const tensor& g, const tensor& a,
                                     const tensor& b, float s,
                                     tensor& o) override {
      return cpu::precondition_cholesky(g, a, b, s, o);
    }
    caf::error precondition_eigen(const tensor& g, const tensor& qa,
                                  const tensor& ea, const tensor& qg,
                                  const tensor& eg, float l, int64_t t,
                                  tensor& o) override {
      return cpu::precondition_eigen(g, qa, ea, qg, eg, l, t, o);
    }
    caf::error dense_factors(const tensor& x, const tensor& ds, bool b,
                             const factor_sampling& s, int t, tensor& A,
                             tensor& G) override {
      return cpu::dense_factors(x, ds, b, s, t, A, G);
    }
    caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                            const tensor& ds, bool b,
                            const factor_sampling& s, int t, tensor& A,
                            tensor& G) override {
      return cpu::conv_factors(g, x, ds, b, s, t, A, G);
    }
    caf::error reserve_workspace(int64_t bytes) override {
      if (bytes > (int64_t{1} << 40))
        return make_error(ec::unavailable,
                          "cuda:0: cannot allocate " + std::to_string(bytes)
                            + " bytes");
      return caf::none;
    }
  } cpu_kfac_;

  cuda_fixture() {
    gpu = make_cpu_backend(1);
    kfac = &cpu_kfac_;
    cpu = make_cpu_backend(4);
  }
#else
  cuda_fixture() {
    auto made = cuda::make_cuda_backend(0);
    BOOST_REQUIRE_MESSAGE(made, "cuda:0: "
                                  << (made ? std::string{}
                                           : render(made.error())));
    gpu = std::move(*made);
    kfac = cuda::kfac_of(*gpu);
    BOOST_REQUIRE(kfac != nullptr);
    cpu = make_cpu_backend(4);
  }
#endif
};

/// The largest |x| of a tensor (for tolerances relative to a scale).
inline double max_abs(const tensor& x) {
  double result = 0.0;
  for (auto v : x.values())
    result = std::max(result, std::abs(double{v}));
  return result;
}

} // namespace syncfac::test
