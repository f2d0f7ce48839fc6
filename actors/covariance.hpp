#pragma once

// K-FAC's covariance actor: the moving-average Kronecker factors A and G of
// some layers (design.md §3). Workers send the statistics of their batches
// tagged with the step of the parameters they were computed at; every
// `invert_every`-th EMA update the current factors go to the inverse actors
// owning the layers.
//
// One EMA update per step. The contributions of one step (several workers'
// batches) are averaged, weighted by their examples, and folded together:
// folding them one by one would let the step with the most workers weigh
// more in the average than the decay says. A step is folded when
// `contributions_per_step` updates for it arrived, or, incomplete, when the
// first update of a newer step arrives (a worker that never reports must
// not stall the factors). An update for a step already folded, or older
// than the pending one, is stale: the factors have moved past it.
//
// Hand-offs never queue. While a factor set is on its way to an inverse
// actor, later hand-offs to it only mark it due, and its answer sends the
// factors current then: inverting stale factors would be wasted work.
// Failed hand-offs are counted, never fatal; the next one retries.
//
// Event-based: the work per message is one pass over the layers' factors.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actors.hpp"
#include "messages/kfac_messages.hpp"

namespace syncfac {

struct covariance_config {
  /// The actor's number, reported in every answer and error.
  int32_t index = 0;
  /// The layers this actor keeps factors of; a stats update carries
  /// exactly these.
  std::vector<kfac_layer> layers;
  /// cov_ema_decay and invert_every are used here.
  kfac_config kfac;
  /// Updates per step that complete the step (the workers that send
  /// statistics); >= 1.
  int32_t contributions_per_step = 1;
  /// The inverse actors the factors go to.
  std::vector<inverse_actor> inverses;
  /// Per layer: index into `inverses` of the actor inverting it.
  std::vector<int32_t> inverse_of;
  /// Longest wait for an inverse actor's answer to a hand-off.
  std::chrono::milliseconds request_timeout{60000};

  /// ec::invalid_config naming the problem unless: index >= 0; at least
  /// one layer, each valid, names unique; kfac valid;
  /// contributions_per_step >= 1; inverse_of has one valid index per
  /// layer into `inverses`, whose handles are all set; timeout positive.
  caf::error validate() const;
};

/// The EMA of one layer's factors.
struct covariance_layer {
  kfac_layer info;
  /// Zero-start EMA numerators (cpu::ema_update) and their common weight.
  tensor a_raw;
  tensor g_raw;
  float weight = 0;
};

/// Contributions of the step not folded yet: per layer the example-
/// weighted means of A and G so far.
struct pending_step {
  int64_t step = 0;
  int64_t examples = 0;
  int32_t contributions = 0;
  std::vector<tensor> a_mean;
  std::vector<tensor> g_mean;
};

/// One inverse actor as seen from here.
struct inverse_peer {
  inverse_actor handle;
  /// Indices into the layers of the layers it inverts.
  std::vector<size_t> layers;
  /// A hand-off is on its way.
  bool in_flight = false;
  /// A newer hand-off came up meanwhile; send when the answer comes.
  bool due = false;
};

struct covariance_state {
  static inline const char* name = "covariance";

  covariance_config cfg;
  std::vector<covariance_layer> layers;
  std::optional<pending_step> pending;
  /// The newest folded step; -1 before the first fold.
  int64_t last_folded = -1;
  std::vector<inverse_peer> peers;
  covariance_status status;
};

covariance_actor::behavior_type
covariance_role(covariance_actor::stateful_pointer<covariance_state> self,
                covariance_config cfg);

/// Validates `cfg` and spawns the actor (event-based).
caf::expected<covariance_actor> spawn_covariance(caf::actor_system& sys,
                                                 covariance_config cfg);

} // namespace syncfac
