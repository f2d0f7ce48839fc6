#include "runtime/optimizer.hpp"

#include <cmath>
#include <sstream>

#include <Eigen/Core>

#include "runtime/base/error.hpp"
#include "runtime/base/parse_enum.hpp"
#include "runtime/gradient_clip.hpp"
#include "runtime/moving_statistic.hpp"

namespace syncfac {

namespace {

using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

parameter_set zeros_like(const parameter_set& xs) {
  parameter_set result;
  result.reserve(xs.size());
  for (const auto& x : xs)
    result.push_back(named_tensor{x.name, tensor{x.value.shape()}});
  return result;
}

} // namespace

const char* to_string(optimizer_kind x) noexcept {
  switch (x) {
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::momentum: return "momentum";
    case optimizer_kind::adam: return "adam";
    case optimizer_kind::kfac: return "kfac";
  }
  return "?";
}

caf::expected<optimizer_kind> parse_optimizer_kind(const std::string& str) {
  return parse_enum(str,
                    {optimizer_kind::sgd, optimizer_kind::momentum,
                     optimizer_kind::adam, optimizer_kind::kfac},
                    "optimizer");
}

std::string describe(const optimizer_config& cfg) {
  std::ostringstream out;
  out << to_string(cfg.kind) << ", learning_rate " << cfg.learning_rate;
  auto schedule = describe(cfg.schedule);
  if (!schedule.empty())
    out << " (" << schedule << ")";
  if (cfg.weight_decay > 0)
    out << ", weight_decay " << cfg.weight_decay << " (decoupled)";
  if (cfg.l2_penalty > 0)
    out << ", l2_penalty " << cfg.l2_penalty;
  if (cfg.clip_norm > 0)
    out << ", clip_norm " << cfg.clip_norm;
  switch (cfg.kind) {
    case optimizer_kind::sgd:
      break;
    case optimizer_kind::momentum:
      out << ", momentum " << cfg.momentum
          << (cfg.nesterov ? " (nesterov)" : "");
      break;
    case optimizer_kind::adam:
      out << ", beta1 " << cfg.beta1 << ", beta2 " << cfg.beta2
          << ", epsilon " << cfg.epsilon;
      break;
    case optimizer_kind::kfac: {
      const auto& k = cfg.kfac;
      out << ", momentum " << cfg.momentum << " (" << to_string(k.momentum)
          << "), damping " << k.damping << ", cov_ema_decay "
          << k.cov_ema_decay << ", invert_every " << k.invert_every << " ("
          << to_string(k.cadence) << "), fisher " << to_string(k.fisher)
          << ", inverse " << to_string(k.mode) << ", statistics of ";
      auto count = [&out](int64_t n, const char* what) {
        if (n > 0)
          out << n << " " << what;
        else
          out << "all " << what;
      };
      count(k.sampling.max_examples, "examples");
      out << " x ";
      count(k.sampling.max_locations, "locations");
      if (k.stats_every > 1)
        out << " every " << k.stats_every << " steps";
      if (k.kl_clip > 0)
        out << ", kl_clip " << k.kl_clip;
      break;
    }
  }
  return out.str();
}

caf::error optimizer_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "optimizer: " + what);
  };
  if (!(learning_rate > 0) || !std::isfinite(learning_rate))
    return bad("learning_rate must be a positive number, got "
               + std::to_string(learning_rate));
  if (!(momentum >= 0 && momentum < 1))
    return bad("momentum must be in [0, 1), got " + std::to_string(momentum));
  if (nesterov && kind != optimizer_kind::momentum)
    return bad(std::string{"--nesterov is a rule of --optimizer momentum, "
                           "not of "}
               + to_string(kind));
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return bad("adam betas must be in [0, 1), got "
               + std::to_string(beta1) + " and " + std::to_string(beta2));
  if (!(epsilon > 0))
    return bad("adam epsilon must be positive, got "
               + std::to_string(epsilon));
  if (!(weight_decay >= 0 && weight_decay < 1))
    return bad("--weight_decay must be in [0, 1), got "
               + std::to_string(weight_decay));
  if (!(l2_penalty >= 0 && std::isfinite(l2_penalty)))
    return bad("--l2_penalty must be >= 0, got "
               + std::to_string(l2_penalty));
  if (!(clip_norm >= 0 && std::isfinite(clip_norm)))
    return bad("--clip_norm must be >= 0 (0: no clipping), got "
               + std::to_string(clip_norm));
  if (auto err = schedule.validate())
    return err;
  if (kind == optimizer_kind::kfac)
    if (auto err = kfac.validate())
      return err;
  return caf::none;
}

optimizer::optimizer(optimizer_config config, optimizer_slots slots,
                     std::vector<std::string> names,
                     std::vector<tensor_shape> shapes)
  : config_(config),
    slots_(std::move(slots)),
    rate_(config.learning_rate),
    names_(std::move(names)),
    shapes_(std::move(shapes)) {
  for (const auto& name : names_)
    statistic_.push_back(syncfac::is_moving_statistic(name));
}

caf::expected<optimizer> optimizer::make(const optimizer_config& config,
                                         const parameter_set& params) {
  if (auto err = config.validate())
    return err;
  optimizer_slots slots;
  if (config.kind != optimizer_kind::sgd)
    slots.first = zeros_like(params);
  if (config.kind == optimizer_kind::adam)
    slots.second = zeros_like(params);
  std::vector<std::string> names;
  std::vector<tensor_shape> shapes;
  for (const auto& p : params) {
    names.push_back(p.name);
    shapes.push_back(p.value.shape());
  }
  return optimizer{config, std::move(slots), std::move(names),
                   std::move(shapes)};
}

caf::error optimizer::restore(optimizer_slots slots) {
  if (auto err = check_matches(slots_.first, slots.first, "optimizer slots"))
    return err;
  if (auto err = check_matches(slots_.second, slots.second,
                               "optimizer second-moment slots"))
    return err;
  slots_ = std::move(slots);
  return caf::none;
}

caf::error optimizer::apply(parameter_set& params,
                            const parameter_set& grads) {
  if (auto err = check_matches(params, grads, "gradients"))
    return err;
  if (params.size() != shapes_.size())
    return make_error(ec::shape_mismatch,
                      "optimizer: made for " + std::to_string(shapes_.size())
                        + " variables, got " + std::to_string(params.size()));
  for (size_t i = 0; i < params.size(); ++i)
    if (auto err = check_variable(i, params[i].value))
      return err;
  // Standalone, the updates so far are the global step, and these
  // gradients are all of the step's.
  set_global_step(slots_.step);
  clip_to_global_norm(grads.size(),
                      [&](size_t i) -> const tensor& { return grads[i].value; });
  begin_step();
  for (size_t i = 0; i < params.size(); ++i)
    update_span(i, params[i].value.data(), grads[i].value.data(), 0,
                params[i].value.size());
  return caf::none;
}

caf::error optimizer::check_variable(size_t i, const tensor& param) const {
  if (i >= shapes_.size())
    return make_error(ec::unknown_name, "optimizer: no variable #"
                                          + std::to_string(i));
  if (param.shape() != shapes_[i])
    return make_error(ec::shape_mismatch,
                      "optimizer: variable '" + names_[i] + "' is "
                        + to_string(shapes_[i]) + ", got "
                        + param.shape_string());
  return caf::none;
}

caf::error optimizer::update(size_t i, tensor& param, const tensor& grad) {
  if (auto err = check_variable(i, param))
    return err;
  if (grad.shape() != param.shape() || grad.size() != param.size())
    return make_error(ec::shape_mismatch,
                      "optimizer: gradient of '" + names_[i] + "' is "
                        + grad.shape_string() + ", expected "
                        + param.shape_string());
  update_span(i, param.data(), grad.data(), 0, param.size());
  return caf::none;
}

caf::error optimizer::update_rows(size_t i, tensor& param,
                                  const std::vector<int64_t>& indices,
                                  const tensor& rows) {
  if (auto err = check_variable(i, param))
    return err;
  if (param.rank() < 1)
    return make_error(ec::shape_mismatch, "optimizer: variable '"
                                            + names_[i]
                                            + "' has no rows");
  auto row_size = param.size() / std::max<int64_t>(param.dim(0), 1);
  auto k = static_cast<int64_t>(indices.size());
  if (rows.size() != k * row_size)
    return make_error(ec::shape_mismatch,
                      "optimizer: " + std::to_string(k) + " rows of '"
                        + names_[i] + "' need "
                        + std::to_string(k * row_size) + " values, got "
                        + rows.shape_string());
  for (auto index : indices)
    if (index < 0 || index >= param.dim(0))
      return make_error(ec::invalid_argument,
                        "optimizer: row " + std::to_string(index) + " of '"
                          + names_[i] + "' is out of range");
  for (int64_t r = 0; r < k; ++r) {
    auto offset = indices[static_cast<size_t>(r)] * row_size;
    update_span(i, param.data() + offset, rows.data() + r * row_size, offset,
                row_size);
  }
  return caf::none;
}

void optimizer::update_span(size_t i, float* theta_ptr, const float* grad_ptr,
                            int64_t offset, int64_t n) {
  array_map theta(theta_ptr, n);
  if (statistic_[i]) {
    // A moving statistic's own rule (runtime/moving_statistic.hpp).
    theta -= const_array_map(grad_ptr, n);
    return;
  }
  const float lr = rate_;
  // Weights decay, biases do not (decays()). The L2 penalty's gradient
  // joins the averaged one; decoupled decay shrinks the variable before
  // the update, as PyTorch's SGD/AdamW with decoupled weight decay do.
  // A clipped gradient is scaled first: the penalty is not clipped (as
  // PyTorch's clip_grad_norm_ before an optimizer's weight_decay). x * 1
  // is x, so an unclipped step with a penalty keeps its bits.
  const bool decaying = decays(shapes_[i].size());
  const bool penalty = decaying && config_.l2_penalty > 0;
  Eigen::ArrayXf adjusted;
  if (gradient_scale_ != 1.0f || penalty) {
    adjusted = gradient_scale_ * const_array_map(grad_ptr, n);
    if (penalty)
      adjusted += config_.l2_penalty * theta;
  }
  const_array_map g(adjusted.size() > 0 ? adjusted.data() : grad_ptr, n);
  if (decaying && config_.weight_decay > 0)
    theta *= 1.0f - lr * config_.weight_decay;
  switch (config_.kind) {
    case optimizer_kind::sgd:
      theta -= lr * g;
      break;
    case optimizer_kind::momentum:
    // K-FAC's own rule is kfac_apply (runtime/kfac/kfac_update.hpp); here
    // kind kfac is plain momentum, as for layers without an inverse.
    case optimizer_kind::kfac: {
      array_map v(slots_.first[i].value.data() + offset, n);
      v = config_.momentum * v + g;
      if (config_.nesterov)
        theta -= lr * (g + config_.momentum * v);
      else
        theta -= lr * v;
      break;
    }
    case optimizer_kind::adam: {
      array_map m(slots_.first[i].value.data() + offset, n);
      array_map s(slots_.second[i].value.data() + offset, n);
      m = config_.beta1 * m + (1 - config_.beta1) * g;
      s = config_.beta2 * s + (1 - config_.beta2) * g.square();
      auto t = static_cast<double>(std::max<int64_t>(slots_.step, 1));
      auto c1 = static_cast<float>(1 - std::pow(config_.beta1, t));
      auto c2 = static_cast<float>(1 - std::pow(config_.beta2, t));
      theta -= lr * (m / c1) / ((s / c2).sqrt() + config_.epsilon);
      break;
    }
  }
}

} // namespace syncfac
