#pragma once

// Messages of K-FAC's roles (docs/design.md §3, §4) beside the data they
// carry (runtime/kfac/kfac_data.hpp: statistics, factors, inverses): a
// covariance actor's answer and the roles' counters.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/inspect.hpp"
#include "runtime/kfac/kfac_data.hpp"

namespace syncfac {

/// A covariance actor's answer to a stats update.
struct stats_ack {
  /// False: the update was older than one already folded (dropped, counted).
  bool accepted = false;
  /// EMA updates folded so far.
  int64_t cov_updates = 0;
};

SYNCFAC_INSPECT(stats_ack, x.accepted, x.cov_updates)

/// A covariance actor's counters.
struct covariance_status {
  int32_t index = 0;
  /// Stats updates received, folded (as EMA updates: one per step, the
  /// contributions of one step averaged), dropped as stale, refused.
  int64_t received = 0;
  int64_t cov_updates = 0;
  int64_t stale = 0;
  int64_t refused = 0;
  /// Factor sets handed to inverse actors, and failures doing so.
  int64_t factor_sets_sent = 0;
  int64_t send_failures = 0;
  /// Hand-offs the cadence called for, one per inverse actor each time:
  /// while an inverse actor is still busy with the last set, the newest
  /// factors wait and later ones replace them (sent once it answers), so
  /// factor_sets_sent trails this by the waiting and replaced ones.
  int64_t factor_sets_due = 0;
  std::string last_error;
};

SYNCFAC_INSPECT(covariance_status, x.index, x.received, x.cov_updates, x.stale,
                x.refused, x.factor_sets_sent, x.send_failures,
                x.factor_sets_due, x.last_error)

/// An inverse actor's counters.
struct inverse_status {
  int32_t index = 0;
  /// Factor sets received, refused (malformed), and inverted.
  int64_t received = 0;
  int64_t refused = 0;
  int64_t inversions = 0;
  /// Layer inversions skipped as too early, failed, needing more damping.
  int64_t too_early = 0;
  int64_t failed = 0;
  int64_t damping_raised = 0;
  /// Inverse sets delivered to shards, and failures doing so.
  int64_t shipped = 0;
  int64_t ship_failures = 0;
  /// Seconds spent inverting (on the device).
  double invert_s = 0;
  std::string last_error;
};

SYNCFAC_INSPECT(inverse_status, x.index, x.received, x.refused, x.inversions,
                x.too_early, x.failed, x.damping_raised, x.shipped,
                x.ship_failures, x.invert_s, x.last_error)

} // namespace syncfac
