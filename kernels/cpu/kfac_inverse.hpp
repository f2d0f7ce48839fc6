#pragma once

// K-FAC on the CPU: damped inverses and eigendecompositions of the Kronecker
// factors, and preconditioning of one layer's gradient (docs/design.md §3).
//
// Layout. A layer's gradient matrix is grad = [in+1, out] (the dense weight
// [in, out] with the bias row appended last): rows are inputs, columns
// outputs. A = E[ā āᵀ] is [in+1, in+1], G = E[g gᵀ] is [out, out]; for a
// convolution both are averaged over examples and the T output locations
// and the Fisher block is T·(A⊗G). The row-major flattening of grad, index
// i·out + j, is the column-major vec of the paper's [out, in+1] weight
// gradient, and under it (A⊗G) vec(grad) = vec(A · grad · G): A acts on the
// rows, G on the columns. So the paper's G⁻¹ ∇W A⁻¹ is A⁻¹ · grad · G⁻¹ here.
//
// Errors: a shape that does not fit is ec::shape_mismatch naming both
// shapes, a NaN or Inf input ec::non_finite, an argument outside its domain
// ec::invalid_argument, a factor that cannot be inverted
// ec::numerical_failure. On any error the outputs are left untouched.
//
// Threads: everything runs on the calling thread (Eigen is kept from
// opening its own OpenMP team), so an inverse actor can invert several
// layers side by side without oversubscribing the cores.

#include <cstdint>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/tensor.hpp"

namespace syncfac::cpu {

/// π = sqrt((tr A / dim A) / (tr G / dim G)), which balances the damping
/// between the two factors (Martens & Grosse 2015, §6.3). 1 when a trace is
/// not positive (a factor never updated is all zeros) or when A or G is not
/// a square matrix or the result is not finite; damped_inverse reports such
/// factors itself.
float pi_adjustment(const tensor& A, const tensor& G);

/// The factored Tikhonov damping of one layer.
struct damping_plan {
  /// Added to the diagonal of A.
  float a_damping;
  /// Added to the diagonal of G.
  float g_damping;
};

/// With λ_eff = λ / T: a_damping = π·√λ_eff, g_damping = √λ_eff / π, so
/// a_damping·g_damping = λ / T and T·(A + a I)⊗(G + g I) carries the
/// damping λ·I of the block T·(A⊗G). locations is T (1 for dense layers).
/// λ negative or not finite, or T < 1, gives NaN in both fields, which
/// damped_inverse refuses as ec::non_finite.
damping_plan factored_damping(const tensor& A, const tensor& G, float lambda,
                              int64_t locations);

/// inverse = (F + damping·I)⁻¹ of the symmetric part ½(F + Fᵀ) of a square
/// factor, by Cholesky in double precision, symmetrised exactly. damping
/// must be finite and >= 0. A matrix that is not numerically positive
/// definite is ec::numerical_failure naming the dimension and the damping.
caf::error damped_inverse(const tensor& factor, float damping,
                          tensor& inverse);

/// damped_inverse, retried up to max_retries (>= 0) times with the damping
/// multiplied by 10 each time after a numerical_failure (a damping of 0 is
/// first raised to 1e-6 times the mean diagonal, or 1e-6 if that is not
/// positive, since 10·0 would never change). Returns the damping that
/// worked, which callers should report when it differs from the one asked
/// for. Other errors are returned at once; still failing after the last
/// retry is ec::numerical_failure naming the first and last damping.
caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                               float damping, int max_retries,
                                               tensor& inverse);

/// damped_inverse in float: the factorisation and the solves at float
/// precision, ~2x faster. Relative errors of ~1e-4 in the inverse at the
/// conditioning of a rank-deficient dense factor (see kfac_inverse.cpp),
/// below the 4e-3 of the bfloat16 products that use it
/// (precondition_factored_bf16). Same checks and errors.
caf::error damped_inverse_f32(const tensor& factor, float damping,
                              tensor& inverse);

/// damped_inverse_f32 with damped_inverse_with_retry's retry policy.
caf::expected<float> damped_inverse_f32_with_retry(const tensor& factor,
                                                   float damping,
                                                   int max_retries,
                                                   tensor& inverse);

/// lower = L, the Cholesky factor of ½(F + Fᵀ) + damping·I (L Lᵀ, lower
/// triangular, zeros above the diagonal), in double, stored as float. Same
/// checks and errors as damped_inverse. A third of the work of the
/// inverse (n³/3 instead of n³): what an inverse actor ships.
caf::error damped_cholesky(const tensor& factor, float damping,
                           tensor& lower);

/// damped_cholesky with damped_inverse_with_retry's retry policy.
caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                float damping,
                                                int max_retries,
                                                tensor& lower);

/// F = Q diag(e) Qᵀ of the symmetric part of a square factor, computed in
/// double: eigenvalues [n] ascending, eigenvectors [n, n] with eigenvector
/// k in column k. Negative eigenvalues from round-off are clamped to 0; one
/// below -1e-3 times the largest magnitude means the factor is not positive
/// semi-definite and is ec::numerical_failure.
caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                           tensor& eigenvectors);

/// out = scale · A_inv · grad · G_inv for grad [p, q], A_inv [p, p],
/// G_inv [q, q] (the paper's G⁻¹ ∇W A⁻¹). With A_inv = (A + a I)⁻¹ and
/// G_inv = (G + g I)⁻¹ this is (scale⁻¹ (A + a I)⊗(G + g I))⁻¹ vec(grad);
/// scale is 1/T for a convolution (the T of T·(A⊗G)) and 1 for a dense
/// layer. out may be any of the inputs.
caf::error precondition_factored(const tensor& grad, const tensor& A_inv,
                                 const tensor& G_inv, float scale,
                                 tensor& out);

/// Whether precondition_cholesky and precondition_eigen scan the factors
/// (LA, LG; QA, eA, QG, eG) for NaN or Inf. `trusted`: the caller checked
/// them once when they arrived (a PS shard checks every inverse it
/// installs), so the scan, a pass over the whole factors per call, is
/// left out; the gradient is always scanned.
enum class factor_scan : uint8_t { scan, trusted };

/// precondition_factored with the two products in bfloat16 on the best
/// backend here, AMX or AVX512-BF16 (kernels/cpu/bf16_gemm.hpp): the same
/// operands and checks; a CPU or OS that runs neither is ec::unavailable
/// naming what each lacks. `scan` as for
/// precondition_cholesky. out may be any of the inputs.
caf::error precondition_factored_bf16(const tensor& grad, const tensor& A_inv,
                                      const tensor& G_inv, float scale,
                                      tensor& out,
                                      factor_scan scan = factor_scan::scan);

/// precondition_factored with the factors' Cholesky factors instead of
/// their inverses: out = scale · (LA LAᵀ)⁻¹ · grad · (LG LGᵀ)⁻¹ by four
/// triangular solves. A pivot that is not positive is
/// ec::numerical_failure. out may be any of the inputs.
caf::error precondition_cholesky(const tensor& grad, const tensor& LA,
                                 const tensor& LG, float scale, tensor& out,
                                 factor_scan scan = factor_scan::scan);

/// Exact damping in the eigenbasis of A = QA diag(eA) QAᵀ and
/// G = QG diag(eG) QGᵀ (as from symmetric_eigen):
///   V = QAᵀ · grad · QG;  V_ij /= T·eA_i·eG_j + λ;  out = QA · V · QGᵀ,
/// which is exactly (T·(A⊗G) + λ I)⁻¹ vec(grad) — the damped Fisher block,
/// no further 1/T. grad [p, q], QA [p, p], eA [p], QG [q, q], eG [q];
/// λ finite and >= 0, locations (T) >= 1. A divisor that is not positive
/// (λ = 0 with a zero eigenvalue) is ec::numerical_failure. out may be any
/// of the inputs.
caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                              const tensor& eA, const tensor& QG,
                              const tensor& eG, float lambda,
                              int64_t locations, tensor& out,
                              factor_scan scan = factor_scan::scan);

/// The KL / norm clip of the K-FAC step: min(1, sqrt(kl_clip / (lr² · dot)))
/// with dot = Σ over layers ⟨grad, F̂⁻¹ grad⟩. 1 when lr² · dot is not
/// positive (or NaN) and when kl_clip is not positive (no clip).
double kl_clip_scale(double learning_rate, double kl_clip,
                     double grad_dot_preconditioned);

} // namespace syncfac::cpu
