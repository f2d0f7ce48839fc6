#pragma once

// The K-FAC inversion kernels the runtime needs (runtime/kfac/
// layer_inversion.hpp), on the device of the device actor that runs them:
// damped Cholesky factors with the damping retry, and symmetric
// eigendecompositions. The CPU implementation is the syncfac::cpu functions
// of kernels/cpu/kfac_inverse.hpp; the CUDA one adapts cuda::kfac_kernels,
// which has the same checks, errors and retry policy
// (kernels/damping_retry.hpp), so callers cannot tell them apart except by
// float round-off. The factored damping (cpu::factored_damping: two
// traces) stays on the CPU for every device. Plain C++: no CUDA header,
// callable in every build.

#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
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

  /// cpu::damped_cholesky_with_retry on this device: the Cholesky factor
  /// of ½(F + Fᵀ) + damping·I, the damping raised x10 up to max_retries
  /// times while the factor is not positive definite; returns the damping
  /// that worked.
  virtual caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                          float damping,
                                                          int max_retries,
                                                          tensor& lower)
    = 0;

  /// cpu::symmetric_eigen on this device: eigenvalues ascending,
  /// eigenvectors in columns; a factor that is not positive semi-definite
  /// is ec::numerical_failure.
  virtual caf::error symmetric_eigen(const tensor& factor,
                                     tensor& eigenvalues,
                                     tensor& eigenvectors)
    = 0;
};

/// The CPU kernels. Stateless, so one instance serves every caller on any
/// thread.
kfac_inverter& cpu_kfac_inverter();

/// An inverter running `kernels` (which must outlive it, unless `owner`
/// holds them), reporting `device` as its device. Host code only, built in
/// every build: the CUDA suites' CPU self-checks drive it with CPU kernels
/// standing in for the GPU.
std::unique_ptr<kfac_inverter>
make_cuda_kfac_inverter(cuda::kfac_kernels& kernels, std::string device,
                        std::shared_ptr<void> owner = nullptr);

/// The inverter on `dev`'s device (backend::name()): the CPU kernels for
/// "cpu"; for a CUDA backend ("cuda:N", made for "gpu:N") the backend's
/// own cuda::kfac_kernels, which share its stream, handles and device
/// buffers (one actor drives both), holding `dev` alive. Any other backend,
/// and "cuda:N" in a build without CUDA, is ec::unavailable naming the
/// device: a GPU actor must not fall back to the CPU unnoticed.
caf::expected<std::shared_ptr<kfac_inverter>>
make_kfac_inverter(std::shared_ptr<backend> dev);

} // namespace syncfac
