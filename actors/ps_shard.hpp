#pragma once

// The parameter-server shard: a subset of the model's variables, one
// gradient accumulator per variable (TF's ConditionalAccumulator, dense or
// sparse) and the optimizer's slots for them. Workers push gradients tagged
// with their local_step; the chief asks the shard to apply once enough
// arrived (docs/design.md §1, §2).
//
// Every accumulator of a shard sees the same set_step and the same takes,
// so their global_steps move in lockstep: a push is fresh or stale for the
// whole shard, and the shard is always at one global_step.
//
// A push may carry gradients for only some of the shard's variables (TF's
// grad=None, for which SyncReplicasOptimizer makes no accumulator and
// applies nothing). An apply of n completes once n fresh pushes came (or
// every accumulator holds n gradients): each variable is averaged over the
// gradients it got, and one that no push of the round carried stays as it
// is while its accumulator moves on with the others (under K-FAC it takes
// a zero gradient, its layer being preconditioned whole). So a variable no
// worker pushes never holds a step up.
//
// applied.gradients is the smallest count any variable averaged over (equal
// for all when every push carries every variable, 0 when some variable got
// none); a shard without variables completes every apply at once, advances
// its step and reports 0.
// set_step fails a pending apply (the chief that asked re-synchronises), as
// does the shard stopping. Under --clip_norm the chief first asks each
// shard for the sum of the squares of its averages (norm_atom, answered
// once ready, taking nothing), then applies with the one factor made from
// all of them.
//
// Event-based, not detached: a handler does at most one pass over the
// shard's variables and never blocks.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/pull_waitlist.hpp"
#include "messages/kfac_messages.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/optimizer_config.hpp"
#include "runtime/sync/conditional_accumulator.hpp"
#include "messages/push_parts.hpp"
#include "runtime/sync/sparse_accumulator.hpp"

namespace syncfac {

struct ps_shard_config {
  /// The shard's number, reported in every answer and error.
  int32_t index = 0;
  /// The shard's variables with their initial values, in the order pulls
  /// report them.
  parameter_set variables;
  /// Names among `variables` that receive sparse gradients (row indices
  /// plus rows, e.g. an embedding table); each needs rank >= 1.
  std::vector<std::string> sparse_variables;
  optimizer_config optimizer;
  /// Optimizer kind kfac: the layers whose weight and bias this shard
  /// holds (from the model's layer_collection); their gradients are
  /// preconditioned once an inverse arrives. Sparse variables (no layer
  /// may hold one) take momentum SGD on their touched rows with K-FAC's
  /// learning rate and momentum (docs/models.md).
  std::vector<kfac_layer> kfac_layers;
  /// Names among `variables` that keep no moving average (TF's
  /// ExponentialMovingAverage applied to variables_to_average only):
  /// evaluations with averages read their current values.
  std::vector<std::string> unaveraged_variables;
  /// The moving averages' decay (TF's ExponentialMovingAverage), in
  /// [0, 1); 0 keeps none. Every apply moves them once its update is
  /// made, so a step's averages are always those of its variables: a
  /// snapshot of the step holds them, and a round a restarted chief
  /// completes moves them too (actors/shard_steps.hpp).
  float moving_average_decay = 0;

  /// ec::invalid_config unless: index >= 0; names non-empty and unique;
  /// values finite and matching their shapes; every sparse name names a
  /// variable of rank >= 1, once; the optimizer is valid; every K-FAC
  /// layer is valid, once, with a dense weight and bias of the shard that
  /// fit its a_dim x g_dim (and K-FAC layers only with optimizer kfac);
  /// the moving averages' decay is in [0, 1).
  caf::error validate() const;
};

/// One variable's accumulator, dense or sparse as the config says.
using shard_accumulator
  = std::variant<conditional_accumulator, sparse_accumulator>;

/// A K-FAC layer of the shard: its variables and its latest inverse.
struct shard_kfac_layer {
  kfac_layer info;
  size_t weight = 0;
  size_t bias = 0;
  std::optional<layer_inverse> inverse;
};

/// The chief's apply that waits for gradients.
struct pending_apply {
  caf::typed_response_promise<applied> promise;
  int64_t n = 0;
  /// The step the chief asked for (equal to the shard's when accepted).
  int64_t step = 0;
  /// --clip_norm's factor for every average (1: unclipped).
  float scale = 1.0f;
};

/// The chief's norm request (--clip_norm) that waits for gradients.
struct norm_request {
  caf::typed_response_promise<norm_part> promise;
  int64_t n = 0;
  int64_t step = 0;
};

struct ps_shard_state {
  static inline const char* name = "ps_shard";

  ps_shard_state() = default;
  ps_shard_state(const ps_shard_state&) = delete;
  ps_shard_state& operator=(const ps_shard_state&) = delete;

  /// Fails a pending apply: the chief learns at once that this shard went
  /// away, instead of when its bounded wait runs out.
  ~ps_shard_state();

  /// The place in `kfac` of the K-FAC layer `name`, if the shard holds it.
  std::optional<size_t> kfac_layer(const std::string& name) const;

  int32_t index = 0;
  parameter_set variables;
  /// Moving averages of the variables, starting at their initial values
  /// (TF's ExponentialMovingAverage shadows); an unaveraged variable's
  /// entry follows its current value.
  parameter_set averages;
  /// averaged[i]: variables[i] keeps a moving average.
  std::vector<bool> averaged;
  /// ps_shard_config::moving_average_decay.
  float average_decay = 0;
  /// accumulators[i] belongs to variables[i].
  std::vector<shard_accumulator> accumulators;
  std::unordered_map<std::string, size_t> by_name;
  /// Made for `variables`, so update(i, ...) addresses variables[i].
  std::optional<optimizer> opt;
  /// The step and counters the shard reports as they are (make_status
  /// fills in the rest: `shard`, the variables' accumulators and K-FAC's
  /// layers). counters.global_step is the accumulators' common step; also
  /// the step of a shard without variables, which has no accumulator to
  /// hold it.
  shard_status counters;
  /// Fresh whole pushes since the last apply: an apply of n proceeds once
  /// n pushes came, each variable averaged over the gradients it got (a
  /// push may lack some, TF's grad=None).
  int64_t round_pushes = 0;
  /// Per variable: refused pushes whose error named it. The accumulators
  /// never see a malformed gradient (the shard checks the whole push
  /// first), so their own refused() stays 0 and status adds these.
  std::vector<int64_t> refused;
  std::optional<pending_apply> pending;
  std::optional<norm_request> pending_norm;
  /// Pushes that come in parts (over the network) wait here until whole.
  std::optional<push_assembler> assembler;
  std::vector<shard_kfac_layer> kfac;
  /// Workers' pulls waiting for the step they ask for, and whether the
  /// timer that answers those whose wait ran out is set (one at a time).
  pull_waitlist waiting_pulls;
  bool expiry_set = false;
};

/// Validates `cfg` and spawns the shard (event-based).
caf::expected<ps_actor> spawn_ps_shard(caf::actor_system& sys,
                                       ps_shard_config cfg);

} // namespace syncfac
