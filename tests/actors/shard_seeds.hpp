#pragma once

// The seeds' PS shard (their test2Workers): the variables, the optimizer
// and each worker's gradients that tests/actors/ps_shard.cpp (through the
// actor) and tests/actors/ps_shard_parts.cpp (on the state alone) share.

#include <cstdint>

#include "actors/ps_shard.hpp"
#include "tests/helpers.hpp"

namespace syncfac::test {

/// The seeds' test2Workers variables, all on one shard here.
inline parameter_set seed_variables() {
  return {{"v0", scalar(0.0f)},
          {"v1", scalar(1.0f)},
          {"v_sparse", tensor{{2, 1}, {3.0f, 4.0f}}}};
}

/// TF's GradientDescentOptimizer(2.0), as the seeds use it.
inline ps_shard_config seed_config() {
  ps_shard_config cfg;
  cfg.index = 1;
  cfg.variables = seed_variables();
  cfg.sparse_variables = {"v_sparse"};
  cfg.optimizer = test::optimizer_of(optimizer_kind::sgd, 2.0f);
  return cfg;
}

/// Worker w's gradients in the seeds: v0 0.1 + 0.2w, v1 0.9 + 0.2w, and
/// row 1 of v_sparse 0.1 + 0.2w.
inline gradient_push seed_push(int32_t worker, int64_t local_step) {
  auto g0 = 0.1f + static_cast<float>(worker) * 0.2f;
  auto g1 = 0.9f + static_cast<float>(worker) * 0.2f;
  gradient_push p;
  p.worker = worker;
  p.local_step = local_step;
  p.dense = {{"v0", scalar(g0)}, {"v1", scalar(g1)}};
  p.sparse = {{"v_sparse", {1}, tensor{{1, 1}, {g0}}}};
  return p;
}

} // namespace syncfac::test
