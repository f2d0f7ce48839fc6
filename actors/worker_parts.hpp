#pragma once

// What the worker's files share, which no other file uses
// (actors/worker.hpp names the files): the worker's internal functions,
// one file per part of its work, and the templates its requests go
// through. The states, which say what each message means, are
// actors/worker.cpp's.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/send.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/gather.hpp"
#include "actors/worker.hpp"
#include "runtime/base/error.hpp"
#include "runtime/elapsed.hpp"

namespace syncfac::worker_parts {

using self_ptr = worker_actor::stateful_pointer<worker_state>;
using behavior = worker_actor::behavior_type;

/// How a state that took a step or run request goes on: the loop begins
/// at once (ready), or once the first pull is done (initialising).
using then_begin = void (*)(self_ptr);

/// Whether the rebind asks the worker to go on as it does already.
enum class bound_now : uint8_t {
  /// Initialising, ready or running on a binding in force.
  going_on,
  /// Stalled or stopped.
  not_going_on,
};

/// The states (actors/worker.cpp).
behavior initialising(self_ptr self);
behavior ready(self_ptr self);
behavior running(self_ptr self);
behavior stalled(self_ptr self, int64_t loss, std::string reason,
                 std::chrono::steady_clock::time_point since);
behavior stopped(self_ptr self);

/// Payload bytes of pulled values and of a push; which rows a pull asks
/// for, and the batch a step takes (actors/worker_pulls.cpp).
int64_t payload_bytes(const shard_params& sp);
int64_t payload_bytes(const std::vector<shard_params>& pulled);
int64_t payload_bytes(const gradient_push& p);
bool pulls_rows(const worker_state& st);
size_t table_shard(const worker_state& st);
std::vector<int64_t> rows_ahead(worker_state& st);
void draw_batch(worker_state& st);
std::vector<std::vector<row_request>> row_requests(worker_state& st);

/// Failing, stalling on a lost peer, giving the wait up
/// (actors/worker_faults.cpp).
void fail(self_ptr self, caf::error err);
caf::error request_failed(self_ptr self, const std::string& what,
                          caf::error err);
void stall(self_ptr self, std::string reason);
void lose_peer(self_ptr self, const std::string& what, caf::error err);
void give_up_waiting(self_ptr self, const std::string& reason,
                     std::chrono::steady_clock::time_point since);

/// The step loop (actors/worker_step.cpp).
void start_loop(self_ptr self);
void run_step(self_ptr self);
void end_step(self_ptr self, const token_grant& grant);
caf::error absorb(self_ptr self, std::vector<shard_params>& pulled);

/// K-FAC statistics and the statistics role (actors/worker_stats.cpp).
void send_stats(self_ptr self, std::vector<layer_stats> stats, int64_t step,
                int64_t examples, std::function<void()> done = nullptr);
void statistics_step(self_ptr self);

/// Initialising, resuming, rebinding (actors/worker_rebind.cpp).
void initialise(self_ptr self);
caf::error take_resume_point(self_ptr self, const resume_point& rp);
caf::error resume(self_ptr self, const resume_point& rp);
void begins_at_first_pull(self_ptr);
caf::result<worker_status> begin(self_ptr self, step_mode mode,
                                 then_begin then);
caf::result<worker_status> rebind(self_ptr self, bound_now now,
                                  const resume_point& rp, chief_actor chief,
                                  std::vector<ps_actor> shards,
                                  std::vector<covariance_actor> covariance);

/// A continuation of the binding in force now (worker_binding.hpp).
template <class... Ts, class F>
auto bound(self_ptr self, F f) {
  return while_bound<Ts...>(self->state.bound, std::move(f));
}

/// A pull of every shard (one request each), counted as sent.
template <class OnValues, class OnError, class... Ts>
void pull_all(self_ptr self, std::chrono::milliseconds timeout,
              OnValues on_values, OnError on_error, Ts... xs) {
  auto& st = self->state;
  for (size_t s = 0; s < st.cfg.shards.size(); ++s)
    st.counters.sent.add();
  gather<shard_params>(self, st.cfg.shards, timeout, std::move(on_values),
                       std::move(on_error), pull_atom::value, xs...);
}

/// A pull of every shard for `step` (held up to `wait_ms`), each with its
/// row requests (an empty list: every variable whole), counted as sent.
template <class OnValues, class OnError>
void pull_rows(self_ptr self, std::chrono::milliseconds timeout,
               OnValues on_values, OnError on_error, int64_t step,
               int64_t wait_ms,
               std::vector<std::vector<row_request>> requests) {
  auto& st = self->state;
  for (size_t s = 0; s < st.cfg.shards.size(); ++s)
    st.counters.sent.add();
  auto shards = st.cfg.shards;
  gather_each<shard_params>(
    shards.size(),
    [=](size_t s) mutable {
      return self->request(shards[s], timeout, pull_atom::value, step,
                           wait_ms, std::move(requests[s]));
    },
    std::move(on_values), std::move(on_error));
}

} // namespace syncfac::worker_parts
