#pragma once

// Multi-tower (the seeds' train_mnist_multitower): one device_actor that
// splits every batch across N real device actors ("towers") and combines
// their answers, so a worker drives N devices exactly as it drives one.
//
// The tower device only forwards and combines (cheap sums), so it is an
// event-based actor; the towers are detached device actors and compute
// their parts in parallel.
//
// Semantics, request by request:
// - load_model, params (set), optimizer: sent to every tower; answered once
//   all have answered. Every tower loads with the same seed, so the
//   replicas are identical (load_model checks that they are).
// - grads (params, batch[, stats_request]), stats, eval: the batch of B
//   examples is split into N contiguous parts of nearly equal size (the
//   first B mod N parts one example larger; a tower whose part is empty is
//   not asked). With n_k examples in part k, and each tower answering for
//   the MEAN loss of its own part:
//     gradients = Σ_k (n_k / B) · grad_k    (the gradient of the batch mean)
//     loss      = Σ_k n_k · loss_k / B
//     correct, count: summed;  compute_s: the slowest tower's.
//   Sparse gradients are merged the same way: each tower's rows scaled by
//   n_k / B, rows of the same index (within or across towers) summed, the
//   indices in ascending order.
// - K-FAC statistics: per layer, A = Σ w_k A_k / Σ w_k and likewise G, with
//   w_k the examples tower k's statistics average over; the examples add
//   up. This is exact, not an approximation: A_k is an average over tower
//   k's examples (and conv locations), and G_k too, because each tower
//   scales its per-example output gradient by ITS OWN batch size
//   (g = n_k · ds, kernels/cpu/kfac_factors.hpp), which undoes the 1/n_k of
//   its mean loss. So G_k averages the same per-example quantities the
//   single device's G averages over the whole batch, and the weighted mean
//   over towers is the whole-batch mean.
//   Sub-sampling: max_examples = m of a B-example batch is split across
//   the towers like the batch (tower k uses the first m_k <= n_k examples
//   of its part, Σ m_k = m) rather than given to the first towers only,
//   so every tower shares the statistics work. A tower with m_k = 0
//   computes gradients only (stats: is not asked). The conv locations are
//   drawn per tower from the request's seed mixed with the tower index
//   (the towers would otherwise pick the same locations for their k-th
//   examples). With all examples and locations the statistics equal the
//   single device's up to float rounding.
// - train: refused (ec::unavailable). A local optimizer step on each tower
//   would be a step on each part's gradient only, and the replicas would
//   drift apart; multi-tower trains through the sync runtime's grads.
// - params (get), gemm: tower 0 (the replicas are identical).
// - invert: round robin over the towers (the seeds place inverse work
//   round robin on the devices).
// - info: backend "towers(N x <tower backend>)", threads summed.
//
// Every request to a tower carries `request_timeout`; a failure (an error
// of the tower, a timeout, a tower that is gone) answers the request with
// an error naming the tower ("tower k of N") and the request. The tower
// device links to its towers: stopping it stops them, and a tower that
// dies takes the tower device down with it (it could not answer anyway).

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/actors.hpp"
#include "actors/tower_split.hpp"
#include "runtime/data/batcher.hpp"

namespace syncfac {

struct tower_device_config {
  /// The real devices, at least one.
  std::vector<device_actor> towers;
  /// Longest wait for one tower's answer.
  std::chrono::milliseconds request_timeout{60000};

  caf::error validate() const;
};

/// Validates the towers and timeout and spawns the tower device.
caf::expected<device_actor>
spawn_tower_device(caf::actor_system& sys, std::vector<device_actor> towers,
                   std::chrono::milliseconds request_timeout);

} // namespace syncfac
