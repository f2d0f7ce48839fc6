#include "runtime/kfac/kfac_update.hpp"

#include <algorithm>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/kfac_inverter.hpp"
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
/// inverse; the rest keep source[i]. Returns Σ⟨source, F̂⁻¹ source⟩,
/// summed in layer order whatever the thread count. Each layer's product
/// runs on one thread; with several, the layers go out largest first
/// (their products cost ~ rows·cols·(rows + cols)), which balances the
/// autoencoder's mirrored layers on two threads.
caf::expected<double>
precondition_all(const std::vector<kfac_layer_slot>& layers,
                 kfac_inverter& kernels, std::vector<tensor>& directions,
                 size_t& preconditioned, int threads) {
  std::vector<size_t> order;
  std::vector<double> cost(layers.size(), 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].inverse == nullptr)
      continue;
    auto rows = static_cast<double>(layers[i].inverse->a.size() > 0
                                      ? layers[i].inverse->a.dim(0) : 0);
    auto cols = static_cast<double>(directions[layers[i].bias].size());
    cost[i] = rows * cols * (rows + cols);
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return cost[x] > cost[y]; });
  std::vector<double> dots(layers.size(), 0);
  std::vector<caf::error> errors(layers.size());
  auto one = [&](int64_t k, int) {
    const auto& l = layers[order[static_cast<size_t>(k)]];
    auto& w = directions[l.weight];
    auto& b = directions[l.bias];
    tensor out;
    auto d = precondition_layer(*l.inverse, layer_matrix(w, b), out,
                                kernels);
    if (!d) {
      errors[order[static_cast<size_t>(k)]] = d.error();
      return;
    }
    dots[order[static_cast<size_t>(k)]] = *d;
    split_layer_matrix(out, w, b);
  };
  auto n = static_cast<int64_t>(order.size());
  cpu::parallel_for(kernels.concurrent() ? std::max(threads, 1) : 1, n, one);
  double dot = 0;
  preconditioned = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (errors[i])
      return with_context(errors[i], "kfac update");
    if (layers[i].inverse == nullptr)
      continue;
    dot += dots[i];
    ++preconditioned;
  }
  return dot;
}

} // namespace

caf::expected<kfac_step_info>
kfac_apply(optimizer& opt, parameter_set& params,
           const std::vector<tensor>& grads,
           const std::vector<kfac_layer_slot>& layers,
           kfac_inverter& kernels, const std::vector<bool>& left_out,
           int threads) {
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
                              info.preconditioned, threads);
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
