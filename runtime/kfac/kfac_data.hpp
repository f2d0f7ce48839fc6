#pragma once

// K-FAC's data as its roles exchange it (docs/design.md §3, §4): statistics
// from workers to covariance actors, factors from covariance to inverse
// actors, inverses from inverse actors to the PS shards that own the layers,
// and the device requests behind them. The K-FAC runtime computes and checks
// them; messages/kfac_messages.hpp sends them. Every struct a peer can send
// is validated by its receiver against the layer collection.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kfac_types.hpp"
#include "kernels/tensor.hpp"
#include "runtime/inspect.hpp"
#include "runtime/kfac/kfac_preconditioner.hpp"

namespace syncfac {

/// What statistics a device computes alongside (or instead of) gradients.
struct stats_request {
  fisher_type fisher = fisher_type::sampled;
  /// Examples (a prefix of the batch) and conv locations used; 0: all.
  /// The device advances the location seed with every request, so the
  /// locations differ from step to step; the sampled Fisher's targets come
  /// from the device's own generator.
  factor_sampling sampling;
  /// A factor with fewer rows than columns may come as its rows
  /// (layer_stats::a_rows): what a covariance actor takes. A single
  /// process folding matrices asks for matrices only.
  bool rows = false;
};

SYNCFAC_INSPECT(stats_request, x.fisher, x.sampling.max_examples,
                x.sampling.max_locations, x.sampling.seed, x.rows)

SYNCFAC_INSPECT(gram_rows, x.x, x.scale)

/// One layer's factor statistics of one batch: A [a_dim, a_dim],
/// G [g_dim, g_dim] (kernels/cpu/kfac_factors.hpp conventions). Each
/// factor comes either as the matrix or, asked for with
/// stats_request::rows and fewer rows than columns, as its rows
/// (a_rows.x [m, a_dim], A = a_rows.scale · xᵀx; the matrix empty): 16
/// rows of the ConvNet's dense layer are 50x smaller than its 785² A.
struct layer_stats {
  std::string layer;
  tensor a;
  tensor g;
  gram_rows a_rows;
  gram_rows g_rows;
};

SYNCFAC_INSPECT(layer_stats, x.layer, x.a, x.g, x.a_rows, x.g_rows)

/// A worker's statistics for the layers one covariance actor owns.
struct stats_update {
  /// The sending worker's task index (for reports).
  int32_t worker = 0;
  /// The global step of the parameters the statistics were computed at.
  int64_t step = 0;
  /// Examples the statistics average over.
  int64_t examples = 0;
  std::vector<layer_stats> layers;
};

SYNCFAC_INSPECT(stats_update, x.worker, x.step, x.examples, x.layers)

/// One layer's moving-average factors (already divided by the EMA weight).
struct layer_factors {
  std::string layer;
  /// T of the layer (1 for dense), for the conv damping √(λ/T).
  int64_t locations = 1;
  /// EMA updates these factors have seen (the too-early guard).
  int64_t cov_updates = 0;
  tensor a;
  tensor g;
};

SYNCFAC_INSPECT(layer_factors, x.layer, x.locations, x.cov_updates, x.a, x.g)

/// Factors handed from a covariance actor to an inverse actor.
struct factor_set {
  /// The newest statistics' step folded into these factors.
  int64_t step = 0;
  std::vector<layer_factors> layers;
};

SYNCFAC_INSPECT(factor_set, x.step, x.layers)

/// How a Cholesky-mode layer_inverse holds its factors.
enum class inverse_form : uint8_t {
  /// a = (A + a_damping I)⁻¹, g = (G + g_damping I)⁻¹.
  inverse,
  /// a, g are the lower Cholesky factors of (A + a_damping I) and
  /// (G + g_damping I); preconditioning solves with them (what inverse
  /// actors ship: a third of the inversion work).
  cholesky_factor,
};

/// One layer's inverse, ready for preconditioning on a PS shard.
/// Cholesky mode: see inverse_form.
/// Eigen mode: a, g are the eigenvectors (columns), a_values, g_values the
/// eigenvalues, and damping is λ (exact damping in the eigenbasis).
struct layer_inverse {
  std::string layer;
  inverse_mode mode = inverse_mode::cholesky;
  int64_t locations = 1;
  /// λ the run asked for.
  float damping = 0;
  /// The damping actually added to A's and G's diagonals (Cholesky mode),
  /// raised above factored_damping's when a retry was needed.
  float a_damping = 0;
  float g_damping = 0;
  tensor a;
  tensor g;
  tensor a_values;
  tensor g_values;
  inverse_form form = inverse_form::inverse;
};

SYNCFAC_INSPECT(layer_inverse, x.layer, x.mode, x.locations, x.damping,
                x.a_damping, x.g_damping, x.a, x.g, x.a_values, x.g_values,
                x.form)

/// Inverses of some layers, computed from one factor_set.
struct inverse_set {
  int64_t step = 0;
  std::vector<layer_inverse> layers;
  /// Layers skipped (too few covariance updates) or failed even with
  /// more damping, each with the reason; their previous inverse stays.
  std::vector<std::string> problems;
  /// Layers whose damping had to be raised to invert.
  int64_t damping_raised = 0;
};

SYNCFAC_INSPECT(inverse_set, x.step, x.layers, x.problems, x.damping_raised)

} // namespace syncfac
