#pragma once

// The one rule for how many workers (N) a synchronous run has and how many
// gradients (R) each update averages when the command line leaves one of
// them out. It is the same in one process and in a cluster (where N is the
// cluster file's worker count), so the same flags train the same way in
// both (docs/distributed.md, "Workers and replicas").

#include <cstdint>

#include <caf/expected.hpp>

namespace syncfac {

struct replica_counts {
  /// N: worker tasks.
  int32_t workers = 1;
  /// R: gradients averaged per update.
  int32_t replicas_to_aggregate = 1;
};

/// `workers` and `replicas_to_aggregate` as given, 0 for "not given":
/// - R given, N not: N = R (TensorFlow's SyncReplicasOptimizer, whose
///   total_num_replicas defaults to replicas_to_aggregate);
/// - N given, R not: R = N (no backup workers), except under K-FAC, where
///   R = ceil(0.6 N) as the seeds' distributed K-FAC example aggregates
///   (its _num_gradient_tasks), the other workers being backups;
/// - neither: N = R = 1.
/// A negative count is ec::invalid_config naming the flag.
caf::expected<replica_counts> resolve_replica_counts(int32_t workers,
                                                     int32_t replicas_to_aggregate,
                                                     bool kfac);

/// The seeds' K-FAC gradient task count: ceil(0.6 N).
int32_t kfac_gradient_tasks(int32_t workers);

} // namespace syncfac
