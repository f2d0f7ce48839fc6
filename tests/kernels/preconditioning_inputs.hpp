#pragma once

// A layer's factors in every form precondition_layer takes, made by the
// CPU functions: what the K-FAC kernel suites precondition a gradient with
// on a backend and on the CPU, to compare the two.

#include <utility>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

namespace syncfac::test {

struct preconditioning_inputs {
  tensor grad;
  tensor A_inv, G_inv;
  tensor LA, LG;
  tensor eA, QA, eG, QG;

  /// The factors A and G damped by 0.05, inverted and Cholesky-factored,
  /// and their eigendecompositions; `gradient` [A's rows, G's rows].
  preconditioning_inputs(const tensor& A, const tensor& G, tensor gradient)
    : grad(std::move(gradient)) {
    SYNCFAC_REQUIRE_OK(cpu::damped_inverse(A, 0.05f, A_inv));
    SYNCFAC_REQUIRE_OK(cpu::damped_inverse(G, 0.05f, G_inv));
    SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(A, 0.05f, LA));
    SYNCFAC_REQUIRE_OK(cpu::damped_cholesky(G, 0.05f, LG));
    SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(A, eA, QA));
    SYNCFAC_REQUIRE_OK(cpu::symmetric_eigen(G, eG, QG));
  }
};

} // namespace syncfac::test
