#pragma once

// K-FAC's covariance actor: the moving-average Kronecker factors A and G of
// some layers (docs/design.md §3). Workers send the statistics of their
// batches tagged with the step of the parameters they were computed at; every
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

/// Rows (gram_rows) of steps folded into a factor's average but not
/// yet into its matrix. The EMA is linear: k folds whose statistics came
/// as rows X_j are
///   raw ← decay^k · raw + Σ_j decay^(k-j) · (1 - decay) · w_j · X_jᵀX_j
/// (w_j: the step's example share, times the rows' scale), so they go into
/// the matrix in one pass when a hand-off needs it, or once they hold as
/// many rows as the factor has columns, instead of one pass per step.
struct deferred_rows {
  /// What raw is still to be multiplied by (decay^k).
  double raw_scale = 1;
  std::vector<gram_rows> rows;
  /// Per block: decay^(k-j) · (1 - decay) · w_j.
  std::vector<double> weights;
  /// Rows in all blocks.
  int64_t count = 0;
};

/// The EMA of one layer's factors.
struct covariance_layer {
  kfac_layer info;
  /// Zero-start EMA numerators (cpu::ema_update) and their common weight.
  /// The weight is always current; a_raw and g_raw only after
  /// fold_deferred (rows may wait in a_deferred and g_deferred). Whoever
  /// sets a_raw and g_raw (a restore) must clear the deferred rows.
  tensor a_raw;
  tensor g_raw;
  float weight = 0;
  deferred_rows a_deferred;
  deferred_rows g_deferred;
};

/// One factor's contributions to the step not folded yet: the example-
/// weighted mean of those that came as matrices (and their examples), and
/// those that came as rows (with theirs).
struct pending_factor {
  tensor mean;
  int64_t mean_examples = 0;
  std::vector<gram_rows> rows;
  std::vector<int64_t> row_examples;
};

/// Contributions of the step not folded yet, per layer.
struct pending_step {
  int64_t step = 0;
  int64_t examples = 0;
  int32_t contributions = 0;
  std::vector<pending_factor> a;
  std::vector<pending_factor> g;
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

/// Folds the rows waiting in every layer into a_raw and g_raw: afterwards
/// a_raw / weight and g_raw / weight are the averages of every step up to
/// last_folded (what a hand-off sends and a snapshot must save). An error
/// names the layer; shapes are checked when updates arrive, so it means a
/// bug.
caf::error fold_deferred(covariance_state& st);

/// Validates `cfg` and spawns the actor (event-based).
caf::expected<covariance_actor> spawn_covariance(caf::actor_system& sys,
                                                 covariance_config cfg);

} // namespace syncfac
