// The damping retries of cuda::kfac_kernels: host logic only, built in
// every build (the CUDA suites' CPU self-checks use it without CUDA).

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "runtime/error.hpp"

namespace syncfac::cuda {

namespace {

// As on the CPU: a damping of 0 that must be raised starts here (relative
// to the mean diagonal of the factor).
constexpr double zero_damping_floor = 1e-6;

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

bool has_code(const caf::error& err, ec code) {
  return err && err.category() == error_category
         && err.code() == static_cast<uint8_t>(code);
}

/// `attempt(damping)`, retried with the damping raised x10 after each
/// numerical_failure: the policy of cpu::damped_inverse_with_retry.
template <class Attempt>
caf::expected<float> retry_damping(const char* op, const tensor& factor,
                                   float damping, int max_retries,
                                   Attempt attempt) {
  if (max_retries < 0)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": max_retries "
                        + std::to_string(max_retries) + " is negative");
  auto current = damping;
  caf::error last;
  for (int i = 0;; ++i) {
    last = attempt(current);
    if (!last)
      return current;
    if (!has_code(last, ec::numerical_failure) || i == max_retries)
      break;
    float next = current * 10.0f;
    if (current == 0.0f) {
      auto n = factor.dim(0);
      double trace = 0.0;
      for (int64_t k = 0; k < n; ++k)
        trace += factor[k * n + k];
      auto mean = trace / static_cast<double>(n);
      next = static_cast<float>(zero_damping_floor * (mean > 0 ? mean : 1.0));
    }
    if (!std::isfinite(next))
      break;
    current = next;
  }
  if (!has_code(last, ec::numerical_failure))
    return last;
  return make_error(ec::numerical_failure,
                    std::string{op} + ": damping " + num(damping)
                      + " raised up to " + num(current) + " within "
                      + std::to_string(max_retries)
                      + " retries (x10 each) did not help; last: "
                      + render(last));
}

} // namespace

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
