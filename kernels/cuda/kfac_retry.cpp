// The damping retries of cuda::kfac_kernels: host logic only, built in
// every build (the CUDA suites' CPU self-checks use it without CUDA).

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/damping_retry.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cuda {

caf::expected<float>
kfac_kernels::damped_inverse_with_retry(const tensor& factor, float damping,
                                        int max_retries, tensor& inverse) {
  return retry_damping("damped_inverse_with_retry", factor, damping,
                       max_retries, [&](float d) {
                         return damped_inverse(factor, d, inverse);
                       });
}

caf::expected<float>
kfac_kernels::damped_cholesky_with_retry(const tensor& factor, float damping,
                                         int max_retries, tensor& lower) {
  return retry_damping("damped_cholesky_with_retry", factor, damping,
                       max_retries, [&](float d) {
                         return damped_cholesky(factor, d, lower);
                       });
}

} // namespace syncfac::cuda
