#pragma once

// What a starting chief finds on the PS shards: a new run (every shard at
// step 0), a run under way (every shard at one step), or a run whose
// previous chief went away between its applies of one round to different
// shards, which it completes (docs/distributed.md, "A chief went away").
//
// A round's apply reaches the shards one message each, so a chief killed
// while sending them leaves some shards one step ahead of the rest. The
// gradients of that round are still in the lagging shards' accumulators
// (the workers pushed them to every shard before the chief asked for the
// apply), so the round can be finished where it was not applied: the same
// apply (step, R, and the clip factor the ahead shards took) on each
// lagging shard. That brings every shard to the step the ahead ones are
// at, with the parameters the lost chief's round would have given, instead
// of rolling the whole run back to a checkpoint (or refusing to start
// without one).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"

namespace syncfac {

/// What the shards hold of a run, once any half-applied round is complete.
struct shard_steps {
  /// The step every shard is at: -1 for a new run (all at step 0) and when
  /// they disagree in a way no lost round explains.
  int64_t step = -1;
  /// "ps:0 at 26, ps:1 at 23" when they disagree that way; empty else.
  std::string disagreement;
  /// The shards on which this call completed the lost chief's round.
  std::vector<size_t> completed;
};

struct shard_step_waits {
  /// Longest wait for a shard's status.
  std::chrono::milliseconds request_timeout{10000};
  /// Longest wait for a lagging shard's apply, which may still wait for
  /// pushes on their way from the workers (the chief's step_timeout).
  std::chrono::milliseconds step_timeout{120000};
  /// R: the gradients every apply of the run averages.
  int64_t replicas_to_aggregate = 1;
};

/// Asks every shard for its step and completes a round a lost chief
/// applied on some shards only (see above), telling `note` what it does.
/// A shard that does not answer, or whose completing apply fails, is an
/// error naming the shard, the step and what it waited for.
caf::expected<shard_steps>
find_shard_steps(caf::scoped_actor& self, const std::vector<ps_actor>& shards,
                 const shard_step_waits& waits,
                 const std::function<void(const std::string&)>& note);

} // namespace syncfac
