#pragma once

// Sends the same request to several actors and continues once every one has
// answered, or with the first error (a timeout included). CAF 0.17 has no
// fan-out request; this keeps the actors' code linear.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/scoped_actor.hpp>

namespace syncfac {

/// A request of its own to each target: `ask(i)` sends target i's
/// request (with its timeout) and returns its response handle; `done`
/// gets the answers in the targets' order, `failed` the first error.
template <class Result, class Ask>
void gather_each(size_t targets, Ask ask,
                 std::function<void(std::vector<Result>)> done,
                 std::function<void(size_t, caf::error)> failed) {
  struct state {
    std::vector<Result> results;
    size_t pending = 0;
    bool over = false;
  };
  auto st = std::make_shared<state>();
  st->results.resize(targets);
  st->pending = targets;
  if (targets == 0) {
    done({});
    return;
  }
  for (size_t i = 0; i < targets; ++i) {
    ask(i).then(
      [=](Result& x) {
        if (st->over)
          return;
        st->results[i] = std::move(x);
        if (--st->pending == 0) {
          st->over = true;
          done(std::move(st->results));
        }
      },
      [=](caf::error& err) {
        if (st->over)
          return;
        st->over = true;
        failed(i, std::move(err));
      });
  }
}

/// The same request to every target, each bounded by `timeout`.
template <class Result, class Self, class Handle, class... Ts>
void gather(Self* self, const std::vector<Handle>& targets,
            std::chrono::milliseconds timeout,
            std::function<void(std::vector<Result>)> done,
            std::function<void(size_t, caf::error)> failed, Ts... xs) {
  gather_each<Result>(
    targets.size(),
    [&](size_t i) { return self->request(targets[i], timeout, xs...); },
    std::move(done), std::move(failed));
}

/// From a blocking context: asks every target at once and calls
/// `answered(i, result)` or `failed(i, error)` for each. The waits
/// overlap, so targets whose process went away (requests to them fail
/// only by their timeout) cost one timeout in all, not one each. Unset
/// targets are skipped.
template <class Result, class Handle, class Answered, class Failed,
          class... Ts>
void ask_each(caf::scoped_actor& self, const std::vector<Handle>& targets,
              std::chrono::milliseconds timeout, Answered answered,
              Failed failed, const Ts&... xs) {
  using pending_request
    = decltype(self->request(std::declval<const Handle&>(), timeout, xs...));
  std::vector<std::pair<size_t, pending_request>> pending;
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i])
      pending.emplace_back(i, self->request(targets[i], timeout, xs...));
  for (auto& [i, request] : pending) {
    auto index = i;
    request.receive([&](Result& x) { answered(index, x); },
                    [&](caf::error& err) { failed(index, err); });
  }
}

} // namespace syncfac
