#pragma once

// The CUDA backend's host entry points: plain C++, no CUDA header or type
// (the implementation is in kernels/cuda/*.cu). Built only when CMake finds
// a CUDA compiler (SYNCFAC_HAVE_CUDA); without it, use the factory in
// kernels/backend_factory.hpp, which reports "gpu:N" as unavailable.
//
// One backend owns one device: its own non-blocking stream, cuBLAS and
// cuSOLVER handles, and device buffers that grow to the largest request and
// are reused afterwards (a steady-state step allocates nothing). Outputs
// stay on the device in the output tensors' device copies (kernels/
// tensor.hpp), where the next kernel reads them; a tensor's host values are
// brought up to date only when host code reads them (docs/cuda.md, "What
// stays on the GPU"). The K-FAC kernels below return host values; the
// statistics read a resident input in place.
//
// Errors: a CUDA, cuBLAS or cuSOLVER call that fails is ec::internal naming
// the device, the operation and the library's error string; an allocation
// that fails is ec::unavailable naming the device and the bytes asked for;
// the K-FAC kernels report the same codes and checks as their CPU
// counterparts in kernels/cpu/kfac_inverse.hpp and kfac_factors.hpp.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "kernels/cpu/kfac_factors.hpp"

namespace syncfac::cuda {

/// CUDA devices visible to this process; 0 when the driver is missing or
/// reports an error (no GPU), never throws.
int device_count() noexcept;

/// "NVIDIA H200 (132 SMs, 139.8 GiB)" or the CUDA error that prevented
/// the query.
std::string device_description(int device);

/// The device's FP32 peak in TFLOP/s: SMs x clock x 128 FP32 lanes x 2
/// (an FMA is two FLOPs), for compute capability 8.x/9.x/10.x; 0 when the
/// clock cannot be queried.
double fp32_peak_tflops(int device);

/// Seconds per cuBLAS SGEMM [n, n] x [n, n] on device-resident data (the
/// best of `reps` after a warm-up, timed with CUDA events): the product
/// alone, without the host copies the backend interface makes; with
/// batch > 1, one cublasSgemmStridedBatched of `batch` such products (as
/// gemm_batched runs them). For benchmarks (bench/bench_gpu.cpp).
caf::expected<double> device_sgemm_seconds(int device, int64_t n, int reps,
                                           int64_t batch = 1);

/// A backend on CUDA device `device` (0-based). ec::unavailable naming the
/// device when it does not exist or cannot be initialised.
caf::expected<std::unique_ptr<backend>> make_cuda_backend(int device);

/// The K-FAC kernels on a CUDA device, with the semantics, checks and
/// errors of the CPU functions of the same names (syncfac::cpu). The
/// Cholesky factorisations and eigendecompositions run in double precision
/// (cuSOLVER potrf/potri and syevd), like the CPU path.
class kfac_kernels {
public:
  virtual ~kfac_kernels() = default;

  virtual caf::error damped_inverse(const tensor& factor, float damping,
                                    tensor& inverse)
    = 0;

  virtual caf::error damped_cholesky(const tensor& factor, float damping,
                                     tensor& lower)
    = 0;

  caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                                 float damping,
                                                 int max_retries,
                                                 tensor& inverse);

  caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                  float damping,
                                                  int max_retries,
                                                  tensor& lower);

  virtual caf::error symmetric_eigen(const tensor& factor,
                                     tensor& eigenvalues,
                                     tensor& eigenvectors)
    = 0;

  virtual caf::error precondition_factored(const tensor& grad,
                                           const tensor& A_inv,
                                           const tensor& G_inv, float scale,
                                           tensor& out)
    = 0;

  virtual caf::error precondition_cholesky(const tensor& grad,
                                           const tensor& LA,
                                           const tensor& LG, float scale,
                                           tensor& out)
    = 0;

  virtual caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                                        const tensor& eA, const tensor& QG,
                                        const tensor& eG, float lambda,
                                        int64_t locations, tensor& out)
    = 0;

  /// A and G by SYRK on the device (threads is checked like the CPU's but
  /// otherwise unused).
  virtual caf::error dense_factors(const tensor& input, const tensor& ds,
                                   bool with_bias,
                                   const factor_sampling& s, int threads,
                                   tensor& A, tensor& G)
    = 0;

  virtual caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                                  const tensor& ds, bool with_bias,
                                  const factor_sampling& s, int threads,
                                  tensor& A, tensor& G)
    = 0;

  /// Allocates `bytes` of device memory in the backend's workspace (kept
  /// for later calls); ec::unavailable naming the device and the size when
  /// the device cannot provide it. For tests and capacity checks.
  virtual caf::error reserve_workspace(int64_t bytes) = 0;
};

/// Bytes a backend made by make_cuda_backend has copied to its device and
/// back since it was made, its tensors' fetches included: what keeping
/// values on the device saves (tests, benchmarks). Zeros for any other
/// backend.
struct transfer_totals {
  int64_t to_device = 0;
  int64_t to_host = 0;
};

transfer_totals transfers(const backend& dev) noexcept;

/// The K-FAC kernels of a backend made by make_cuda_backend; nullptr for
/// any other backend.
kfac_kernels* kfac_of(backend& dev) noexcept;

} // namespace syncfac::cuda
