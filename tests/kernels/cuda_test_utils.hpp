#pragma once

// Shared by the CUDA suites (tests/kernels/cuda_*.cpp): a main that exits
// 77 (CTest's skip code, see SKIP_RETURN_CODE in tests/CMakeLists.txt) when
// no CUDA device is present, and a fixture holding one CUDA backend and the
// CPU backend the results are compared with (ggml's test-backend-ops idea:
// the same inputs through both, compared with a per-kernel tolerance).
//
// Include after defining BOOST_TEST_MODULE, in exactly one file per suite.

#ifndef BOOST_TEST_MODULE
#  error "define BOOST_TEST_MODULE before including cuda_test_utils.hpp"
#endif
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

int main(int argc, char* argv[]) {
  auto count = syncfac::cuda::device_count();
  if (count == 0) {
    std::printf("no CUDA device (cudaGetDeviceCount failed or returned 0): "
                "skipping\n");
    return 77;
  }
  std::printf("CUDA device 0: %s\n",
              syncfac::cuda::device_description(0).c_str());
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

namespace syncfac::test {

struct cuda_fixture {
  std::unique_ptr<backend> gpu;
  std::unique_ptr<backend> cpu;
  cuda::kfac_kernels* kfac = nullptr;
  std::mt19937 rng{42};

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
};

/// The largest |x| of a tensor (for tolerances relative to a scale).
inline double max_abs(const tensor& x) {
  double result = 0.0;
  for (auto v : x.values())
    result = std::max(result, std::abs(double{v}));
  return result;
}

} // namespace syncfac::test
