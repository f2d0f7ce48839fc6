#pragma once

// K-FAC's inverse actor: inverts the factors a covariance actor hands it on
// its device actor and ships each layer's inverse to the PS shard owning the
// layer (docs/design.md §3). The covariance actor's request is answered once
// every shard concerned has installed its part, so the covariance actor never
// has more than one set per inverse actor on its way.
//
// Layers with fewer than min_cov_updates covariance updates are not sent
// to the device at all (inverting them is the seeds' 0/0 Cholesky
// failure); a layer whose inversion fails even with more damping is only
// counted: its shard keeps the previous inverse, or plain momentum before
// the first one. Neither is an error for the set.
//
// Event-based: the inversion runs on the (detached) device actor, so this
// actor stays responsive to status requests meanwhile.

#include <chrono>
#include <cstdint>
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

struct inverse_config {
  /// The actor's number, reported in every answer and error.
  int32_t index = 0;
  /// The layers this actor inverts.
  std::vector<kfac_layer> layers;
  /// damping, mode, min_cov_updates and max_damping_retries matter here;
  /// the device gets the whole config with each set.
  kfac_config kfac;
  /// The device actor that inverts.
  device_actor device;
  /// The PS shards the inverses go to.
  std::vector<ps_actor> shards;
  /// Per layer: index into `shards` of the shard holding its variables.
  std::vector<int32_t> shard_of;
  /// Longest wait for the device's inversion and for each shard's answer.
  std::chrono::milliseconds request_timeout{60000};

  /// ec::invalid_config naming the problem unless: index >= 0; at least
  /// one layer, each valid, names unique; kfac valid; the device set;
  /// shard_of has one valid index per layer into `shards`, whose handles
  /// are all set; timeout positive.
  caf::error validate() const;
};

struct inverse_state {
  static inline const char* name = "inverse";

  inverse_config cfg;
  inverse_status status;
};

/// Validates `cfg` and spawns the actor (event-based).
caf::expected<inverse_actor> spawn_inverse(caf::actor_system& sys,
                                           inverse_config cfg);

} // namespace syncfac
