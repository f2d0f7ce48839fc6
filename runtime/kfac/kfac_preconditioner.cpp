#include "runtime/kfac/kfac_preconditioner.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/kfac_inverter.hpp"
#include "runtime/kfac/kfac_data.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/least_counts.hpp"
#include "runtime/base/parse_enum.hpp"
#include "runtime/kfac/kfac_stats.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {


const char* to_string(fisher_type x) noexcept {
  return x == fisher_type::sampled ? "sampled" : "empirical";
}

const char* to_string(inverse_mode x) noexcept {
  switch (x) {
    case inverse_mode::cholesky: return "cholesky";
    case inverse_mode::eigen: return "eigen";
    case inverse_mode::explicit_inverse: return "explicit";
  }
  return "?";
}

const char* to_string(kfac_momentum x) noexcept {
  return x == kfac_momentum::adam ? "adam" : "regular";
}

caf::expected<kfac_momentum> parse_kfac_momentum(const std::string& str) {
  return parse_enum(str, {kfac_momentum::adam, kfac_momentum::regular},
                    "K-FAC momentum type");
}

const char* to_string(kfac_cadence x) noexcept {
  return x == kfac_cadence::counted ? "counted" : "exact";
}

caf::expected<kfac_cadence> parse_kfac_cadence(const std::string& str) {
  return parse_enum(str, {kfac_cadence::counted, kfac_cadence::exact},
                    "K-FAC cadence");
}

const char* to_string(product_precision x) noexcept {
  return x == product_precision::bf16 ? "bf16" : "fp32";
}

caf::expected<product_precision>
parse_product_precision(const std::string& str) {
  return parse_enum(str, {product_precision::fp32, product_precision::bf16},
                    "K-FAC product precision");
}

caf::expected<fisher_type> parse_fisher_type(const std::string& str) {
  return parse_enum(str, {fisher_type::sampled, fisher_type::empirical},
                    "Fisher type");
}

caf::expected<inverse_mode> parse_inverse_mode(const std::string& str) {
  return parse_enum(str,
                    {inverse_mode::cholesky, inverse_mode::eigen,
                     inverse_mode::explicit_inverse},
                    "inverse mode");
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
  if (auto why = first_below_least(
        {{"invert_every", invert_every, 1},
         {"stats_every", stats_every, 1},
         {"min_cov_updates", min_cov_updates, 1},
         {"max_damping_retries", max_damping_retries, 0}});
      !why.empty())
    return bad(why);
  if (precision == product_precision::bf16
      && mode != inverse_mode::explicit_inverse)
    return bad(std::string{"precision bf16 needs the explicit inverses "
                           "(--inverse explicit: the products are GEMMs), "
                           "got inverse mode "}
               + to_string(mode));
  if (!(kl_clip >= 0))
    return bad("kl_clip must not be negative");
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

caf::expected<kfac_preconditioner>
kfac_preconditioner::make(const kfac_config& cfg,
                          const std::vector<kfac_layer>& layers,
                          const parameter_set& params) {
  std::vector<kfac_view> views;
  for (const auto& l : layers) {
    kfac_view v;
    v.layer = l.name;
    v.kind = l.kind;
    v.weight_name = l.weight_name;
    v.bias_name = l.bias_name;
    views.push_back(std::move(v));
  }
  auto result = make(cfg, views, params);
  if (result)
    for (size_t i = 0; i < layers.size(); ++i)
      result->layers_[i].locations = layers[i].locations;
  return result;
}

caf::error kfac_preconditioner::update_factors(
  const std::vector<kfac_view>& views, int threads) {
  return update_factors(views, threads, cpu_kfac_inverter());
}

caf::error
kfac_preconditioner::update_factors(const std::vector<kfac_view>& views,
                                    int threads, kfac_inverter& kernels) {
  auto stats = layer_statistics(views, cfg_.sampling, threads, false,
                                kernels);
  if (!stats)
    return stats.error();
  for (size_t i = 0; i < views.size() && i < layers_.size(); ++i)
    if (views[i].kind == layer_kind::conv2d)
      layers_[i].locations = views[i].geometry.locations();
  return update_factors(*stats);
}

caf::error
kfac_preconditioner::update_factors(const std::vector<layer_stats>& stats) {
  if (stats.size() != layers_.size())
    return make_error(ec::shape_mismatch,
                      "kfac: statistics of " + std::to_string(stats.size())
                        + " layers for " + std::to_string(layers_.size())
                        + " layers");
  for (size_t i = 0; i < layers_.size(); ++i)
    if (stats[i].layer != layers_[i].name)
      return make_error(ec::unknown_name,
                        "kfac: statistics for layer '" + stats[i].layer
                          + "' where layer '" + layers_[i].name
                          + "' was expected");
  // All layers or none: check every statistic first (ema_update refuses
  // exactly these), then update in place without copying the factors.
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    // Rows are for covariance actors (stats_request::rows); this folds
    // every step's matrices.
    if (!stats[i].a_rows.x.empty() || !stats[i].g_rows.x.empty())
      return make_error(ec::invalid_argument,
                        "kfac: statistics of layer '" + l.name
                          + "' come as rows, not as the matrices folded "
                            "here");
    for (auto [stat, raw, what] :
         {std::tuple{&stats[i].a, &l.a_raw, "A"},
          std::tuple{&stats[i].g, &l.g_raw, "G"}}) {
      if (!raw->shape().empty() && stat->shape() != raw->shape())
        return make_error(ec::shape_mismatch,
                          "kfac: factor " + std::string{what} + " of layer '"
                            + l.name + "' is " + raw->shape_string()
                            + ", the statistic " + stat->shape_string());
      if (!stat->all_finite())
        return make_error(ec::non_finite, "kfac: statistic "
                                            + std::string{what}
                                            + " of layer '" + l.name
                                            + "' holds NaN or Inf");
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    if (auto err = cpu::ema_update(l.a_raw, l.a_weight, stats[i].a,
                                   cfg_.cov_ema_decay))
      return with_context(err, "kfac: factor A of layer '" + l.name + "'");
    if (auto err = cpu::ema_update(l.g_raw, l.g_weight, stats[i].g,
                                   cfg_.cov_ema_decay))
      return with_context(err, "kfac: factor G of layer '" + l.name + "'");
    ++l.cov_updates;
  }
  return caf::none;
}

caf::expected<kfac_preconditioner::fresh_inverse>
kfac_preconditioner::invert(const layer_state& l,
                            kfac_inverter& inverter) const {
  layer_factors f;
  f.layer = l.name;
  f.locations = l.locations;
  f.cov_updates = l.cov_updates;
  if (auto err = cpu::ema_value(l.a_raw, l.a_weight, f.a))
    return err;
  if (auto err = cpu::ema_value(l.g_raw, l.g_weight, f.g))
    return err;
  fresh_inverse result;
  auto inv = invert_layer(f, cfg_, inverter, result.damping_raised);
  if (!inv)
    return inv.error();
  // Checked once here: precondition_layer trusts the inverse every step.
  if (auto err = check_inverse(*inv, f.a.dim(0), f.g.dim(0)))
    return err;
  result.inverse = std::make_shared<const layer_inverse>(std::move(*inv));
  return result;
}

caf::error kfac_preconditioner::update_inverses() {
  return update_inverses(cpu_kfac_inverter());
}

caf::error kfac_preconditioner::update_inverses(kfac_inverter& inverter,
                                                int threads) {
  // The layers' inversions side by side (each on one thread: the kernels
  // run on their caller's), the largest first (cost ~ n³ of both factors);
  // installed in layer order afterwards, so the outcome does not depend
  // on the thread count.
  std::vector<size_t> order;
  std::vector<double> cost(layers_.size(), 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    if (l.cov_updates < cfg_.min_cov_updates)
      continue;
    auto cube = [](const tensor& t) {
      auto n = static_cast<double>(t.rank() > 0 ? t.dim(0) : 0);
      return n * n * n;
    };
    cost[i] = cube(l.a_raw) + cube(l.g_raw);
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return cost[x] > cost[y]; });
  std::vector<std::optional<caf::expected<fresh_inverse>>> results(
    layers_.size());
  auto one = [&](int64_t k, int) {
    auto i = order[static_cast<size_t>(k)];
    results[i].emplace(invert(layers_[i], inverter));
  };
  cpu::parallel_for(inverter.concurrent() ? std::max(threads, 1) : 1,
                    static_cast<int64_t>(order.size()), one);
  caf::error first;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].cov_updates < cfg_.min_cov_updates)
      continue;
    auto& r = *results[i];
    if (!r) {
      if (!first)
        first = with_context(r.error(), "kfac: layer '" + layers_[i].name
                                          + "' keeps its previous inverse");
      continue;
    }
    damping_increases_ += r->damping_raised ? 1 : 0;
    layers_[i].inverse = std::move(r->inverse);
  }
  return first;
}

caf::expected<double>
kfac_preconditioner::precondition(parameter_set& grads) const {
  return precondition(grads, cpu_kfac_inverter());
}

caf::expected<double>
kfac_preconditioner::precondition(parameter_set& grads,
                                  kfac_inverter& kernels) const {
  double dot = 0;
  tensor out;
  for (const auto& l : layers_) {
    if (!l.inverse)
      continue;
    if (l.weight >= grads.size() || l.bias >= grads.size())
      return make_error(ec::shape_mismatch,
                        "kfac: gradients lack layer '" + l.name + "'");
    auto& w = grads[l.weight].value;
    auto& b = grads[l.bias].value;
    auto d = precondition_layer(*l.inverse, layer_matrix(w, b), out,
                                kernels, cfg_.precision);
    if (!d)
      return with_context(d.error(), "kfac");
    dot += *d;
    split_layer_matrix(out, w, b);
  }
  return dot;
}

std::vector<kfac_layer_slot> kfac_preconditioner::slots() const {
  std::vector<kfac_layer_slot> result;
  for (const auto& l : layers_)
    result.push_back({l.weight, l.bias, l.inverse.get()});
  return result;
}

size_t kfac_preconditioner::ready_layers() const {
  size_t n = 0;
  for (const auto& l : layers_)
    n += l.inverse ? 1 : 0;
  return n;
}

} // namespace syncfac
