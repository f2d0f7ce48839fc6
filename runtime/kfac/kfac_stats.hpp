#pragma once

// Factor statistics of one batch from a model's K-FAC views (valid after a
// backward pass): what a worker's device sends to covariance actors.

#include <cstdint>
#include <vector>

#include <caf/expected.hpp>

#include "kernels/cpu/kfac_factors.hpp"
#include "messages/kfac_messages.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/layers.hpp"

namespace syncfac {

/// A and G of every layer in `views` (after a backward pass), with the
/// sub-sampling `s`; an error names the layer. With `rows`, a factor with
/// fewer rows than columns comes as its rows (layer_stats::a_rows).
caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const cpu::factor_sampling& s, int threads,
                 bool rows = false);

/// The first n examples of b (all of them when n is 0 or >= its size).
batch batch_prefix(const batch& b, int64_t n);

} // namespace syncfac
