#pragma once

// Hyperparameters of the first-order optimizers, apart from their
// per-parameter state (see runtime/optimizer.hpp).

#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/inspect.hpp"
#include "runtime/kfac/kfac_preconditioner.hpp"
#include "runtime/lr_schedule.hpp"

namespace syncfac {

enum class optimizer_kind : uint8_t {
  /// theta -= lr * g
  sgd,
  /// v = mu * v + g; theta -= lr * v (TF MomentumOptimizer, torch SGD)
  momentum,
  /// Adam with bias correction (Kingma & Ba).
  adam,
  /// K-FAC: momentum and the preconditioned gradient as kfac.momentum
  /// says (runtime/kfac/kfac_update.hpp); see `kfac`.
  kfac,
};

const char* to_string(optimizer_kind x) noexcept;
caf::expected<optimizer_kind> parse_optimizer_kind(const std::string& str);

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::momentum;
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  /// Nesterov's momentum (kind momentum only), as TF's MomentumOptimizer
  /// with use_nesterov: v = momentum v + g, theta -= rate (g + momentum v),
  /// the step taken from where the velocity is about to carry theta.
  bool nesterov = false;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  /// The learning rate over the global steps (its base: learning_rate).
  lr_schedule schedule;
  /// Decoupled weight decay (Loshchilov & Hutter): after each update,
  /// theta -= rate * weight_decay * theta, the rate as scheduled; the
  /// gradient and K-FAC's preconditioning do not see it.
  float weight_decay = 0.0f;
  /// The L2 form: l2_penalty * theta added to the averaged gradient before
  /// the update (before K-FAC's preconditioning, as the penalty's gradient
  /// is part of the objective's).
  float l2_penalty = 0.0f;
  /// Clipping by the global norm of the step's averaged gradient (0: off;
  /// runtime/gradient_clip.hpp): before the L2 penalty joins it and before
  /// K-FAC's preconditioning, whose step the KL clip (kfac.kl_clip) bounds
  /// after it.
  float clip_norm = 0.0f;
  /// K-FAC's own settings (kind kfac only).
  kfac_config kfac;

  caf::error validate() const;

  /// The learning rate of the update of global step `step`.
  float rate_at(int64_t step) const {
    return static_cast<float>(learning_rate * schedule.factor_at(step));
  }
};

/// Whether weight decay and the L2 penalty apply to a variable of `rank`:
/// weights, kernels and embedding tables (rank >= 2), not biases.
inline bool decays(size_t rank) noexcept {
  return rank >= 2;
}

/// One line naming the optimizer and every hyperparameter it uses, e.g.
/// "kfac, learning_rate 0.0003, momentum 0.9 (regular), damping 0.001,
/// ..." (the first log line of a run says what it trains with).
std::string describe(const optimizer_config& cfg);

SYNCFAC_INSPECT(optimizer_config, x.kind, x.learning_rate, x.momentum, x.beta1,
                x.beta2, x.epsilon, x.schedule, x.weight_decay, x.l2_penalty,
                x.clip_norm, x.kfac)

} // namespace syncfac
