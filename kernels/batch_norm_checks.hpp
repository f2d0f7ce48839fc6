#pragma once

// The shape checks of the batch_norm kernels, shared by the host defaults
// (kernels/batch_norm.cpp) and the CUDA backend's own, so both refuse a
// shape with the same words.

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::batch_norm_checks {

/// x's last axis.
inline int64_t channels_of(const tensor& x) {
  return x.rank() < 1 ? 0 : x.shape().back();
}

/// v is one value per channel of x.
inline caf::error check_channels(const char* op, const tensor& x,
                                 const tensor& v, const char* what) {
  if (v.rank() != 1 || v.size() != channels_of(x))
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": " + what + " " + v.shape_string()
                        + " does not fit the " + std::to_string(channels_of(x))
                        + " channels of input " + x.shape_string());
  return caf::none;
}

/// x holds at least one position per channel.
inline caf::error check_input(const char* op, const tensor& x) {
  if (x.rank() < 2 || x.size() == 0)
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": input " + x.shape_string()
                        + " needs rank >= 2 and at least one position per "
                          "channel");
  return caf::none;
}

} // namespace syncfac::batch_norm_checks
