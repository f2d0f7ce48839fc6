#pragma once

// A worker: its shard of the data and its local_step. One step is the
// seeds' train_op: pull the variables from every PS shard, compute
// gradients of one batch on the device actor, push them to the shards
// tagged with local_step, then take a token from the chief and set
// local_step to it. The barrier is at the end of the step. Its states
// (initialising, ready, running, stalled, stopped) are behaviours, and
// what it sends is answered to the binding it was sent under
// (actors/worker_binding.hpp; docs/design.md, "Failure model").
//
// Its files: worker.cpp (the states), worker_step.cpp (the step loop:
// pull, compute, push, token), worker_pulls.cpp (payload bytes and the
// rows a pull asks for), worker_stats.cpp (K-FAC statistics and the
// statistics role), worker_rebind.cpp (initialising, resuming,
// rebinding), worker_faults.cpp (failing and stalling on a lost peer);
// what they share is actors/worker_parts.hpp.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/worker_binding.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model_spec.hpp"
#include "messages/push_parts.hpp"

namespace syncfac {

/// What a worker task does (the seeds' dedicated_workers strategy gives
/// some tasks statistics instead of gradients).
enum class worker_role : uint8_t {
  /// Gradients every step (with K-FAC statistics when `stats` is set).
  gradients,
  /// K-FAC statistics only: pull, compute statistics of its own batch,
  /// send them, once per global step; no tokens.
  statistics,
};

struct worker_config {
  int32_t index = 0;
  worker_role role = worker_role::gradients;
  /// Workers sharing the training set (the data shards).
  int32_t num_workers = 1;
  model_spec model;
  /// Seed of the model replica (its initial values are overwritten by the
  /// first pull) and of this worker's data order.
  uint64_t seed = 0;
  int64_t batch_size = 128;
  std::shared_ptr<const dataset> data;
  device_actor device;
  std::vector<ps_actor> shards;
  chief_actor chief;
  /// K-FAC: statistics of this worker's batches go to these covariance
  /// actors, each layer to covariance[covariance_of[layer]]. Required for
  /// the statistics role; optional (with `stats`) for gradient workers.
  std::vector<covariance_actor> covariance;
  std::map<std::string, int32_t> covariance_of;
  std::optional<stats_request> stats;
  /// K-FAC's exact cadence (kfac_cadence::exact): a gradient worker's push
  /// waits until the covariance actors have answered its statistics, so
  /// none is skipped.
  bool push_after_stats = false;
  /// Statistics role: how often to look for a new global step.
  std::chrono::milliseconds poll_interval{2};
  /// A push to a shard in another process goes as parts of about this
  /// many bytes (messages/push_parts.hpp); 0: always whole.
  int64_t push_part_bytes = default_push_part_bytes;
  /// Pull the embedding table whole every step (the old behaviour, for
  /// comparison) instead of only the rows the next batch looks up
  /// (messages/row_pull.hpp; docs/protocol.md, "Row pulls").
  bool whole_pulls = false;
  /// Longest wait for a device, pull or push answer.
  std::chrono::milliseconds request_timeout{60000};
  /// Longest wait for a token (the slowest worker of the step sets it).
  std::chrono::milliseconds token_timeout{120000};
  /// In a cluster, losing the chief or a PS shard (its link breaks, a
  /// request to it times out) is survivable: the worker abandons its step
  /// and waits this long to be rebound (run_atom, resume_point, chief,
  /// shards) by a restarted or recovered chief before it fails, naming
  /// what it lost. 0: such a loss fails the worker at once.
  std::chrono::milliseconds peer_wait{0};

  caf::error validate() const;
};

/// How far the caller of a step or run request wants the worker to go.
enum class step_mode : uint8_t {
  /// One step (step_atom): answered at its token.
  one_step,
  /// Steps until a stop token (run_atom, a rebind, the statistics role).
  until_stop,
};

struct worker_state {
  static inline const char* name = "worker";

  worker_config cfg;
  std::optional<batcher> batches;
  batch current;
  /// The model's parameter names in order, and which shard holds each
  /// (empty until the first pull told; initialised() from then on).
  parameter_set params;
  std::map<std::string, size_t> slot_of;
  std::vector<size_t> shard_of;
  /// The global step the values in `params` were pulled at; none after a
  /// rebind or a stop (the next step pulls again).
  std::optional<int64_t> params_step;
  /// Row pulls: the table the model's embedding_bag looks up (none: the
  /// model has none, or the worker pulls whole), and the data position
  /// whose next batch's rows of it `params` hold at params_step (none:
  /// the whole table is at params_step). Its other rows are older, and
  /// that batch never reads them.
  std::optional<std::string> row_table;
  std::optional<batcher_state> rows_for;
  /// Row pulls: whether the device's replica holds this worker's tables
  /// as they are but for `rows_for_device`, the rows pulled since its last
  /// step, which go with the next one instead of the whole tables.
  bool device_tables_current = false;
  std::vector<sparse_update> rows_for_device;
  /// The batch the next step takes, drawn ahead to pull its rows, the
  /// data position it was drawn at and the batcher after it.
  std::optional<batcher> ahead;
  batcher_state ahead_from;
  batch ahead_batch;
  /// The position and counters the worker reports as they are (status()
  /// fills in `worker`): its local step, steps and their times, the K-FAC
  /// statistics it sent, the peers it lost and its transfers.
  worker_status counters;
  /// Shards that answered a push of this worker with "stale" since its
  /// last token request: the next request reports them (the request does
  /// not wait for the push's answers).
  int32_t stale_unreported = 0;
  /// Statistics role: the global step of the last statistics sent.
  int64_t stats_step = -1;
  std::chrono::steady_clock::time_point step_started;
  /// The data position at the start of the current step: a step
  /// abandoned before its update was applied takes its batch again.
  std::optional<batcher_state> step_data;
  /// The caller of the step or run in progress and how far it asked to go.
  caf::typed_response_promise<worker_status> promise;
  /// Whether a step or run request is in force: its promise is pending,
  /// or it came without a sender (a node supervisor's rejoin or rebind is
  /// sent anonymously), whose promise is never pending but whose loop
  /// begins all the same once the first pull is done.
  bool asked = false;
  step_mode mode = step_mode::one_step;
  /// The binding in force (the only owner: continuations hold it weakly);
  /// none while the worker waits to be rebound after losing a peer.
  std::shared_ptr<worker_binding> bound;
  /// The chief's run incarnation (resume_point::incarnation).
  int64_t incarnation = 0;

  /// "worker N", how every error and log line of the worker begins.
  std::string who() const;
  /// The counters as worker_status.
  worker_status status() const;
  /// Whether the worker knows which shard holds each variable (its first
  /// pull is done).
  bool initialised() const {
    return !shard_of.empty();
  }
  /// Whether `params` hold the variables at the local step already.
  bool params_current() const {
    return params_step && *params_step == counters.local_step
           && (!rows_for || *rows_for == batches->state());
  }
};

worker_actor::behavior_type
worker(worker_actor::stateful_pointer<worker_state> self, worker_config cfg);

caf::expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                         worker_config cfg);

} // namespace syncfac
