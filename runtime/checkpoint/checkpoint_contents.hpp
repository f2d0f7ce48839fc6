#pragma once

// The contents of consistent checkpoints (docs/design.md §5), as the roles
// send them and the checkpoint files hold them: what a PS shard and
// a covariance actor hand the chief for a checkpoint and take back on a
// restore, and where a worker resumes. The chief asks for snapshots right
// after a step's apply and before its tokens go out, so every shard's
// snapshot is of the same global_step (variables and slots change only on the
// chief's apply).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/inspect.hpp"
#include "runtime/kfac/kfac_data.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer.hpp"

namespace syncfac {

/// A PS shard's state at one global step.
struct shard_snapshot {
  int32_t shard = 0;
  int64_t global_step = 0;
  parameter_set variables;
  /// The variables' moving averages; empty when the run keeps none.
  parameter_set averages;
  /// The optimizer's slots (momentum, Adam's moments) and step count.
  optimizer_slots slots;
  /// K-FAC: the layers the shard holds, and the latest inverse of each
  /// that has one.
  std::vector<std::string> kfac_layers;
  std::vector<layer_inverse> inverses;
};

SYNCFAC_INSPECT(shard_snapshot, x.shard, x.global_step, x.variables,
                x.averages, x.slots, x.kfac_layers, x.inverses)

/// A covariance actor's moving-average factors: per layer the zero-start
/// EMA numerators (layer_factors::a, g) and their common weight, so that a
/// restored actor continues the average exactly.
struct covariance_snapshot {
  int32_t index = 0;
  /// The newest folded step; -1 before the first fold.
  int64_t last_folded = -1;
  std::vector<layer_factors> layers;
  std::vector<float> weights;
};

SYNCFAC_INSPECT(covariance_snapshot, x.index, x.last_folded, x.layers,
                x.weights)

/// Where a worker starts: the global step of the (restored) run and, when
/// the checkpoint recorded it, the position of its data order.
struct resume_point {
  int64_t global_step = 0;
  bool has_data_order = false;
  batcher_state data_order;
  /// The chief's run incarnation (worker_report::incarnation).
  int64_t incarnation = 0;
};

SYNCFAC_INSPECT(resume_point, x.global_step, x.has_data_order, x.data_order,
                x.incarnation)

/// Where a worker's data order stood after the batch of `local_step`.
struct worker_position {
  int32_t worker = 0;
  int64_t local_step = -1;
  batcher_state data;
};

SYNCFAC_INSPECT(worker_position, x.worker, x.local_step, x.data)

/// One consistent checkpoint, as the chief hands it to its writer.
struct checkpoint_contents {
  int64_t global_step = 0;
  std::vector<shard_snapshot> shards;
  std::vector<covariance_snapshot> covariance;
  /// Gradient workers' data positions (those that reported one).
  std::vector<worker_position> data_order;
};

SYNCFAC_INSPECT(checkpoint_contents, x.global_step, x.shards, x.covariance,
                x.data_order)

/// What the writer did with one.
struct checkpoint_written {
  int64_t global_step = 0;
  std::string path;
  uint64_t bytes = 0;
  double write_s = 0;
};

SYNCFAC_INSPECT(checkpoint_written, x.global_step, x.path, x.bytes, x.write_s)

} // namespace syncfac
