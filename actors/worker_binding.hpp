#pragma once

// One binding of a worker to a chief and its PS shards: the configuration's
// at spawn, a rebind's after a fault (actors/worker.cpp). Every answer to a
// request the worker sends while a binding is in force goes to a
// continuation made by `while_bound`, which holds the binding weakly; the
// worker is the binding's only owner and drops it when it loses a peer or
// is rebound, so an answer of an ended binding finds nothing to act on.
//
// Why a lifetime and not a child actor per binding, or behaviours alone:
// CAF 0.17 runs a request's continuation (`then`) whatever behaviour the
// actor is in by the time the answer comes, so states as behaviours cannot
// by themselves keep an old binding's answers out; and a step-loop child
// actor would either own the step's state (the parameters, the data
// position, every counter worker_status reports) and report it back in
// messages, or race the worker for it on another thread. A binding that
// ends is one reset pointer, and what belongs to it (the statistics in
// flight) ends with it.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace syncfac {

struct worker_binding {
  explicit worker_binding(size_t covariance_actors)
    : stats_in_flight(covariance_actors, false) {
  }

  /// Covariance actors with a statistics update of this binding in flight
  /// (back-pressure; a new binding starts with none).
  std::vector<bool> stats_in_flight;
  /// The statistics role: a wake-up (its step_atom to itself) of this
  /// binding is on its way; a wake-up of an earlier one is not it.
  bool wake_pending = false;
};

/// A continuation of the binding `b`: runs `f(xs...)` while `b` is in force,
/// `ended(xs...)` after (an answer of an ended binding; by default nothing).
/// `Ts` are the answer's types as the request hands them over.
template <class... Ts, class F, class Ended>
auto while_bound(const std::shared_ptr<worker_binding>& b, F f,
                 Ended ended) {
  return [w = std::weak_ptr<worker_binding>{b}, f = std::move(f),
          ended = std::move(ended)](Ts... xs) {
    if (w.expired())
      ended(std::forward<Ts>(xs)...);
    else
      f(std::forward<Ts>(xs)...);
  };
}

template <class... Ts, class F>
auto while_bound(const std::shared_ptr<worker_binding>& b, F f) {
  return while_bound<Ts...>(b, std::move(f), [](Ts...) {});
}

} // namespace syncfac
