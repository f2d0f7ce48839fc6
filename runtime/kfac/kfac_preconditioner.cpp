#include "runtime/kfac/kfac_preconditioner.hpp"

#include <cmath>
#include <map>

#include "kernels/cpu/kfac_inverse.hpp"
#include "runtime/error.hpp"

namespace syncfac {

namespace {

/// A layer's weight gradient [.., out] and bias gradient [out] as one
/// matrix [rows + 1, out], bias last (A's bias row and column are last).
tensor to_matrix(const tensor& w, const tensor& b) {
  auto out = b.size();
  auto rows = out > 0 ? w.size() / out : 0;
  tensor m{rows + 1, out};
  std::copy(w.data(), w.data() + w.size(), m.data());
  std::copy(b.data(), b.data() + out, m.data() + rows * out);
  return m;
}

void from_matrix(const tensor& m, tensor& w, tensor& b) {
  std::copy(m.data(), m.data() + w.size(), w.data());
  std::copy(m.data() + w.size(), m.data() + w.size() + b.size(), b.data());
}

} // namespace

const char* to_string(fisher_type x) noexcept {
  return x == fisher_type::sampled ? "sampled" : "empirical";
}

const char* to_string(inverse_mode x) noexcept {
  return x == inverse_mode::cholesky ? "cholesky" : "eigen";
}

const char* to_string(kfac_momentum x) noexcept {
  return x == kfac_momentum::adam ? "adam" : "regular";
}

caf::expected<kfac_momentum> parse_kfac_momentum(const std::string& str) {
  for (auto x : {kfac_momentum::adam, kfac_momentum::regular})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown K-FAC momentum type '" + str
                      + "' (expected adam or regular)");
}

caf::expected<fisher_type> parse_fisher_type(const std::string& str) {
  for (auto x : {fisher_type::sampled, fisher_type::empirical})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown Fisher type '" + str
                      + "' (expected sampled or empirical)");
}

caf::expected<inverse_mode> parse_inverse_mode(const std::string& str) {
  for (auto x : {inverse_mode::cholesky, inverse_mode::eigen})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown inverse mode '" + str
                      + "' (expected cholesky or eigen)");
}

caf::error kfac_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "kfac: " + what);
  };
  if (!(cov_ema_decay >= 0 && cov_ema_decay < 1))
    return bad("cov_ema_decay must be in [0, 1), got "
               + std::to_string(cov_ema_decay));
  if (!(damping > 0) || !std::isfinite(damping))
    return bad("damping must be positive, got " + std::to_string(damping));
  if (invert_every < 1)
    return bad("invert_every must be at least 1, got "
               + std::to_string(invert_every));
  if (min_cov_updates < 1)
    return bad("min_cov_updates must be at least 1, got "
               + std::to_string(min_cov_updates));
  if (!(kl_clip >= 0))
    return bad("kl_clip must not be negative");
  if (max_damping_retries < 0)
    return bad("max_damping_retries must not be negative");
  if (sampling.max_examples < 0 || sampling.max_locations < 0)
    return bad("statistics sub-sampling counts must not be negative");
  return caf::none;
}

kfac_preconditioner::kfac_preconditioner(kfac_config cfg,
                                         std::vector<layer_state> layers)
  : cfg_(cfg), layers_(std::move(layers)) {
}

caf::expected<kfac_preconditioner>
kfac_preconditioner::make(const kfac_config& cfg,
                          const std::vector<kfac_view>& views,
                          const parameter_set& params) {
  if (auto err = cfg.validate())
    return err;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i)
    index[params[i].name] = i;
  std::vector<layer_state> layers;
  for (const auto& v : views) {
    auto w = index.find(v.weight_name);
    auto b = index.find(v.bias_name);
    if (w == index.end() || b == index.end())
      return make_error(ec::unknown_name, "kfac: layer '" + v.layer
                                            + "' has no parameters '"
                                            + v.weight_name + "' and '"
                                            + v.bias_name + "'");
    layer_state l;
    l.name = v.layer;
    l.kind = v.kind;
    l.weight = w->second;
    l.bias = b->second;
    layers.push_back(std::move(l));
  }
  return kfac_preconditioner{cfg, std::move(layers)};
}

caf::error kfac_preconditioner::update_factors(
  const std::vector<kfac_view>& views, int threads) {
  if (views.size() != layers_.size())
    return make_error(ec::shape_mismatch,
                      "kfac: " + std::to_string(views.size())
                        + " layer views for "
                        + std::to_string(layers_.size()) + " layers");
  tensor a;
  tensor g;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    const auto& v = views[i];
    if (v.layer != l.name || v.input == nullptr
        || v.preactivation_grad == nullptr)
      return make_error(ec::invalid_argument,
                        "kfac: no statistics for layer '" + l.name
                          + "' (run a backward pass first)");
    auto err = v.kind == layer_kind::conv2d
                 ? cpu::conv_factors(v.geometry, *v.input,
                                     *v.preactivation_grad, true,
                                     cfg_.sampling, threads, a, g)
                 : cpu::dense_factors(*v.input, *v.preactivation_grad, true,
                                      cfg_.sampling, threads, a, g);
    if (err)
      return with_context(err, "kfac: statistics of layer '" + l.name + "'");
    if (v.kind == layer_kind::conv2d)
      l.locations = v.geometry.locations();
    // Both or neither: a factor pair must stay on the same update count.
    auto a_raw = l.a_raw;
    auto a_weight = l.a_weight;
    if (auto e1 = cpu::ema_update(a_raw, a_weight, a, cfg_.cov_ema_decay))
      return with_context(e1, "kfac: factor A of layer '" + l.name + "'");
    if (auto e2 = cpu::ema_update(l.g_raw, l.g_weight, g, cfg_.cov_ema_decay))
      return with_context(e2, "kfac: factor G of layer '" + l.name + "'");
    l.a_raw = std::move(a_raw);
    l.a_weight = a_weight;
    ++l.cov_updates;
  }
  return caf::none;
}

caf::error kfac_preconditioner::invert(layer_state& l) {
  tensor a;
  tensor g;
  if (auto err = cpu::ema_value(l.a_raw, l.a_weight, a))
    return err;
  if (auto err = cpu::ema_value(l.g_raw, l.g_weight, g))
    return err;
  if (cfg_.mode == inverse_mode::eigen) {
    tensor qa, ea, qg, eg;
    if (auto err = cpu::symmetric_eigen(a, ea, qa))
      return err;
    if (auto err = cpu::symmetric_eigen(g, eg, qg))
      return err;
    l.a_inv = std::move(qa);
    l.a_vals = std::move(ea);
    l.g_inv = std::move(qg);
    l.g_vals = std::move(eg);
    return caf::none;
  }
  auto plan = cpu::factored_damping(a, g, cfg_.damping, l.locations);
  tensor a_inv, g_inv;
  auto da = cpu::damped_inverse_with_retry(a, plan.a_damping,
                                           cfg_.max_damping_retries, a_inv);
  if (!da)
    return da.error();
  auto dg = cpu::damped_inverse_with_retry(g, plan.g_damping,
                                           cfg_.max_damping_retries, g_inv);
  if (!dg)
    return dg.error();
  if (*da > plan.a_damping || *dg > plan.g_damping)
    ++damping_increases_;
  l.a_inv = std::move(a_inv);
  l.g_inv = std::move(g_inv);
  return caf::none;
}

caf::error kfac_preconditioner::update_inverses() {
  caf::error first;
  for (auto& l : layers_) {
    if (l.cov_updates < cfg_.min_cov_updates)
      continue;
    if (auto err = invert(l)) {
      if (!first)
        first = with_context(err, "kfac: layer '" + l.name
                                    + "' keeps its previous inverse");
      continue;
    }
    l.ready = true;
  }
  return first;
}

caf::expected<double>
kfac_preconditioner::precondition(parameter_set& grads) const {
  double dot = 0;
  tensor out;
  for (const auto& l : layers_) {
    if (!l.ready)
      continue;
    if (l.weight >= grads.size() || l.bias >= grads.size())
      return make_error(ec::shape_mismatch,
                        "kfac: gradients lack layer '" + l.name + "'");
    auto& w = grads[l.weight].value;
    auto& b = grads[l.bias].value;
    auto v = to_matrix(w, b);
    auto err = cfg_.mode == inverse_mode::eigen
                 ? cpu::precondition_eigen(v, l.a_inv, l.a_vals, l.g_inv,
                                           l.g_vals, cfg_.damping,
                                           l.locations, out)
                 : cpu::precondition_factored(
                   v, l.a_inv, l.g_inv,
                   1.0f / static_cast<float>(l.locations), out);
    if (err)
      return with_context(err, "kfac: layer '" + l.name + "'");
    for (int64_t i = 0; i < v.size(); ++i)
      dot += static_cast<double>(v[i]) * out[i];
    from_matrix(out, w, b);
  }
  return dot;
}

size_t kfac_preconditioner::ready_layers() const {
  size_t n = 0;
  for (const auto& l : layers_)
    n += l.ready ? 1 : 0;
  return n;
}

} // namespace syncfac
