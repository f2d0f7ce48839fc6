#pragma once

// The chief's steps and rounds as lifetimes, the shape of a worker's
// binding (actors/worker_binding.hpp). The chief holds `chief_steps` while
// its steps run (from the set_step that starts them to a lost role's
// pause) and one `chief_round` per round (its norm and apply; replaced by
// the next round, dropped by a rollback or a round given up at a
// preemption). Every answer to a request of the steps or of a round goes
// to a continuation made by `while_steps` or `while_round`, which holds
// them weakly: an answer of steps that paused, of a round given up or of
// the run before a rollback finds nothing to act on, and no check of an
// incarnation or a flag is needed where it lands.
//
// One exception, and why a round does not end with the pause: a round
// whose every shard applied after the steps paused is in the parameters,
// so it counts (the run goes on, or rolls back, from the step after it);
// dropping it made a resumed run apply the step twice. `while_round`
// therefore takes what to do with an answer that comes once the steps
// paused, and a rollback (which drops the round) ends even that.
//
// Why lifetimes and not behaviours alone: CAF 0.17 runs a request's
// continuation whatever behaviour the actor is in by the time the answer
// comes.

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

namespace syncfac {

/// The chief's steps while they run; nothing but its lifetime matters.
struct chief_steps {};

/// One round: the apply of global step `step` (with --clip_norm, the norm
/// first) and the steps it belongs to.
struct chief_round {
  chief_round(int64_t step, std::weak_ptr<chief_steps> steps)
    : step(step), steps(std::move(steps)) {
  }

  int64_t step;
  /// When it began (round_report::round_s).
  std::chrono::steady_clock::time_point started
    = std::chrono::steady_clock::now();
  std::weak_ptr<chief_steps> steps;

  /// The steps it belongs to still run (they did not pause).
  bool steps_run() const {
    return !steps.expired();
  }
};

/// A continuation of the steps `s`: runs `f(xs...)` while they run,
/// nothing after. `Ts` are the answer's types as the request hands them
/// over.
template <class... Ts, class F>
auto while_steps(const std::shared_ptr<chief_steps>& s, F f) {
  return [w = std::weak_ptr<chief_steps>{s}, f = std::move(f)](Ts... xs) {
    if (!w.expired())
      f(std::forward<Ts>(xs)...);
  };
}

/// A continuation of the round `r`: runs `f(xs...)` while it is under way
/// and its steps run, `paused(xs...)` once its steps paused (the round
/// still there), nothing once the round is over.
template <class... Ts, class F, class Paused>
auto while_round(const std::shared_ptr<chief_round>& r, F f, Paused paused) {
  return [w = std::weak_ptr<chief_round>{r}, f = std::move(f),
          paused = std::move(paused)](Ts... xs) {
    auto round = w.lock();
    if (!round)
      return;
    if (round->steps_run())
      f(std::forward<Ts>(xs)...);
    else
      paused(std::forward<Ts>(xs)...);
  };
}

template <class... Ts, class F>
auto while_round(const std::shared_ptr<chief_round>& r, F f) {
  return while_round<Ts...>(r, std::move(f), [](Ts...) {});
}

} // namespace syncfac
