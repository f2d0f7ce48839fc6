#include "runtime/optimizer.hpp"

#include <cmath>

#include <Eigen/Core>

#include "runtime/error.hpp"

namespace syncfac {

namespace {

using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

array_map as_array(tensor& x) {
  return array_map(x.data(), x.size());
}

const_array_map as_array(const tensor& x) {
  return const_array_map(x.data(), x.size());
}

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
  }
  return "?";
}

caf::expected<optimizer_kind> parse_optimizer_kind(const std::string& str) {
  for (auto x : {optimizer_kind::sgd, optimizer_kind::momentum,
                 optimizer_kind::adam})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown optimizer '" + str
                      + "' (expected sgd, momentum or adam)");
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
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return bad("adam betas must be in [0, 1), got "
               + std::to_string(beta1) + " and " + std::to_string(beta2));
  if (!(epsilon > 0))
    return bad("adam epsilon must be positive, got "
               + std::to_string(epsilon));
  return caf::none;
}

optimizer::optimizer(optimizer_config config, optimizer_slots slots)
  : config_(config), slots_(std::move(slots)) {
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
  return optimizer{config, std::move(slots)};
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
  const float lr = config_.learning_rate;
  ++slots_.step;
  for (size_t i = 0; i < params.size(); ++i) {
    auto theta = as_array(params[i].value);
    auto g = as_array(grads[i].value);
    switch (config_.kind) {
      case optimizer_kind::sgd:
        theta -= lr * g;
        break;
      case optimizer_kind::momentum: {
        auto v = as_array(slots_.first[i].value);
        v = config_.momentum * v + g;
        theta -= lr * v;
        break;
      }
      case optimizer_kind::adam: {
        auto m = as_array(slots_.first[i].value);
        auto s = as_array(slots_.second[i].value);
        m = config_.beta1 * m + (1 - config_.beta1) * g;
        s = config_.beta2 * s + (1 - config_.beta2) * g.square();
        auto t = static_cast<double>(slots_.step);
        auto c1 = static_cast<float>(1 - std::pow(config_.beta1, t));
        auto c2 = static_cast<float>(1 - std::pow(config_.beta2, t));
        theta -= lr * (m / c1) / ((s / c2).sqrt() + config_.epsilon);
        break;
      }
    }
  }
  return caf::none;
}

} // namespace syncfac
