#include "actors/tower_split.hpp"

#include <algorithm>

#include "runtime/base/error.hpp"

namespace syncfac::tower {

std::pair<int64_t, int64_t> part_range(int64_t total, int64_t parts,
                                       int64_t k) {
  auto base = total / parts;
  auto extra = total % parts;
  auto begin = k * base + std::min(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

batch batch_range(const batch& b, int64_t begin, int64_t end) {
  auto total = static_cast<int64_t>(b.labels.size());
  if (begin == 0 && end == total)
    return b;
  batch out;
  auto shape = b.images.shape();
  auto per_example = total > 0 ? b.images.size() / total : 0;
  shape[0] = end - begin;
  out.images = tensor(shape);
  std::copy(b.images.data() + begin * per_example,
            b.images.data() + end * per_example, out.images.data());
  out.labels.assign(b.labels.begin() + begin, b.labels.begin() + end);
  // A seed of its own per range: every tower's dropout masks differ.
  out.noise_seed = b.noise_seed
                   ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(begin + 1));
  return out;
}

caf::expected<split_plan> plan_split(const batch& b, size_t towers,
                                     const std::string& what) {
  split_plan plan;
  plan.total = static_cast<int64_t>(b.labels.size());
  // Slicing trusts the images' first dimension, so check it first (a
  // single device would refuse such a batch too).
  if (b.images.rank() < 1 || b.images.dim(0) != plan.total)
    return make_error(ec::shape_mismatch,
                      "tower device (" + what + "): batch of "
                        + std::to_string(plan.total) + " labels but images "
                        + b.images.shape_string());
  auto n = static_cast<int64_t>(towers);
  if (plan.total == 0) {
    // Nothing to split: tower 0 answers as a single device would.
    plan.towers = {0};
    plan.begin = {0};
    plan.end = {0};
    return plan;
  }
  for (int64_t k = 0; k < n; ++k) {
    auto [from, to] = part_range(plan.total, n, k);
    if (to == from)
      continue;
    plan.towers.push_back(static_cast<size_t>(k));
    plan.begin.push_back(from);
    plan.end.push_back(to);
  }
  return plan;
}

stats_request tower_request(const stats_request& req, int64_t total,
                            int64_t towers, int64_t k, bool& skip) {
  auto out = req;
  // Matrices from every tower: combine_stats averages matrices.
  out.rows = false;
  skip = false;
  auto m = req.sampling.max_examples;
  if (m > 0 && m < total) {
    // Split m like the batch: m_k <= n_k because both use the same rule.
    auto [from, to] = part_range(m, towers, k);
    out.sampling.max_examples = to - from;
    skip = to == from;
  } else {
    out.sampling.max_examples = 0;
  }
  // Without the mix, every tower would draw the same conv locations for
  // its k-th example (the towers' seeds advance in step).
  out.sampling.seed = req.sampling.seed
                      ^ (0xbf58476d1ce4e5b9ULL * static_cast<uint64_t>(k));
  return out;
}

} // namespace syncfac::tower
