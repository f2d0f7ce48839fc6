#pragma once

// What a PS shard and a covariance actor put into a checkpoint and take
// back from one. A restore checks the whole snapshot against the role's
// own variables and layers first and changes nothing when any part does
// not fit, so a wrong checkpoint never leaves a role half restored.

#include <caf/error.hpp>

#include "actors/covariance.hpp"
#include "actors/ps_shard.hpp"
#include "runtime/checkpoint/checkpoint_contents.hpp"

namespace syncfac {

shard_snapshot take_snapshot(const ps_shard_state& st);

/// Also sets every accumulator's step to the snapshot's (the shard then
/// fails a pending apply: the chief that restores re-synchronises).
caf::error restore_snapshot(ps_shard_state& st, shard_snapshot snap);

/// The folded factors only: statistics of a step not folded yet are not
/// part of it (at most one step's worth, which the EMA barely weighs).
covariance_snapshot take_snapshot(const covariance_state& st);

caf::error restore_snapshot(covariance_state& st, covariance_snapshot snap);

} // namespace syncfac
