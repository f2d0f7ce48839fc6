#pragma once

// Moving statistics: variables that no optimizer trains, batch_norm's
// moving mean and variance (docs/models.md, "Batch normalisation"). A
// worker pushes, in a statistic's gradient slot, (1 - momentum) (moving -
// its batch's statistic); the PS shard subtracts the average of the step's
// pushes, so the variable becomes momentum · moving + (1 - momentum) · (the
// mean of the replicas' batch statistics): the exponential moving average
// of synchronous replicas, kept, averaged and checkpointed like any
// variable. No learning rate, schedule, clip, weight decay, L2 penalty or
// preconditioning touches it, and it is not part of the gradient's norm.

#include <string_view>

namespace syncfac {

inline constexpr std::string_view moving_mean_suffix = "/moving_mean";
inline constexpr std::string_view moving_variance_suffix = "/moving_variance";

/// Whether the variable `name` is a moving statistic (by its suffix).
inline bool is_moving_statistic(std::string_view name) noexcept {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() > suffix.size()
           && name.substr(name.size() - suffix.size()) == suffix;
  };
  return ends_with(moving_mean_suffix) || ends_with(moving_variance_suffix);
}

} // namespace syncfac
