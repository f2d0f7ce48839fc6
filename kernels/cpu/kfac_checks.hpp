#pragma once

// The argument checks and error messages of K-FAC's kernels, one copy for
// the CPU (kfac_inverse.cpp, kfac_factors.cpp) and the CUDA backend
// (kernels/cuda/kfac.cu): both refuse the same inputs with the same words
// (docs/kernels.md). Pure host logic, no Eigen.

#include <cstdint>
#include <limits>
#include <string>

#include <caf/error.hpp>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/geometry.hpp"
#include "kernels/kfac_types.hpp"
#include "kernels/tensor.hpp"

namespace syncfac::cpu {

/// x as "%g": small dampings (1e-07) stay readable where std::to_string
/// prints 0.000000.
std::string number_text(double x);

/// x is [n, n].
caf::error check_square(const char* op, const char* what, const tensor& x);

/// No NaN or Inf in x; the error names the first one and its index.
caf::error check_finite(const char* op, const char* what, const tensor& x);

/// x is finite and, when non_negative, >= 0.
caf::error check_scalar(const char* op, const char* what, double x,
                        bool non_negative);

/// ec::numerical_failure: factor [n, n] + damping · I with `detail`.
caf::error not_positive_definite(const char* op, int64_t n, float damping,
                                 const std::string& detail);

/// The Cholesky pivots of a damped factor against round-off: pivot k is
/// l_diag[k · stride]², and a pivot at most n · ε · max_diag (the largest
/// diagonal entry of the damped factor) counts as zero, indistinguishable
/// from singular at the factorisation's precision (ε: double's, or
/// float's for a float factorisation).
caf::error check_round_off_pivots(
  const char* op, int64_t n, float damping, double max_diag,
  const double* l_diag, int64_t stride,
  double epsilon = std::numeric_limits<double>::epsilon());

/// Clamps the eigenvalues e[0, n) of a factor that are negative by
/// round-off to 0; one below -1e-3 of the largest magnitude means the
/// factor is not positive semi-definite (ec::numerical_failure).
caf::error clamp_eigenvalues(const char* op, double* e, int64_t n);

/// ec::numerical_failure for an inverse entry [i, j] beyond float range.
caf::error inverse_out_of_range(const char* op, int64_t n, double value,
                                int64_t i, int64_t j);

/// grad is [p, q], left [p, p] and right [q, q].
caf::error check_sides(const char* op, const tensor& grad,
                       const char* left_what, const tensor& left,
                       const char* right_what, const tensor& right);

/// precondition_factored's and precondition_cholesky's operands: the sides,
/// a finite scale, a finite grad and, unless `trusted`, finite factors.
caf::error check_sided_operands(const char* op, const tensor& grad,
                                const char* left_what, const tensor& left,
                                const char* right_what, const tensor& right,
                                float scale, factor_scan scan);

/// The diagonal of a lower triangular [n, n] L is positive.
caf::error check_positive_pivots(const char* op, const char* what,
                                 const tensor& L);

/// precondition_eigen's operands: the sides, one eigenvalue per
/// eigenvector, λ finite and >= 0, locations >= 1, finite inputs (the
/// factors unless `trusted`) and every divisor T·eA_i·eG_j + λ positive.
caf::error check_eigen_operands(const char* op, const tensor& grad,
                                const tensor& QA, const tensor& eA,
                                const tensor& QG, const tensor& eG,
                                float lambda, int64_t locations,
                                factor_scan scan);

/// dense_factors' thread count (>= 1), sampling counts (>= 0), input
/// [N, in] and ds [N, out] with N > 0.
caf::error check_dense_factors(const char* op, const tensor& input,
                               const tensor& ds, const factor_sampling& s,
                               int threads);

/// conv_factors' thread count and sampling counts as dense_factors',
/// geometry, input, ds of its output shape, and a batch.
caf::error check_conv_factors(const char* op, const conv2d_geometry& g,
                              const tensor& x, const tensor& ds,
                              const factor_sampling& s, int threads);

} // namespace syncfac::cpu
