#pragma once

// Messages of the synchronous-replica protocol (TF's SyncReplicasOptimizerV2
// as actors): gradient pushes tagged with local_step, token grants carrying
// global_step, parameter pulls, apply/applied between chief and PS shards,
// status. Every struct a peer can send is validated by its receiver.

#include <cstdint>
#include <type_traits>
#include <memory>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>

#include "kernels/tensor.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/inspect.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/wire_float.hpp"
#include "runtime/sync/conditional_accumulator.hpp"

namespace syncfac {

/// Rows of a sparse (embedding-like) variable: indices strictly increasing,
/// rows [indices.size(), ...the variable's row shape].
struct sparse_update {
  std::string variable;
  std::vector<int64_t> indices;
  tensor rows;
};

SYNCFAC_INSPECT(sparse_update, x.variable, x.indices, x.rows)

/// Elements [offset, offset + size()) of a dense variable's gradient in
/// row-major order (a part of a push split for the network). The sender's
/// slices view the gradient (`source`, `count`) and are written to the
/// wire straight from it, so splitting copies nothing; a received slice
/// holds its elements in `values`. Both look the same on the wire.
struct dense_slice {
  std::string variable;
  int64_t offset = 0;
  tensor values;
  std::shared_ptr<const tensor> source;
  int64_t count = 0;

  const float* data() const noexcept {
    return source ? source->data() + offset : values.data();
  }

  int64_t size() const noexcept {
    return source ? count : values.size();
  }
};

/// Writes `n` floats as a 1-D tensor would be written (save_tensor).
inline caf::error save_floats(caf::serializer& sink, const float* xs,
                              int64_t n) {
  tensor_shape shape{n};
  if (auto err = sink(shape))
    return err;
  auto count = static_cast<size_t>(n);
  if (auto err = sink.begin_sequence(count))
    return err;
  if (count > 0)
    if (auto err = sink.apply_raw(count * sizeof(float),
                                  const_cast<float*>(xs)))
      return err;
  return sink.end_sequence();
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dense_slice& x) {
  if constexpr (std::is_base_of<caf::serializer, Inspector>::value) {
    if (x.source) {
      if (auto err = f(x.variable, x.offset))
        return err;
      return save_floats(f, x.data(), x.count);
    }
  }
  return f(caf::meta::type_name("dense_slice"), x.variable, x.offset,
           x.values);
}

/// A worker's gradients for the variables of one PS shard. Across the
/// network a large push travels as `parts` messages (part 0 .. parts-1, the
/// same worker and local_step), whole variables in `dense` and pieces of
/// large ones in `slices`; the shard assembles them and then treats the
/// whole as one push (messages/push_parts.hpp).
struct gradient_push {
  int32_t worker = 0;
  /// The global step the gradients were computed at (the worker's
  /// local_step); older than the shard's step means stale.
  int64_t local_step = 0;
  parameter_set dense;
  std::vector<sparse_update> sparse;
  int32_t part = 0;
  int32_t parts = 1;
  std::vector<dense_slice> slices;
};

SYNCFAC_INSPECT(gradient_push, x.worker, x.local_step, x.dense, x.sparse,
                x.part, x.parts, x.slices)

/// A shard's answer to a push: whether the gradients were accumulated or
/// dropped as stale, and the shard's step at that moment.
struct push_ack {
  bool accepted = false;
  int64_t global_step = 0;
};

SYNCFAC_INSPECT(push_ack, x.accepted, x.global_step)

/// The current values of a shard's variables.
struct shard_params {
  int32_t shard = 0;
  int64_t global_step = 0;
  parameter_set values;
  /// False for a waiting pull answered without values: its wait ran out
  /// before the shard reached the step asked for, or the worker said it
  /// no longer needs it (docs/protocol.md, "The pull with the token").
  bool has_values = true;
  /// A row pull's answer (messages/row_pull.hpp): the rows asked for of
  /// each sparse variable the pull named, which is then not in `values`.
  std::vector<sparse_update> rows{};
};

SYNCFAC_INSPECT(shard_params, x.shard, x.global_step, x.values, x.has_values,
                x.rows)

/// What a role sent: messages (requests and answers alike) and the
/// payload bytes among them (tensor values, sparse indices and rows),
/// the figures docs/benchmarks-history.md ("Transfers per step") compares with one push and one pull of
/// the parameters per worker step.
struct transfer_counts {
  int64_t messages = 0;
  int64_t bytes = 0;

  void add(int64_t payload_bytes = 0) {
    ++messages;
    bytes += payload_bytes;
  }
};

SYNCFAC_INSPECT(transfer_counts, x.messages, x.bytes)

/// A shard reports that it has applied the averaged gradients of a step.
struct applied {
  int32_t shard = 0;
  /// The shard's step after the update (the chief's new global_step).
  int64_t global_step = 0;
  /// Gradients averaged per variable (may exceed replicas_to_aggregate).
  int64_t gradients = 0;
  /// The shard's counts so far, for the chief's per-step log: pushes it
  /// refused, applies with a K-FAC preconditioned layer, inverse sets
  /// installed.
  int64_t refused_pushes = 0;
  int64_t preconditioned_applies = 0;
  int64_t inverse_sets = 0;
};

SYNCFAC_INSPECT(applied, x.shard, x.global_step, x.gradients, x.refused_pushes,
                x.preconditioned_applies, x.inverse_sets)

/// A PS shard's part of a round's global gradient norm (--clip_norm): the
/// sum of the squares of the averages its apply will take.
struct norm_part {
  int32_t shard = 0;
  /// The step whose round it is.
  int64_t global_step = 0;
  double sum_of_squares = 0;
};

SYNCFAC_INSPECT(norm_part, x.shard, x.global_step, wire(x.sum_of_squares))

/// The factor every average of a clipped round is multiplied by:
/// clip_factor of the sum of every shard's norm_part
/// (runtime/gradient_clip.hpp).
struct gradient_scale {
  float factor = 1.0f;
};

SYNCFAC_INSPECT(gradient_scale, wire(x.factor))

/// A token from the chief's queue: the worker's next local_step, or the
/// signal that training is over.
struct token_grant {
  int64_t global_step = 0;
  bool stop = false;
};

SYNCFAC_INSPECT(token_grant, x.global_step, x.stop)

/// What a worker tells the chief with its token request: the outcome of
/// the step it just finished.
struct worker_report {
  int32_t worker = 0;
  int64_t local_step = 0;
  float loss = 0;
  int64_t correct = 0;
  int64_t count = 0;
  /// Shards that dropped a push of this worker as stale, answered since its
  /// last report: the token request goes right behind the push, so a
  /// push's answer is reported with the next request (docs/protocol.md,
  /// "The token behind the push").
  int32_t stale_shards = 0;
  /// The worker's data order after this step's batch (for checkpoints).
  batcher_state data;
  /// The chief's run incarnation the worker was bound in: each rollback to
  /// a checkpoint starts a new one, and reports of an older one (a step
  /// abandoned by the rollback) are refused.
  int64_t incarnation = 0;
};

SYNCFAC_INSPECT(worker_report, x.worker, x.local_step, wire(x.loss), x.correct,
                x.count, x.stale_shards, x.data, x.incarnation)

/// A shard's counters.
struct shard_status {
  int32_t shard = 0;
  int64_t global_step = 0;
  int64_t accepted_pushes = 0;
  int64_t stale_pushes = 0;
  int64_t refused_pushes = 0;
  std::vector<accumulator_stats> variables;
  /// K-FAC: layers held, layers with an inverse, inverse sets installed
  /// and refused, applies that preconditioned at least one layer, and the
  /// last step's KL-clip factor.
  int64_t kfac_layers = 0;
  int64_t kfac_ready = 0;
  int64_t inverse_sets = 0;
  int64_t refused_inverses = 0;
  int64_t preconditioned_applies = 0;
  double last_clip = 1;
  /// The last apply: the step it moved the shard to (0 before the first,
  /// and after a restore or set_step, which are no apply) and the clip
  /// factor it took (1 without --clip_norm). A restarted chief repeats it
  /// on shards its predecessor's round did not reach (actors/shard_steps.hpp).
  int64_t last_applied_step = 0;
  float last_gradient_scale = 1.0f;
  /// K-FAC: the shard's variables that no K-FAC layer holds (embedding
  /// tables): trained with the first-order update (docs/models.md).
  std::vector<std::string> first_order_variables{};
  /// Everything the shard answered or sent, and the pulls among them
  /// that waited for their step (answered with values, and without:
  /// their wait ran out or the worker no longer needed them).
  transfer_counts sent{};
  int64_t pulls_waited = 0;
  int64_t pulls_without_values = 0;
};

SYNCFAC_INSPECT(shard_status, x.shard, x.global_step, x.accepted_pushes,
                x.stale_pushes, x.refused_pushes, x.variables, x.kfac_layers,
                x.kfac_ready, x.inverse_sets, x.refused_inverses,
                x.preconditioned_applies, x.last_clip, x.sent, x.pulls_waited,
                x.pulls_without_values, x.first_order_variables,
                x.last_applied_step, wire(x.last_gradient_scale))

/// A worker's counters and position.
struct worker_status {
  int32_t worker = 0;
  int64_t local_step = 0;
  int64_t steps = 0;
  int64_t stale_pushes = 0;
  /// Seconds spent in steps, and the part of it spent waiting for tokens.
  double step_s = 0;
  double token_wait_s = 0;
  /// The part of step_s the device spent computing.
  double compute_s = 0;
  /// K-FAC statistics sent, dropped as stale, skipped under back-pressure,
  /// failed (with the last reason).
  int64_t stats_sent = 0;
  int64_t stats_stale = 0;
  int64_t stats_skipped = 0;
  int64_t stats_failed = 0;
  std::string stats_error;
  /// Times it lost its chief or a shard, and was rebound after that.
  int64_t peers_lost = 0;
  int64_t rebinds = 0;
  /// Payload bytes of the gradient pushes it sent (dense values, sparse
  /// indices and rows) and of the variables it pulled and used.
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  /// Every message the worker sent on its step path (pushes, token
  /// requests, pulls and their cancels), and the payload bytes of pull
  /// answers it received and could not use (an answer older than its
  /// token): the transfers beyond the minimum.
  transfer_counts sent{};
  int64_t bytes_pulled_unused = 0;
};

SYNCFAC_INSPECT(worker_status, x.worker, x.local_step, x.steps, x.stale_pushes,
                x.step_s, x.token_wait_s, x.compute_s, x.stats_sent,
                x.stats_stale, x.stats_skipped, x.stats_failed, x.stats_error,
                x.peers_lost, x.rebinds, x.bytes_pushed, x.bytes_pulled,
                x.sent, x.bytes_pulled_unused)

/// The chief's view of the run.
struct chief_status {
  int64_t global_step = 0;
  int64_t tokens_queued = 0;
  int64_t token_requests_waiting = 0;
  int64_t tokens_granted = 0;
  bool finished = false;
  /// Worker reports refused as malformed.
  int64_t refused_reports = 0;
  /// The task whose loss paused the steps ("ps:1", "covariance:0",
  /// "inverse:0"; empty: none).
  std::string lost_task;
  /// The step at which it was lost.
  int64_t lost_at = -1;
  /// What the chief sent: token grants, apply, moving-average and
  /// set_step requests (checkpoints and probes aside).
  transfer_counts sent{};
};

SYNCFAC_INSPECT(chief_status, x.global_step, x.tokens_queued,
                x.token_requests_waiting, x.tokens_granted, x.finished,
                x.refused_reports, x.lost_task, x.lost_at, x.sent)

/// What the chief reports when training has finished.
struct sync_summary {
  int64_t global_step = 0;
  /// Examples the workers computed gradients on (stale ones included).
  int64_t examples = 0;
  int64_t accepted_pushes = 0;
  int64_t stale_pushes = 0;
  int64_t refused_pushes = 0;
  /// Mean loss and accuracy of the worker reports of the last log window.
  double last_loss = 0;
  double last_accuracy = 0;
  std::vector<shard_status> shards;
  /// Checkpoints written, the newest one's path, and every failed one's
  /// reason (the run goes on; the previous checkpoint stays).
  int64_t checkpoints_written = 0;
  std::string last_checkpoint;
  std::vector<std::string> checkpoint_errors;
  /// Gradient workers lost (process or node gone) and rejoined.
  int64_t worker_losses = 0;
  int64_t worker_rejoins = 0;
  /// The chief's account of updates (runtime/sync/update_account.hpp).
  int64_t updates_inherited = 0;
  int64_t updates_applied = 0;
  int64_t updates_rolled_back = 0;
  int64_t updates_redone = 0;
  /// Why the run was preempted ("worker:1: SIGTERM"); empty: it was not.
  std::string preempted;
};

SYNCFAC_INSPECT(sync_summary, x.global_step, x.examples, x.accepted_pushes,
                x.stale_pushes, x.refused_pushes, wire(x.last_loss),
                wire(x.last_accuracy), x.shards, x.checkpoints_written,
                x.last_checkpoint, x.checkpoint_errors, x.worker_losses,
                x.worker_rejoins, x.updates_inherited, x.updates_applied,
                x.updates_rolled_back, x.updates_redone, x.preempted)

} // namespace syncfac
