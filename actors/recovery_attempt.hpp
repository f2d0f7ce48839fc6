#pragma once

// One attempt of the chief's recovery from a lost role, as its supervisor
// carries it out (actors/chief_recovery.cpp): the recovery plan
// (runtime/cluster/recovery_plan.hpp) begins an attempt once the chief's
// steps are paused and again on every loss while one is under way. Every
// answer to a request of an attempt (a reconnect, the probe, the chief's
// step, a restore, the chief's rollback) goes to a continuation made by
// `while_current`, which holds the attempt weakly; the supervisor is its
// only owner and replaces it when the plan begins another, drops it when
// the run goes on or ends. An answer of an attempt given up therefore
// reaches nothing: a restore chain in flight when a second role goes away
// cannot take the run back to running, nor go on restoring shards.
//
// Why a lifetime and not only the plan's attempt numbers (which it checks
// too): CAF 0.17 runs a request's continuation whatever behaviour the
// actor is in by then, and a chain of requests (one shard after the other)
// would otherwise go on sending requests for an attempt over. The same
// shape as a worker's binding (actors/worker_binding.hpp).

#include <cstdint>
#include <memory>
#include <utility>

namespace syncfac {

struct recovery_attempt {
  explicit recovery_attempt(uint64_t number) : number(number) {
  }

  /// The plan's number of the attempt (its commands and answers name it).
  uint64_t number;
  /// The node watch's wait for the lost roles' hosts (its deadline).
  uint64_t wait = 0;
  /// Covariance actors took the checkpoint's factors (for the log).
  bool new_factors = false;
};

/// A continuation of the attempt `a`: runs `f(xs...)` while `a` is the one
/// under way, nothing after. `Ts` are the answer's types as the request
/// hands them over.
template <class... Ts, class F>
auto while_current(const std::shared_ptr<recovery_attempt>& a, F f) {
  return [w = std::weak_ptr<recovery_attempt>{a}, f = std::move(f)](Ts... xs) {
    if (!w.expired())
      f(std::forward<Ts>(xs)...);
  };
}

} // namespace syncfac
