#include "runtime/kfac/kfac_update.hpp"

#include <algorithm>
#include <utility>

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

/// The direction before preconditioning of each variable: μv + ∇ (adam)
/// or ∇ (regular), element by element; nothing is stored.
struct direction_of {
  bool adam;
  float mu;

  float operator()(const float* v, const float* g, int64_t k) const {
    return adam ? mu * v[k] + g[k] : g[k];
  }
};

/// F̂⁻¹ applied to each layer with an inverse: preconditioned[i] is layer
/// i's [rows + 1, cols] matrix (weight rows, bias row last) of F̂⁻¹ times
/// its direction, built straight from the velocities and gradients. The
/// return value is Σ⟨direction, F̂⁻¹ direction⟩, summed in layer order
/// whatever the thread count. Each layer's product runs on one thread;
/// with several, the layers go out largest first (their products cost ~
/// rows·cols·(rows + cols)), which balances the autoencoder's mirrored
/// layers on two threads.
caf::expected<double>
precondition_all(const std::vector<kfac_layer_slot>& layers,
                 kfac_inverter& kernels, product_precision precision,
                 const optimizer& opt, const std::vector<tensor>& grads,
                 direction_of direction, std::vector<tensor>& preconditioned,
                 size_t& count, int threads) {
  std::vector<size_t> order;
  std::vector<double> cost(layers.size(), 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].inverse == nullptr)
      continue;
    auto rows = static_cast<double>(layers[i].inverse->a.size() > 0
                                      ? layers[i].inverse->a.dim(0) : 0);
    auto cols = static_cast<double>(grads[layers[i].bias].size());
    cost[i] = rows * cols * (rows + cols);
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return cost[x] > cost[y]; });
  std::vector<double> dots(layers.size(), 0);
  std::vector<caf::error> errors(layers.size());
  preconditioned.assign(layers.size(), tensor{});
  auto one = [&](int64_t k, int) {
    auto i = order[static_cast<size_t>(k)];
    const auto& l = layers[i];
    auto weights = grads[l.weight].size();
    auto cols = grads[l.bias].size();
    const float* gw = grads[l.weight].data();
    const float* gb = grads[l.bias].data();
    const float* vw = opt.velocity(l.weight).data();
    const float* vb = opt.velocity(l.bias).data();
    tensor m{weights / std::max<int64_t>(cols, 1) + 1, cols};
    auto* dst = m.data();
    for (int64_t e = 0; e < weights; ++e)
      dst[e] = direction(vw, gw, e);
    for (int64_t e = 0; e < cols; ++e)
      dst[weights + e] = direction(vb, gb, e);
    auto d = precondition_layer(*l.inverse, m, preconditioned[i], kernels,
                                precision);
    if (!d) {
      errors[i] = d.error();
      return;
    }
    dots[i] = *d;
  };
  auto n = static_cast<int64_t>(order.size());
  cpu::parallel_for(kernels.concurrent() ? std::max(threads, 1) : 1, n, one);
  double dot = 0;
  count = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (errors[i])
      return with_context(errors[i], "kfac update");
    if (layers[i].inverse == nullptr)
      continue;
    dot += dots[i];
    ++count;
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
  // The rate as scheduled for this global step (optimizer::set_global_step).
  const float lr = opt.rate();
  // A clipped gradient (optimizer::set_gradient_scale) is scaled first;
  // the L2 penalty's gradient is part of the objective's: it is added
  // after the clip and before the preconditioning (weights only, as
  // optimizer::update_span).
  const float scale = opt.gradient_scale();
  const bool adjusted = scale != 1.0f || cfg.l2_penalty > 0;
  std::vector<tensor> penalised;
  if (adjusted) {
    penalised = grads;
    for (size_t i = 0; i < params.size(); ++i) {
      if (skipped(i))
        continue;
      auto* g = penalised[i].data();
      if (scale != 1.0f)
        for (int64_t k = 0; k < penalised[i].size(); ++k)
          g[k] *= scale;
      if (cfg.l2_penalty > 0 && decays(params[i].value.shape().size())) {
        const auto* theta = params[i].value.data();
        for (int64_t k = 0; k < penalised[i].size(); ++k)
          g[k] += cfg.l2_penalty * theta[k];
      }
    }
  }
  const auto& objective = adjusted ? penalised : grads;
  kfac_step_info info;
  bool adam = cfg.kfac.momentum == kfac_momentum::adam;
  direction_of direction{adam, mu};
  // The preconditioned directions first; variables and velocities change
  // only once this succeeded.
  std::vector<tensor> preconditioned;
  auto dot = precondition_all(layers, kernels, cfg.kfac.precision, opt,
                              objective, direction, preconditioned,
                              info.preconditioned, threads);
  if (!dot)
    return dot.error();
  info.dot = *dot;
  info.scale = cpu::kl_clip_scale(lr, cfg.kfac.kl_clip, info.dot);
  auto c = static_cast<float>(info.scale);
  // u of each variable: its rows of its layer's preconditioned matrix, or
  // (no inverse) its direction itself.
  std::vector<const float*> step_of(params.size(), nullptr);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (preconditioned[i].empty())
      continue;
    const float* u = std::as_const(preconditioned[i]).data();
    step_of[layers[i].weight] = u;
    step_of[layers[i].bias] = u + grads[layers[i].weight].size();
  }
  opt.begin_step();
  for (size_t i = 0; i < params.size(); ++i) {
    if (skipped(i))
      continue;
    if (opt.is_moving_statistic(i)) {
      // Its own rule, on its gradient as pushed: no clip, rate or KL clip
      // (runtime/moving_statistic.hpp).
      if (auto err = opt.update(i, params[i].value, grads[i]))
        return err;
      continue;
    }
    auto* theta = params[i].value.data();
    auto* v = opt.velocity(i).data();
    const float* g = objective[i].data();
    const float* u = step_of[i];
    auto n = params[i].value.size();
    // Decoupled weight decay: the variable shrinks by the scheduled rate
    // times the decay before the update, outside the KL clip and the
    // preconditioning (as optimizer::update_span).
    if (cfg.weight_decay > 0 && decays(params[i].value.shape().size())) {
      const float keep = 1.0f - lr * cfg.weight_decay;
      for (int64_t k = 0; k < n; ++k)
        theta[k] *= keep;
    }
    if (adam) {
      for (int64_t k = 0; k < n; ++k) {
        float d = mu * v[k] + g[k];
        v[k] = d;
        theta[k] -= lr * c * (u != nullptr ? u[k] : d);
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        v[k] = mu * v[k] + c * (u != nullptr ? u[k] : g[k]);
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
