#pragma once

// The shape checks of the kernels that have a host default and a CUDA
// version of their own (average pooling: kernels/average_pool.cpp; batch
// normalisation: kernels/batch_norm.cpp; kernels/cuda/normalisation.cu),
// so that both refuse a shape with the same words.

#include <cstdint>
#include <string>
#include <utility>

#include <caf/error.hpp>

#include "kernels/geometry.hpp"
#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::shape_checks {

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

/// batch_norm_forward's operands.
inline caf::error check_batch_norm_forward(const char* op, const tensor& x,
                                           const tensor& gamma,
                                           const tensor& beta,
                                           const tensor& mean,
                                           const tensor& inv_std) {
  if (auto err = check_input(op, x))
    return err;
  for (auto [v, what] : {std::pair{&gamma, "gamma"}, {&beta, "beta"},
                         {&mean, "mean"}, {&inv_std, "inv_std"}})
    if (auto err = check_channels(op, x, *v, what))
      return err;
  return caf::none;
}

/// batch_norm_backward's operands.
inline caf::error check_batch_norm_backward(const char* op, const tensor& x,
                                            const tensor& gamma,
                                            const tensor& mean,
                                            const tensor& inv_std,
                                            const tensor& y,
                                            const tensor& dy) {
  if (auto err = check_input(op, x))
    return err;
  for (auto [v, what] : {std::pair{&gamma, "gamma"}, {&mean, "mean"},
                         {&inv_std, "inv_std"}})
    if (auto err = check_channels(op, x, *v, what))
      return err;
  for (auto [v, what] : {std::pair{&y, "output"}, {&dy, "gradient"}})
    if (v->shape() != x.shape())
      return make_error(ec::shape_mismatch,
                        std::string{op} + ": " + what + " "
                          + v->shape_string() + " differs from input "
                          + x.shape_string());
  return caf::none;
}

/// An avg_pool kernel's tensor (`what`: "input" or "gradient") of shape
/// `expected` (`side`: the geometry's "input" or "output").
inline caf::error check_pool_operand(const char* op, const char* what,
                                     const tensor& t,
                                     const tensor_shape& expected,
                                     const char* side) {
  if (t.shape() != expected)
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": " + what + " " + t.shape_string()
                        + " does not fit geometry " + side + " "
                        + to_string(expected));
  return caf::none;
}

} // namespace syncfac::shape_checks
