#pragma once

// Sends the same request to several actors and continues once every one has
// answered, or with the first error (a timeout included). CAF 0.17 has no
// fan-out request; this keeps the actors' code linear.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <caf/error.hpp>

namespace syncfac {

template <class Result, class Self, class Handle, class... Ts>
void gather(Self* self, const std::vector<Handle>& targets,
            std::chrono::milliseconds timeout,
            std::function<void(std::vector<Result>)> done,
            std::function<void(size_t, caf::error)> failed, Ts... xs) {
  struct state {
    std::vector<Result> results;
    size_t pending = 0;
    bool over = false;
  };
  auto st = std::make_shared<state>();
  st->results.resize(targets.size());
  st->pending = targets.size();
  if (targets.empty()) {
    done({});
    return;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    self->request(targets[i], timeout, xs...)
      .then(
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

} // namespace syncfac
