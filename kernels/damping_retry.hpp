#pragma once

// The damping-retry policy every backend's K-FAC inversions share: an
// attempt that fails as not positive definite is retried with the damping
// raised x10 (a damping of 0 starts at 1e-6 of the factor's mean
// diagonal), up to max_retries times. Header-only, so the CPU kernels and
// the CUDA kernels (host side) apply the very same rule.

#include <cmath>
#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/cpu/kfac_checks.hpp"
#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace damping_detail {

/// A damping of 0 that must be raised starts here (relative to the mean
/// diagonal of the factor).
constexpr double zero_floor = 1e-6;

inline bool is_numerical_failure(const caf::error& err) {
  return err && err.category() == error_category
         && err.code() == static_cast<uint8_t>(ec::numerical_failure);
}

} // namespace damping_detail

/// `attempt(damping)` (a caf::error, none on success), retried as above.
/// Returns the damping that worked; a failure other than numerical_failure
/// is returned at once; exhausting the retries is numerical_failure naming
/// `op`, the dampings tried and the last failure.
template <class Attempt>
caf::expected<float> retry_damping(const char* op, const tensor& factor,
                                   float damping, int max_retries,
                                   Attempt attempt) {
  using namespace damping_detail;
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
    if (!is_numerical_failure(last) || i == max_retries)
      break;
    float next = current * 10.0f;
    if (current == 0.0f) {
      // The factor is square and finite here (else no numerical_failure).
      auto n = factor.dim(0);
      double trace = 0.0;
      for (int64_t k = 0; k < n; ++k)
        trace += factor[k * n + k];
      auto mean = trace / static_cast<double>(n);
      next = static_cast<float>(zero_floor * (mean > 0 ? mean : 1.0));
    }
    if (!std::isfinite(next))
      break;
    current = next;
  }
  if (!is_numerical_failure(last))
    return last;
  return make_error(ec::numerical_failure,
                    std::string{op} + ": damping "
                      + cpu::number_text(damping) + " raised up to "
                      + cpu::number_text(current) + " within "
                      + std::to_string(max_retries)
                      + " retries (x10 each) did not help; last: "
                      + render(last));
}

} // namespace syncfac
