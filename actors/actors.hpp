#pragma once

// The typed interface of every syncfac role, one handler per line with the
// reason it exists. Actors of a role implement exactly this; tests mock a
// peer by implementing the same interface.

#include <cstdint>

#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "messages/atoms.hpp"
#include "runtime/checkpoint/checkpoint_contents.hpp"
#include "messages/device_messages.hpp"
#include "messages/row_pull.hpp"
#include "messages/sync_messages.hpp"

namespace syncfac {

/// Owns one compute backend and the model replica on it; executes requests
/// strictly in arrival order. The only actor that touches device memory.
using device_actor = caf::typed_actor<
  // Builds a model replica (replacing any previous one) and reports its
  // initial parameters.
  caf::replies_to<load_model_atom, model_spec, uint64_t>::with<model_info>,
  // Overwrites the replica's parameters (after a pull from the PS).
  caf::replies_to<params_atom, parameter_set>::with<caf::ok_atom>,
  // Reads the replica's parameters.
  caf::replies_to<params_atom>::with<parameter_set>,
  // Configures the device-local optimizer used by train_atom.
  caf::replies_to<optimizer_atom, optimizer_config>::with<caf::ok_atom>,
  // Forward + backward: loss, accuracy and gradients of the batch.
  caf::replies_to<grads_atom, batch>::with<step_result>,
  // The same at the given parameters (a worker's step: one round trip
  // instead of an upload and a compute request).
  caf::replies_to<grads_atom, parameter_set, batch>::with<step_result>,
  // The same at some of the parameters and some rows of the embedding
  // tables, the rest as earlier requests left them (a row-pulling
  // worker's step: no copy of its tables; messages/row_pull.hpp).
  caf::replies_to<grads_atom, parameter_set, std::vector<sparse_update>,
                  batch>::with<step_result>,
  // The same plus K-FAC factor statistics of the batch (a worker that
  // feeds a covariance actor; one pass when the Fisher is empirical).
  caf::replies_to<grads_atom, parameter_set, batch,
                  stats_request>::with<step_result>,
  // Only the statistics, at the given parameters (a dedicated statistics
  // worker); worker and step are left for the caller to fill in.
  caf::replies_to<stats_atom, parameter_set, batch,
                  stats_request>::with<stats_update>,
  // Damped inverses (or eigendecompositions) of K-FAC factors; layers
  // with too few covariance updates or failing even with more damping are
  // listed in the answer's problems, never an error for the whole set.
  caf::replies_to<invert_atom, factor_set, kfac_config>::with<inverse_set>,
  // Forward + backward + local optimizer step (single-process training).
  caf::replies_to<train_atom, batch>::with<step_result>,
  // Forward only: loss sum and correct count of the batch.
  caf::replies_to<eval_atom, batch>::with<eval_result>,
  // A raw kernel: op(a) * op(b).
  caf::replies_to<gemm_atom, tensor, bool, tensor, bool>::with<tensor>,
  // Backend name and threads.
  caf::replies_to<info_atom>::with<device_info>>;

/// Holds some variables, one conditional accumulator per variable and the
/// optimizer's slots for them (a layer's weight and bias stay together).
using ps_actor = caf::typed_actor<
  // A worker's gradients, accepted or dropped as stale by their local_step;
  // a malformed push is refused whole with an error and counted.
  caf::replies_to<push_atom, gradient_push>::with<push_ack>,
  // The current values of the shard's variables.
  caf::replies_to<pull_atom>::with<shard_params>,
  // The values once the shard is at `step` or later (at once if it is):
  // the pull a worker sends with its token request, answered when the
  // apply it waits for is done instead of with values it would throw
  // away. After `wait_ms` without reaching the step, or on the worker's
  // cancel, it is answered without values.
  caf::replies_to<pull_atom, int64_t, int64_t>::with<shard_params>,
  // The same, with the rows the worker's next batch looks up of the sparse
  // variables it names (its embedding table) instead of those whole: the
  // rest of a table is never read by that batch (messages/row_pull.hpp).
  // A request naming a variable the shard lacks or a dense one, or a row
  // id out of range, is refused naming the variable, the id and the
  // table's rows.
  caf::replies_to<pull_atom, int64_t, int64_t,
                  std::vector<row_request>>::with<shard_params>,
  // The sender no longer needs its waiting pull (its token let it go on
  // at the step it holds): that pull is answered without values, a row
  // pull with its rows at the shard's step (the worker's copies of them
  // may be older than that step; docs/protocol.md, "Row pulls").
  caf::reacts_to<pull_atom, cancel_atom>,
  // Its own timer: answer the waiting pulls whose wait ran out.
  caf::reacts_to<expire_atom>,
  // Their exponential moving averages (TF's variable_averages), e.g. for
  // evaluation: moved by every apply (--moving_average_decay); the
  // initial values until the first.
  caf::replies_to<pull_atom, average_atom>::with<shard_params>,
  // From the chief: once every accumulator holds at least n gradients,
  // average them, apply them through the optimizer and answer; `step` is
  // the global_step the chief expects the shard to be at.
  caf::replies_to<apply_atom, int64_t, int64_t>::with<applied>,
  // --clip_norm, from the chief before a round's apply: once every
  // accumulator holds at least n gradients, the sum of the squares of
  // their averages, left for the apply that follows to take.
  caf::replies_to<norm_atom, int64_t, int64_t>::with<norm_part>,
  // --clip_norm: the apply above with every average multiplied by the
  // round's factor, which the chief made from every shard's norm_part.
  caf::replies_to<apply_atom, int64_t, int64_t, gradient_scale>::with<applied>,
  // From the chief at start and restore: set every accumulator's step.
  caf::replies_to<set_step_atom, int64_t>::with<caf::ok_atom>,
  // K-FAC: inverses for layers this shard holds; later applies
  // precondition those layers (plain momentum before the first one). An
  // inverse for a layer the shard does not hold, or of the wrong shape, is
  // refused whole with an error.
  caf::replies_to<inverse_atom, inverse_set>::with<caf::ok_atom>,
  // From the chief between a step's apply and its tokens: the variables,
  // moving averages, optimizer slots and K-FAC inverses of this step.
  caf::replies_to<checkpoint_atom>::with<shard_snapshot>,
  // From the chief on a restore: replace all of that (and the step); a
  // snapshot that does not fit the shard's variables is refused whole.
  caf::replies_to<restore_atom, shard_snapshot>::with<caf::ok_atom>,
  // Counts of accepted, stale and refused pushes, per variable too.
  caf::replies_to<status_atom>::with<shard_status>>;

/// Inverts factors on its device actor and ships the inverses to the PS
/// shards owning the layers.
using inverse_actor = caf::typed_actor<
  // Factors from a covariance actor; answered once inverted and shipped.
  caf::replies_to<factors_atom, factor_set>::with<caf::ok_atom>,
  // Ship to these shards from now on (a PS shard came back after a loss);
  // as many as before.
  caf::reacts_to<rewire_atom, std::vector<ps_actor>>,
  caf::replies_to<status_atom>::with<inverse_status>>;

/// Keeps the moving-average K-FAC factors of some layers (docs/design.md §3).
using covariance_actor = caf::typed_actor<
  // A worker's statistics for this actor's layers, tagged with the step
  // they were computed at: contributions of one step are averaged into one
  // EMA update; older than the last folded step is dropped as stale; a
  // malformed or non-finite update is refused with an error.
  caf::replies_to<stats_atom, stats_update>::with<stats_ack>,
  // The factors' EMA state for a checkpoint, and its restore (refused
  // whole when a layer or a shape does not fit).
  caf::replies_to<checkpoint_atom>::with<covariance_snapshot>,
  caf::replies_to<restore_atom, covariance_snapshot>::with<caf::ok_atom>,
  // Hand the factors to these inverse actors from now on (an inverse task
  // came back after a loss); as many as before.
  caf::reacts_to<rewire_atom, std::vector<inverse_actor>>,
  caf::replies_to<status_atom>::with<covariance_status>>;

/// Owns global_step and the token queue; runs the sync loop.
using chief_actor = caf::typed_actor<
  // A worker finished a step and takes a token; the answer comes when a
  // token is available (or training is over).
  caf::replies_to<token_atom, worker_report>::with<token_grant>,
  // Run the steps to the end; the answer comes when training has finished
  // (it fails with ec::peer_lost when a role's loss paused the steps; a
  // paused run that was preempted ends where it stands).
  caf::replies_to<run_atom>::with<sync_summary>,
  // The same, with the covariance actors whose factors go into the
  // checkpoints (in a cluster they are known only once connected).
  caf::replies_to<run_atom, std::vector<covariance_actor>>::with<
    sync_summary>,
  // A worker task that (re)started while the run goes on: the global
  // step and its last reported data position to resume from. While the
  // steps cannot go on (paused for a lost role, or rolled back and not run
  // again yet) the answer waits until they do; the run's end first fails
  // it naming the worker, and a newer request of the same worker fails it
  // too.
  caf::replies_to<rejoin_atom, int32_t>::with<resume_point>,
  // After a role's loss paused the steps: go on from `step` (after a PS
  // shard's loss the checkpoint every shard was restored to) with these
  // shards; each gradient worker that rejoins instead of being rebound (its
  // link went down with the loss) resumes at its point here (none: at its
  // own position). Answers the run's new incarnation; a run request starts
  // the steps again.
  caf::replies_to<rollback_atom, int64_t, std::vector<ps_actor>,
                  std::vector<resume_point>>::with<int64_t>,
  // The K-FAC roles of the run now (their factors go into checkpoints).
  caf::reacts_to<rewire_atom, std::vector<covariance_actor>,
                 std::vector<inverse_actor>>,
  // From the chief's supervisor (actors/chief_supervisor.hpp): this PS
  // shard or K-FAC role ("ps:1") is lost, by its down message or an
  // unanswered probe; pause the steps (the run request then fails with
  // ec::peer_lost) until a rollback goes on.
  caf::reacts_to<lost_atom, std::string>,
  // Its own timer: write the checkpoint of this step even though some
  // worker has not reported its data position yet.
  caf::reacts_to<checkpoint_atom, int64_t>,
  // A node was preempted (why: "worker:1: SIGTERM"): finish the global
  // step in flight, checkpoint it and end the run (docs/distributed.md,
  // "Preemption"); the run's summary says so.
  caf::reacts_to<preempt_atom, std::string>,
  // Its own timer: the step in flight at the preemption (this one) did not
  // finish within chief_config::preempt_wait; end at the last applied one.
  caf::reacts_to<preempt_atom, int64_t>,
  // The chief's counters.
  caf::replies_to<status_atom>::with<chief_status>>;

/// Writes the chief's checkpoints (blocking file I/O, off the sync loop).
using checkpointer_actor = caf::typed_actor<
  caf::replies_to<checkpoint_atom, checkpoint_contents>::with<
    checkpoint_written>>;

/// Computes gradients on its data shard with its device actor.
using worker_actor = caf::typed_actor<
  // Exactly one step: pull, compute, push, take a token.
  caf::replies_to<step_atom>::with<worker_status>,
  // Steps until the chief hands out a stop token.
  caf::replies_to<run_atom>::with<worker_status>,
  // The same from a restored checkpoint: start at its global step and,
  // when recorded, at its position in the data order.
  caf::replies_to<run_atom, resume_point>::with<worker_status>,
  // Rebinding after a fault: a restarted chief, or a chief that rolled the
  // run back after a PS shard came back, says where to go on (a resume
  // point without a data order keeps the worker's own) and with whom
  // (covariance actors: empty keeps the worker's). Whatever the worker had
  // in flight is abandoned.
  caf::replies_to<run_atom, resume_point, chief_actor, std::vector<ps_actor>,
                  std::vector<covariance_actor>>::with<worker_status>,
  // Its own deadline for such a rebinding after it lost a peer.
  caf::reacts_to<stall_atom, int64_t>,
  // The worker's counters.
  caf::replies_to<status_atom>::with<worker_status>>;

} // namespace syncfac
