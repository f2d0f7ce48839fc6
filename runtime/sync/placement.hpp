#pragma once

// Which PS shard holds which variable (docs/design.md §1). A layer's variables
// stay together on one shard: its optimizer slots and, later, its K-FAC
// inverses live next to each other, and an apply touches one shard per
// layer.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/named_tensor.hpp"

namespace syncfac {

enum class placement_strategy : uint8_t {
  /// Layers in order of first appearance go to shards 0, 1, 2, ... and
  /// wrap around (the seeds' placement_strategy="round_robin").
  round_robin,
  /// Largest layer first onto the least-loaded shard (by value count), a
  /// greedy balance of memory and of per-step update work.
  by_size,
};

const char* to_string(placement_strategy x) noexcept;

/// "round_robin" or "by_size"; anything else is ec::invalid_argument.
caf::expected<placement_strategy>
parse_placement_strategy(const std::string& str);

/// Per shard, the indices into `vars` of the variables it holds, each list
/// increasing (a shard keeps the model's order). The variables of a layer
/// -- names sharing the prefix before their last '/', as "conv0/kernel" and
/// "conv0/bias" -- go to one shard; a name without '/' is a layer of its
/// own (also when another name has it as prefix: "fc" and "fc/bias" are
/// two layers). Every variable lands on exactly one shard; shards beyond
/// the number of layers stay empty.
/// ec::invalid_config when num_shards < 1, or when a name is empty or
/// appears twice (shards are addressed by variable name).
caf::expected<std::vector<std::vector<size_t>>>
place_variables(const parameter_set& vars, int num_shards,
                placement_strategy strategy);

} // namespace syncfac
