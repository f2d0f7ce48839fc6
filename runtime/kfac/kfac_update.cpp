#include "runtime/kfac/kfac_update.hpp"

#include <algorithm>

#include "kernels/cpu/kfac_inverse.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {

tensor layer_matrix(const tensor& weight, const tensor& bias) {
  auto out = bias.size();
  auto rows = out > 0 ? weight.size() / out : 0;
  tensor m{rows + 1, out};
  std::copy(weight.data(), weight.data() + weight.size(), m.data());
  std::copy(bias.data(), bias.data() + out, m.data() + rows * out);
  return m;
}

void split_layer_matrix(const tensor& m, tensor& weight, tensor& bias) {
  std::copy(m.data(), m.data() + weight.size(), weight.data());
  std::copy(m.data() + weight.size(), m.data() + weight.size() + bias.size(),
            bias.data());
}

namespace {

/// directions[i] = F̂⁻¹ source[i] for the variables of layers with an
/// inverse; the rest keep source[i]. Returns Σ⟨source, F̂⁻¹ source⟩.
caf::expected<double>
precondition_all(const std::vector<kfac_layer_slot>& layers,
                 kfac_inverter& kernels, std::vector<tensor>& directions,
                 size_t& preconditioned) {
  double dot = 0;
  preconditioned = 0;
  tensor out;
  for (const auto& l : layers) {
    if (l.inverse == nullptr)
      continue;
    auto& w = directions[l.weight];
    auto& b = directions[l.bias];
    auto m = layer_matrix(w, b);
    auto d = precondition_layer(*l.inverse, m, out, kernels);
    if (!d)
      return with_context(d.error(), "kfac update");
    dot += *d;
    split_layer_matrix(out, w, b);
    ++preconditioned;
  }
  return dot;
}

} // namespace

caf::expected<kfac_step_info>
kfac_apply(optimizer& opt, parameter_set& params,
           const std::vector<tensor>& grads,
           const std::vector<kfac_layer_slot>& layers,
           kfac_inverter& kernels, const std::vector<bool>& left_out) {
  const auto& cfg = opt.config();
  if (cfg.kind != optimizer_kind::kfac)
    return make_error(ec::internal, "kfac update with a non-K-FAC optimizer");
  if (grads.size() != params.size())
    return make_error(ec::shape_mismatch,
                      "kfac update: " + std::to_string(grads.size())
                        + " gradients for " + std::to_string(params.size())
                        + " variables");
  if (!left_out.empty() && left_out.size() != params.size())
    return make_error(ec::internal,
                      "kfac update: " + std::to_string(left_out.size())
                        + " left-out flags for " + std::to_string(params.size())
                        + " variables");
  auto skipped = [&](size_t i) { return !left_out.empty() && left_out[i]; };
  for (const auto& l : layers) {
    if (l.weight >= params.size() || l.bias >= params.size())
      return make_error(ec::internal, "kfac update: layer index out of range");
    if (skipped(l.weight) || skipped(l.bias))
      return make_error(ec::internal,
                        "kfac update: a layer's variable "
                          + params[skipped(l.weight) ? l.weight : l.bias].name
                          + " is left out");
  }
  const float mu = cfg.momentum;
  const float lr = cfg.learning_rate;
  kfac_step_info info;
  bool adam = cfg.kfac.momentum == kfac_momentum::adam;
  // The directions: the new velocity (adam) or the gradient (regular),
  // preconditioned; slots change only once this succeeded.
  std::vector<tensor> directions(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (skipped(i))
      continue;
    if (adam) {
      const auto& v = opt.velocity(i);
      directions[i] = tensor(v.shape());
      for (int64_t k = 0; k < v.size(); ++k)
        directions[i][k] = mu * v[k] + grads[i][k];
    } else {
      directions[i] = grads[i];
    }
  }
  std::vector<tensor> velocities;
  if (adam)
    velocities = directions; // before preconditioning
  auto dot = precondition_all(layers, kernels, directions,
                              info.preconditioned);
  if (!dot)
    return dot.error();
  info.dot = *dot;
  info.scale = cpu::kl_clip_scale(lr, cfg.kfac.kl_clip, info.dot);
  auto c = static_cast<float>(info.scale);
  opt.begin_step();
  for (size_t i = 0; i < params.size(); ++i) {
    if (skipped(i))
      continue;
    auto& theta = params[i].value;
    auto& v = opt.velocity(i);
    const auto& u = directions[i];
    if (adam) {
      v = std::move(velocities[i]);
      for (int64_t k = 0; k < theta.size(); ++k)
        theta[k] -= lr * c * u[k];
    } else {
      for (int64_t k = 0; k < theta.size(); ++k) {
        v[k] = mu * v[k] + c * u[k];
        theta[k] -= lr * v[k];
      }
    }
  }
  return info;
}

caf::expected<kfac_step_info>
kfac_apply(optimizer& opt, parameter_set& params,
           const std::vector<tensor>& grads,
           const std::vector<kfac_layer_slot>& layers,
           const std::vector<bool>& left_out) {
  return kfac_apply(opt, params, grads, layers, cpu_kfac_inverter(),
                    left_out);
}

} // namespace syncfac
