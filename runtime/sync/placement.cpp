#include "runtime/sync/placement.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "runtime/base/error.hpp"
#include "runtime/base/parse_enum.hpp"

namespace syncfac {

namespace {

/// The variables of one layer and their total value count.
struct layer_group {
  std::vector<size_t> members;
  int64_t values = 0;
};

/// The prefix up to and including the last '/', or the whole name. Keeping
/// the '/' makes "fc" (a layer of its own) and "fc/bias" (layer "fc")
/// different keys.
std::string group_key(const std::string& name) {
  auto slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(0, slash + 1);
}

caf::error check_names(const parameter_set& vars) {
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    const auto& name = vars[i].name;
    if (name.empty())
      return make_error(ec::invalid_config, "placement: variable #"
                                              + std::to_string(i)
                                              + " has an empty name");
    if (!seen.insert(name).second)
      return make_error(ec::invalid_config,
                        "placement: variable '" + name + "' appears twice");
  }
  return caf::none;
}

/// Layers in order of first appearance.
std::vector<layer_group> group_layers(const parameter_set& vars) {
  std::vector<layer_group> groups;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < vars.size(); ++i) {
    auto [pos, added] = index.emplace(group_key(vars[i].name), groups.size());
    if (added)
      groups.emplace_back();
    auto& group = groups[pos->second];
    group.members.push_back(i);
    group.values += vars[i].value.size();
  }
  return groups;
}

/// For each group, its shard.
std::vector<size_t> round_robin(const std::vector<layer_group>& groups,
                                size_t shards) {
  std::vector<size_t> result(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    result[g] = g % shards;
  return result;
}

/// For each group, its shard: largest first onto the least-loaded shard.
/// Stable on both ties (equal sizes keep their order, equal loads take the
/// lower shard) so that every node computes the same placement.
std::vector<size_t> by_size(const std::vector<layer_group>& groups,
                            size_t shards) {
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return groups[x].values > groups[y].values;
  });
  std::vector<int64_t> load(shards, 0);
  std::vector<size_t> result(groups.size());
  for (auto g : order) {
    auto lightest = static_cast<size_t>(
      std::min_element(load.begin(), load.end()) - load.begin());
    result[g] = lightest;
    load[lightest] += groups[g].values;
  }
  return result;
}

} // namespace

const char* to_string(placement_strategy x) noexcept {
  switch (x) {
    case placement_strategy::round_robin: return "round_robin";
    case placement_strategy::by_size: return "by_size";
  }
  return "?";
}

caf::expected<placement_strategy>
parse_placement_strategy(const std::string& str) {
  return parse_enum(
    str, {placement_strategy::round_robin, placement_strategy::by_size},
    "placement strategy");
}

caf::expected<std::vector<std::vector<size_t>>>
place_variables(const parameter_set& vars, int num_shards,
                placement_strategy strategy) {
  if (num_shards < 1)
    return make_error(ec::invalid_config,
                      "placement: num_shards must be at least 1, got "
                        + std::to_string(num_shards));
  if (auto err = check_names(vars))
    return err;
  auto groups = group_layers(vars);
  auto shards = static_cast<size_t>(num_shards);
  auto shard_of = strategy == placement_strategy::by_size
                    ? by_size(groups, shards)
                    : round_robin(groups, shards);
  std::vector<std::vector<size_t>> result(shards);
  for (size_t g = 0; g < groups.size(); ++g) {
    auto& shard = result[shard_of[g]];
    shard.insert(shard.end(), groups[g].members.begin(),
                 groups[g].members.end());
  }
  for (auto& shard : result)
    std::sort(shard.begin(), shard.end());
  return result;
}

} // namespace syncfac
