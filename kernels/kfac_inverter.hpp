#pragma once

// The K-FAC kernels the runtime needs, on the device of the device actor
// that runs them: the factor statistics (runtime/kfac/kfac_stats.hpp), the
// inversions (damped Cholesky factors with the damping retry, symmetric
// eigendecompositions; runtime/kfac/layer_inversion.hpp) and the
// preconditioning products (precondition_layer). The class keeps the name
// it had when it only inverted.
//
// The CPU implementation is the syncfac::cpu functions of
// kernels/cpu/kfac_factors.hpp and kfac_inverse.hpp, called exactly as the
// runtime called them before (bit-identical results); the CUDA one adapts
// cuda::kfac_kernels, which has the same checks, errors and retry policy
// (kernels/damping_retry.hpp), so callers cannot tell them apart except by
// float round-off. What stays on the CPU for every device: the factored
// damping (cpu::factored_damping: two traces), the moving averages of the
// factors, and the rows of a factor that comes as its rows (a copy of at
// most m rows, see dense_factors below). Plain C++: no CUDA header,
// callable in every build.

#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "kernels/cpu/kfac_factors.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/geometry.hpp"
#include "kernels/tensor.hpp"

namespace syncfac {

namespace cuda {
class kfac_kernels;
} // namespace cuda

class kfac_inverter {
public:
  virtual ~kfac_inverter() = default;

  /// The device the kernels run on: "cpu", "cuda:0", ...
  virtual std::string device() const = 0;

  /// Whether several threads may call the kernels at once. The CPU ones
  /// are stateless; a GPU's share one stream and its device buffers, so
  /// their callers must take turns (layer_statistics runs its layers side
  /// by side only when this is true).
  virtual bool concurrent() const = 0;

  // -- factor statistics (kernels/cpu/kfac_factors.hpp) ---------------------

  /// cpu::dense_factors on this device: A and G of a dense layer. threads
  /// is checked everywhere but sets the parallelism on the CPU only.
  virtual caf::error dense_factors(const tensor& input, const tensor& ds,
                                   bool with_bias,
                                   const factor_sampling& s, int threads,
                                   tensor& A, tensor& G)
    = 0;

  /// cpu::dense_factors with rows: a factor with fewer rows than columns
  /// comes as its rows, the others as matrices. The rows are gathered on
  /// the host (they are what the caller ships; a GPU would only add two
  /// copies of them), so a device computes the matrices only when both
  /// factors are matrices (kernels/cuda/kfac_inverter.cpp says why).
  virtual caf::error dense_factors(const tensor& input, const tensor& ds,
                                   bool with_bias,
                                   const factor_sampling& s, int threads,
                                   tensor& A, tensor& G,
                                   gram_rows& A_rows,
                                   gram_rows& G_rows)
    = 0;

  /// cpu::conv_factors on this device: A and G of a conv2d layer.
  virtual caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                                  const tensor& ds, bool with_bias,
                                  const factor_sampling& s, int threads,
                                  tensor& A, tensor& G)
    = 0;

  /// cpu::conv_factors with rows, as dense_factors with rows.
  virtual caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                                  const tensor& ds, bool with_bias,
                                  const factor_sampling& s, int threads,
                                  tensor& A, tensor& G,
                                  gram_rows& A_rows,
                                  gram_rows& G_rows)
    = 0;

  // -- inversions (kernels/cpu/kfac_inverse.hpp) -----------------------------

  /// cpu::damped_cholesky_with_retry on this device: the Cholesky factor
  /// of ½(F + Fᵀ) + damping·I, the damping raised x10 up to max_retries
  /// times while the factor is not positive definite; returns the damping
  /// that worked.
  virtual caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                          float damping,
                                                          int max_retries,
                                                          tensor& lower)
    = 0;

  /// cpu::damped_inverse_with_retry on this device: (½(F + Fᵀ) +
  /// damping·I)⁻¹, exactly symmetric, the damping raised as for
  /// damped_cholesky_with_retry; returns the damping that worked.
  virtual caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                                         float damping,
                                                         int max_retries,
                                                         tensor& inverse)
    = 0;

  /// cpu::damped_inverse_f32_with_retry on this device: the inverse at
  /// float precision, for bfloat16 products. Only the CPU has it; every
  /// other device is ec::unavailable, by name.
  virtual caf::expected<float>
  damped_inverse_f32_with_retry(const tensor& factor, float damping,
                                int max_retries, tensor& inverse);

  /// cpu::symmetric_eigen on this device: eigenvalues ascending,
  /// eigenvectors in columns; a factor that is not positive semi-definite
  /// is ec::numerical_failure.
  virtual caf::error symmetric_eigen(const tensor& factor,
                                     tensor& eigenvalues,
                                     tensor& eigenvectors)
    = 0;

  // -- preconditioning (kernels/cpu/kfac_inverse.hpp) ------------------------

  /// cpu::precondition_factored on this device: scale · A_inv grad G_inv.
  virtual caf::error precondition_factored(const tensor& grad,
                                           const tensor& A_inv,
                                           const tensor& G_inv, float scale,
                                           tensor& out)
    = 0;

  /// cpu::precondition_factored_bf16 on this device: the two products in
  /// bfloat16. Only a CPU with AMX or AVX512-BF16 has them; every other
  /// device is ec::unavailable, by name.
  virtual caf::error precondition_factored_bf16(const tensor& grad,
                                                const tensor& A_inv,
                                                const tensor& G_inv,
                                                float scale, tensor& out);

  /// cpu::precondition_cholesky on this device. `scan` lets the CPU skip
  /// its pass over trusted factors; a device may scan them anyway (same
  /// result for finite factors, which is what trusted promises).
  virtual caf::error precondition_cholesky(const tensor& grad,
                                           const tensor& LA,
                                           const tensor& LG, float scale,
                                           tensor& out, cpu::factor_scan scan)
    = 0;

  /// cpu::precondition_eigen on this device; `scan` as for
  /// precondition_cholesky.
  virtual caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                                        const tensor& eA, const tensor& QG,
                                        const tensor& eG, float lambda,
                                        int64_t locations, tensor& out,
                                        cpu::factor_scan scan)
    = 0;
};

/// The CPU kernels. Stateless, so one instance serves every caller on any
/// thread: what callers without a device actor use (PS shards, tests).
kfac_inverter& cpu_kfac_inverter();

/// The kernels of `kernels` (which must outlive it, unless `owner`
/// holds them), reporting `device` as its device. Host code only, built in
/// every build: the CUDA suites' CPU self-checks drive it with CPU kernels
/// standing in for the GPU.
std::unique_ptr<kfac_inverter>
make_cuda_kfac_inverter(cuda::kfac_kernels& kernels, std::string device,
                        std::shared_ptr<void> owner = nullptr);

/// The kernels on `dev`'s device (backend::name()): the CPU kernels for
/// "cpu"; for a CUDA backend ("cuda:N", made for "gpu:N") the backend's
/// own cuda::kfac_kernels, which share its stream, handles and device
/// buffers (one actor drives both), holding `dev` alive. Any other backend,
/// and "cuda:N" in a build without CUDA, is ec::unavailable naming the
/// device: a GPU actor must not fall back to the CPU unnoticed.
caf::expected<std::shared_ptr<kfac_inverter>>
make_kfac_inverter(std::shared_ptr<backend> dev);

} // namespace syncfac
