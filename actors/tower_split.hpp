#pragma once

// How the tower device (actors/tower_device.hpp) splits a batch across its
// towers: contiguous parts of nearly equal size, and each tower's share of
// a statistics request. Pure functions, used by the actor and tested
// without one.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/data/batcher.hpp"
#include "runtime/kfac/kfac_data.hpp"

namespace syncfac::tower {

/// The half-open example range [begin, end) of part k when `total`
/// examples are split into `parts` contiguous parts: the first total mod
/// parts parts are one example larger. Requires parts >= 1, 0 <= k < parts.
std::pair<int64_t, int64_t> part_range(int64_t total, int64_t parts,
                                       int64_t k);

/// Examples [begin, end) of b (b itself when the range covers it).
batch batch_range(const batch& b, int64_t begin, int64_t end);

/// How a batch is split: the towers that get examples and their ranges.
struct split_plan {
  int64_t total = 0;
  std::vector<size_t> towers;
  std::vector<int64_t> begin;
  std::vector<int64_t> end;

  int64_t examples(size_t i) const {
    return end[i] - begin[i];
  }
};

/// The split of `b` over `towers` towers (the towers whose part would be
/// empty left out; tower 0 alone for an empty batch); ec::shape_mismatch
/// when the images' first dimension is not the labels' count.
caf::expected<split_plan> plan_split(const batch& b, size_t towers,
                                     const std::string& what);

/// The statistics request for tower k of `towers`: its share of
/// max_examples (0: the tower computes no statistics, and `skip` is set)
/// and its own location seed.
stats_request tower_request(const stats_request& req, int64_t total,
                            int64_t towers, int64_t k, bool& skip);

} // namespace syncfac::tower
