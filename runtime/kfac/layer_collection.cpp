#include "runtime/kfac/layer_collection.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include "runtime/base/error.hpp"
#include "runtime/base/parse_enum.hpp"

namespace syncfac {

caf::error kfac_layer::validate() const {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config,
                      "kfac layer '" + name + "': " + what);
  };
  if (name.empty() || weight_name.empty() || bias_name.empty())
    return bad("layer, weight and bias names must not be empty");
  if (a_dim < 2)
    return bad("A must have at least 2 rows (inputs plus bias), got "
               + std::to_string(a_dim));
  if (g_dim < 1)
    return bad("G must have at least 1 row, got " + std::to_string(g_dim));
  if (locations < 1 || (kind == layer_kind::dense && locations != 1))
    return bad("locations must be >= 1 (exactly 1 for a dense layer), got "
               + std::to_string(locations));
  return caf::none;
}

double kfac_layer::inversion_cost() const noexcept {
  auto a = static_cast<double>(a_dim);
  auto g = static_cast<double>(g_dim);
  return a * a * a + g * g * g;
}

const char* to_string(predictive_distribution x) noexcept {
  return x == predictive_distribution::categorical ? "categorical"
                                                   : "bernoulli";
}

caf::error layer_collection::validate() const {
  std::set<std::string> names;
  for (const auto& l : layers) {
    if (auto err = l.validate())
      return err;
    if (!names.insert(l.name).second)
      return make_error(ec::invalid_config,
                        "kfac layer '" + l.name + "' registered twice");
  }
  return caf::none;
}

const kfac_layer* layer_collection::find(const std::string& name) const {
  auto i = std::find_if(layers.begin(), layers.end(),
                        [&](const kfac_layer& l) { return l.name == name; });
  return i == layers.end() ? nullptr : &*i;
}

const char* to_string(kfac_placement x) noexcept {
  return x == kfac_placement::round_robin ? "round_robin" : "by_cost";
}

caf::expected<kfac_placement> parse_kfac_placement(const std::string& str) {
  return parse_enum(str,
                    {kfac_placement::round_robin, kfac_placement::by_cost},
                    "K-FAC placement");
}

std::vector<int32_t> place_layers(const std::vector<kfac_layer>& layers,
                                  int32_t n, kfac_placement how) {
  std::vector<int32_t> owner(layers.size(), 0);
  if (n <= 1)
    return owner;
  if (how == kfac_placement::round_robin) {
    for (size_t i = 0; i < layers.size(); ++i)
      owner[i] = static_cast<int32_t>(i % static_cast<size_t>(n));
    return owner;
  }
  std::vector<size_t> order(layers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Stable: equal costs keep layer order, so placement is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return layers[x].inversion_cost() > layers[y].inversion_cost();
  });
  std::vector<double> load(static_cast<size_t>(n), 0.0);
  for (auto i : order) {
    auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int32_t>(least);
    load[static_cast<size_t>(least)] += layers[i].inversion_cost();
  }
  return owner;
}

} // namespace syncfac
