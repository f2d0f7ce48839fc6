#pragma once

// Checks the K-FAC roles share: a covariance or inverse actor owns some
// layers and sends each to one of several peers (inverse actors, PS
// shards); both must be consistent before the actor starts, and what a
// peer sends about a layer must name one of them and fit its factors.

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include <caf/error.hpp>

#include "kernels/tensor.hpp"

#include "runtime/base/error.hpp"
#include "runtime/kfac/layer_collection.hpp"

namespace syncfac {

/// find_layer()'s answer for a name the role does not own.
constexpr size_t no_layer = static_cast<size_t>(-1);

/// The index of the first of `layers` whose name_of() is `name`;
/// no_layer if none.
template <class Layers, class NameOf>
size_t find_layer(const Layers& layers, const std::string& name,
                  NameOf name_of) {
  for (size_t i = 0; i < layers.size(); ++i)
    if (name_of(layers[i]) == name)
      return i;
  return no_layer;
}

/// What is wrong with factor `name` (A or G) of a layer whose factor is
/// [dim, dim]: "A must be 3x3, got [2, 3]"; empty when `t` is that.
inline std::string square_problem(const std::string& name, const tensor& t,
                                  int64_t dim) {
  if (t.rank() == 2 && t.dim(0) == dim && t.dim(1) == dim)
    return {};
  return name + " must be " + std::to_string(dim) + "x" + std::to_string(dim)
         + ", got " + t.shape_string();
}

/// `who` (e.g. "covariance actor 1") owns `layers`: at least one, each
/// valid, none twice. `purpose` completes "no layers to ...".
inline caf::error check_role_layers(const std::string& who,
                                    const std::vector<kfac_layer>& layers,
                                    const std::string& purpose) {
  if (layers.empty())
    return make_error(ec::invalid_config, who + ": no layers to " + purpose);
  std::unordered_set<std::string> names;
  for (const auto& l : layers) {
    if (auto err = l.validate())
      return with_context(err, who);
    if (!names.insert(l.name).second)
      return make_error(ec::invalid_config, who + ": layer '" + l.name
                                              + "' is listed twice");
  }
  return caf::none;
}

/// Every peer handle is set, `owner_of` (named `field`) has one entry per
/// layer, and each is an index into `peers` (`peer`: "inverse actor",
/// "PS shard").
template <class Handle>
caf::error check_layer_peers(const std::string& who, const std::string& peer,
                             const std::vector<Handle>& peers,
                             const std::string& field,
                             const std::vector<int32_t>& owner_of,
                             const std::vector<kfac_layer>& layers) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config, who + ": " + what);
  };
  for (size_t k = 0; k < peers.size(); ++k)
    if (!peers[k])
      return bad(peer + " #" + std::to_string(k) + " is not set");
  if (owner_of.size() != layers.size())
    return bad(field + " has " + std::to_string(owner_of.size())
               + " entries for " + std::to_string(layers.size())
               + " layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    auto k = owner_of[i];
    if (k < 0 || static_cast<size_t>(k) >= peers.size())
      return bad("layer '" + layers[i].name + "' goes to " + peer + " #"
                 + std::to_string(k) + " of " + std::to_string(peers.size()));
  }
  return caf::none;
}

} // namespace syncfac
