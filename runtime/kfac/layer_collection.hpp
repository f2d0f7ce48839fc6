#pragma once

// K-FAC's layer collection: the layers K-FAC preconditions, with the shapes
// of their Kronecker factors, and the model's predictive distribution
// (docs/design.md §3). Every K-FAC role is configured from it: covariance
// actors check stats updates against a_dim/g_dim, PS shards group a layer's
// weight and bias into one gradient matrix [a_dim, g_dim] (bias row last).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/inspect.hpp"
#include "runtime/layers.hpp"

namespace syncfac {

/// One layer with parameters: y = act(s), s = W ā (ā with a bias 1).
struct kfac_layer {
  std::string name;
  layer_kind kind = layer_kind::dense;
  std::string weight_name;
  std::string bias_name;
  /// Rows of A: inputs (conv: kh·kw·C) plus the bias 1.
  int64_t a_dim = 0;
  /// Rows of G: outputs (conv: output channels).
  int64_t g_dim = 0;
  /// T, output locations per example (1 for dense layers).
  int64_t locations = 1;

  /// ec::invalid_config naming the layer unless names are non-empty and
  /// a_dim >= 2, g_dim >= 1, locations >= 1 (1 for dense layers).
  caf::error validate() const;

  /// The inversion cost of the layer, a_dim³ + g_dim³ (placement by cost).
  double inversion_cost() const noexcept;
};

SYNCFAC_INSPECT(kfac_layer, x.name, x.kind, x.weight_name, x.bias_name,
                x.a_dim, x.g_dim, x.locations)

/// The likelihood the loss is the negative log of; decides how the
/// sampled Fisher draws its targets.
enum class predictive_distribution : uint8_t {
  /// Softmax over classes (softmax cross-entropy).
  categorical,
  /// Independent Bernoulli per output (sigmoid cross-entropy).
  bernoulli,
};

const char* to_string(predictive_distribution x) noexcept;

struct layer_collection {
  std::vector<kfac_layer> layers;
  predictive_distribution distribution = predictive_distribution::categorical;

  /// Every layer valid, names unique.
  caf::error validate() const;

  /// The layer called `name`, or nullptr.
  const kfac_layer* find(const std::string& name) const;
};

SYNCFAC_INSPECT(layer_collection, x.layers, x.distribution)

/// Assigns each layer to one of `n` owners (covariance or inverse actors):
/// round-robin in layer order, or by cost (largest inversion_cost first,
/// each to the least loaded owner). Result[i] is layer i's owner; n >= 1.
enum class kfac_placement : uint8_t { round_robin, by_cost };

const char* to_string(kfac_placement x) noexcept;
caf::expected<kfac_placement> parse_kfac_placement(const std::string& str);

std::vector<int32_t> place_layers(const std::vector<kfac_layer>& layers,
                                  int32_t n, kfac_placement how);

} // namespace syncfac
