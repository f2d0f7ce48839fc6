#pragma once

// Factor statistics of one batch from a model's K-FAC views (valid after a
// backward pass): what a worker's device sends to covariance actors. They
// are computed by the K-FAC kernels given (kernels/kfac_inverter.hpp): a
// device actor's own, on its GPU when it has one; the overload without
// kernels uses the CPU.

#include <cstdint>
#include <vector>

#include <caf/expected.hpp>

#include "kernels/cpu/kfac_factors.hpp"
#include "kernels/kfac_inverter.hpp"
#include "runtime/kfac/kfac_data.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/layers.hpp"

namespace syncfac {

/// A and G of every layer in `views` (after a backward pass), with the
/// sub-sampling `s`, by `kernels`; an error names the layer. With `rows`, a
/// factor with fewer rows than columns comes as its rows
/// (layer_stats::a_rows). threads is the CPU kernels' parallelism; the
/// result does not depend on it.
caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const factor_sampling& s, int threads, bool rows,
                 kfac_inverter& kernels);

/// layer_statistics on the CPU.
caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const factor_sampling& s, int threads,
                 bool rows = false);

/// The first n examples of b (all of them when n is 0 or >= its size).
batch batch_prefix(const batch& b, int64_t n);

} // namespace syncfac
