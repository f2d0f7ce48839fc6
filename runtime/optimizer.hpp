#pragma once

// First-order optimizers: hyperparameters (optimizer_config) apart from the
// per-parameter state (optimizer_slots), which is serialisable so that a
// checkpoint or a PS shard hand-over can carry it.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/gradient_clip.hpp"
#include "runtime/inspect.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac {

struct optimizer_slots {
  /// Updates applied so far (Adam's bias correction needs it).
  int64_t step = 0;
  /// Momentum velocity, or Adam's first moment.
  parameter_set first;
  /// Adam's second moment; empty otherwise.
  parameter_set second;
};

SYNCFAC_INSPECT(optimizer_slots, x.step, x.first, x.second)

class optimizer {
public:
  /// An optimizer for parameters shaped like `params`, slots at zero.
  static caf::expected<optimizer> make(const optimizer_config& config,
                                       const parameter_set& params);

  /// One update of `params` with `grads` (same names and shapes, finite),
  /// clipped by their global norm when the config says so.
  caf::error apply(parameter_set& params, const parameter_set& grads);

  /// The update to come is global step `global_step`'s (0-based: the one
  /// that makes global step global_step + 1): its learning rate is the
  /// schedule's for that step. Unset, the rate is the base rate.
  void set_global_step(int64_t global_step) noexcept {
    rate_ = config_.rate_at(global_step);
  }

  /// The factor the gradients of the updates to come are multiplied by
  /// (clip_factor of the step's global norm; 1: unclipped). apply() sets
  /// it itself from the gradients it is given.
  void set_gradient_scale(float scale) noexcept {
    gradient_scale_ = scale;
  }

  /// Sets the gradient scale of the update to come from the step's whole
  /// gradients, one per variable in order (`grad(i)` gives variable i's):
  /// clip_factor of their global norm, moving statistics left out; 1
  /// without --clip_norm. What apply() does for itself, for a caller that
  /// drives the update (K-FAC on a device).
  template <class GradientOf>
  void clip_to_global_norm(size_t count, GradientOf&& grad) {
    double squares = 0;
    if (config_.clip_norm > 0)
      for (size_t i = 0; i < count; ++i)
        if (!is_moving_statistic(i))
          squares += sum_of_squares(grad(i));
    set_gradient_scale(clip_factor(squares, config_.clip_norm));
  }

  float gradient_scale() const noexcept {
    return gradient_scale_;
  }

  /// Starts one update step; then update() / update_rows() each variable
  /// that has a gradient (Adam's bias correction counts steps).
  void begin_step() noexcept {
    ++slots_.step;
  }

  /// The learning rate of the updates to come.
  float rate() const noexcept {
    return rate_;
  }

  /// Updates variable i (the i-th of the set the optimizer was made for)
  /// with a dense gradient of its shape.
  caf::error update(size_t i, tensor& param, const tensor& grad);

  /// Updates only rows `indices` of variable i (and of its slots) with
  /// `rows` [indices.size(), ...row shape], as TF's sparse apply does;
  /// indices must be in range (the accumulator checked their order).
  caf::error update_rows(size_t i, tensor& param,
                         const std::vector<int64_t>& indices,
                         const tensor& rows);

  /// The momentum slot of variable i (kinds momentum and kfac), which
  /// K-FAC's update (runtime/kfac/kfac_update.hpp) drives itself.
  tensor& velocity(size_t i) {
    return slots_.first[i].value;
  }

  const tensor& velocity(size_t i) const {
    return slots_.first[i].value;
  }

  const optimizer_config& config() const noexcept {
    return config_;
  }

  /// Whether variable i is a moving statistic (batch_norm's moving mean
  /// and variance): update() subtracts its gradient as it is, outside the
  /// learning rate, the clip and the decay, and it is no part of the
  /// gradient's norm (runtime/moving_statistic.hpp).
  bool is_moving_statistic(size_t i) const noexcept {
    return i < statistic_.size() && statistic_[i];
  }

  const optimizer_slots& slots() const noexcept {
    return slots_;
  }

  /// Replaces the state, e.g. from a checkpoint; shapes must match.
  caf::error restore(optimizer_slots slots);

private:
  optimizer(optimizer_config config, optimizer_slots slots,
            std::vector<std::string> names, std::vector<tensor_shape> shapes);

  /// The update rule on values [offset, offset + n) of variable i.
  void update_span(size_t i, float* theta, const float* grad, int64_t offset,
                   int64_t n);

  caf::error check_variable(size_t i, const tensor& param) const;

  optimizer_config config_;
  optimizer_slots slots_;
  /// The scheduled learning rate of the update under way (begin_step).
  float rate_ = 0.0f;
  /// The clip factor of the update under way (set_gradient_scale).
  float gradient_scale_ = 1.0f;
  std::vector<std::string> names_;
  std::vector<tensor_shape> shapes_;
  /// statistic_[i]: variable i is a moving statistic.
  std::vector<bool> statistic_;
};

} // namespace syncfac
