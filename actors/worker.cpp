#include "actors/worker.hpp"

#include <algorithm>
#include <functional>

#include <caf/send.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/gather.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/base/error.hpp"

// The worker's states are behaviours (docs/design.md, "Failure model"):
//
//   initialising --first pull--> ready --step or run--> running
//   running --token, one step asked for--> ready
//   running --stop token--> stopped
//   any state but stalled --a lost chief or shard (peer_wait > 0)--> stalled
//   stalled --peer_wait ran out--> fails, naming what it lost
//   any state --rebind--> running (initialising when the first pull never
//                         came), the binding before it ended
//
// A step or run request while initialising begins once the first pull is
// done. What a binding sent is answered only while it is in force
// (actors/worker_binding.hpp), so a step it abandoned cannot go on behind
// the new one.

namespace syncfac {

std::string worker_state::who() const {
  return "worker " + std::to_string(cfg.index);
}

worker_status worker_state::status() const {
  return worker_status{cfg.index,     local_step,   steps,
                       stale_pushes,  step_s,       token_wait_s,
                       compute_s,     stats_sent,   stats_stale,
                       stats_skipped, stats_failed, stats_error,
                       peers_lost,    rebinds,      bytes_pushed,
                       bytes_pulled,  sent,         bytes_pulled_unused};
}

namespace {

using self_ptr = worker_actor::stateful_pointer<worker_state>;
using behavior = worker_actor::behavior_type;

behavior initialising(self_ptr self);
behavior ready(self_ptr self);
behavior running(self_ptr self);
behavior stalled(self_ptr self, int64_t loss, std::string reason,
                 std::chrono::steady_clock::time_point since);
behavior stopped(self_ptr self);

/// A continuation of the binding in force now (worker_binding.hpp).
template <class... Ts, class F>
auto bound(self_ptr self, F f) {
  return while_bound<Ts...>(self->state.bound, std::move(f));
}

/// Payload bytes of pulled values (whole variables and rows with their
/// ids).
int64_t payload_bytes(const shard_params& sp) {
  auto n = value_count(sp.values) * static_cast<int64_t>(sizeof(float));
  for (const auto& r : sp.rows)
    n += payload_bytes(r);
  return n;
}

int64_t payload_bytes(const std::vector<shard_params>& pulled) {
  int64_t n = 0;
  for (const auto& sp : pulled)
    n += payload_bytes(sp);
  return n;
}

/// Payload bytes of a push: dense values, sparse indices and rows.
int64_t payload_bytes(const gradient_push& p) {
  int64_t n = 0;
  for (const auto& g : p.dense)
    n += g.value.size() * static_cast<int64_t>(sizeof(float));
  for (const auto& g : p.sparse)
    n += static_cast<int64_t>(g.indices.size() * sizeof(int64_t))
         + g.rows.size() * static_cast<int64_t>(sizeof(float));
  return n;
}

/// A pull of every shard (one request each), counted as sent.
template <class OnValues, class OnError, class... Ts>
void pull_all(self_ptr self, std::chrono::milliseconds timeout,
              OnValues on_values, OnError on_error, Ts... xs) {
  auto& st = self->state;
  for (size_t s = 0; s < st.cfg.shards.size(); ++s)
    st.sent.add();
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
    st.sent.add();
  auto shards = st.cfg.shards;
  gather_each<shard_params>(
    shards.size(),
    [=](size_t s) mutable {
      return self->request(shards[s], timeout, pull_atom::value, step,
                           wait_ms, std::move(requests[s]));
    },
    std::move(on_values), std::move(on_error));
}

// -- row pulls -----------------------------------------------------------------

/// Whether this worker pulls its embedding table by rows (once it knows
/// which shard holds the table).
bool pulls_rows(const worker_state& st) {
  return st.row_table && st.initialised()
         && st.slot_of.count(*st.row_table) > 0;
}

/// The shard that holds the table (pulls_rows() only).
size_t table_shard(const worker_state& st) {
  return st.shard_of[st.slot_of.at(*st.row_table)];
}

/// Draws the batch the next step takes (compute() takes it from here
/// instead of drawing again) and returns the rows it looks up of the
/// table.
std::vector<int64_t> rows_ahead(worker_state& st) {
  auto at = st.batches->state();
  if (!st.ahead || st.ahead_from != at) {
    st.ahead = *st.batches;
    st.ahead->next(st.ahead_batch);
    st.ahead_from = at;
  }
  return rows_looked_up(st.ahead_batch.images);
}

/// The batch of this step: the one drawn ahead when it was drawn at the
/// batcher's position (a resume elsewhere draws anew).
void draw_batch(worker_state& st) {
  if (st.ahead && st.ahead_from == st.batches->state()) {
    std::swap(st.current, st.ahead_batch);
    *st.batches = std::move(*st.ahead);
  } else {
    st.batches->next(st.current);
  }
  st.ahead.reset();
}

/// Per shard, the rows its pull asks for: the next batch's rows of the
/// table to the shard holding it, nothing (every variable whole) to the
/// others. All empty when the worker pulls whole.
std::vector<std::vector<row_request>> row_requests(worker_state& st) {
  std::vector<std::vector<row_request>> result(st.cfg.shards.size());
  if (!pulls_rows(st))
    return result;
  result[table_shard(st)].push_back(row_request{*st.row_table,
                                                rows_ahead(st)});
  return result;
}

void fail(self_ptr self, caf::error err) {
  auto& st = self->state;
  if (st.promise.pending())
    st.promise.deliver(err);
  self->quit(std::move(err));
}

/// Wraps a failed request into an error naming the worker and the request.
caf::error request_failed(self_ptr self, const std::string& what,
                          caf::error err) {
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout, self->state.who() + ": no answer to "
                                     + what + " in time");
  return make_error(ec::peer_down, self->state.who() + ": " + what
                                     + " failed: " + render(err));
}

/// The chief or a shard did not answer (a broken connection, a dead or
/// frozen process): in a cluster the worker abandons its step (the binding
/// ends) and waits, bounded by peer_wait, for a chief to rebind it;
/// otherwise it fails. An error the peer answered with (a refused push, a
/// failed run) is no loss. Without a binding in force the worker is
/// stalled already: the first loss is the one it waits on.
void stall(self_ptr self, std::string reason) {
  auto& st = self->state;
  if (!st.bound)
    return;
  st.bound.reset();
  auto loss = ++st.peers_lost;
  // The deadline names its loss: one of an earlier stall, since rebound,
  // finds a later stalled behaviour waiting on another.
  self->delayed_send(self, st.cfg.peer_wait, stall_atom::value, loss);
  // The actor system's clock (a test's clock on the test scheduler).
  self->become(stalled(self, loss, std::move(reason), self->clock().now()));
}

void lose_peer(self_ptr self, const std::string& what, caf::error err) {
  if (self->state.cfg.peer_wait.count() == 0
      || err.category() != caf::atom("system"))
    return fail(self, request_failed(self, what, std::move(err)));
  stall(self, render(request_failed(self, what, std::move(err))));
}

void run_step(self_ptr self);
void statistics_step(self_ptr self);

/// The step loop of the caller's request begins (the first pull is done).
void start_loop(self_ptr self) {
  self->become(running(self));
  if (self->state.cfg.role == worker_role::statistics)
    statistics_step(self);
  else
    run_step(self);
}

// -- K-FAC statistics ---------------------------------------------------------

/// Sends each covariance actor the statistics of its layers, tagged with
/// the step they were computed at. Does not wait: a covariance actor that
/// still works on this worker's previous update skips this one (counted),
/// so a slow covariance actor never slows the gradient path. `done` runs
/// once every send is answered (the statistics role paces itself by it).
void send_stats(self_ptr self, std::vector<layer_stats> stats, int64_t step,
                int64_t examples, std::function<void()> done = nullptr) {
  auto& st = self->state;
  auto n = st.cfg.covariance.size();
  std::vector<stats_update> updates(n);
  for (auto& u : updates) {
    u.worker = st.cfg.index;
    u.step = step;
    u.examples = examples;
  }
  for (auto& ls : stats) {
    auto i = st.cfg.covariance_of.find(ls.layer);
    if (i == st.cfg.covariance_of.end())
      return fail(self, make_error(ec::unknown_name,
                                   st.who() + ": statistics for layer '"
                                     + ls.layer
                                     + "', which no covariance actor owns"));
    updates[static_cast<size_t>(i->second)].layers.push_back(std::move(ls));
  }
  auto remaining = std::make_shared<size_t>(0);
  auto finish = [remaining, done] {
    if (--*remaining == 0 && done)
      done();
  };
  auto& in_flight = st.bound->stats_in_flight;
  for (size_t c = 0; c < n; ++c) {
    if (updates[c].layers.empty())
      continue;
    if (in_flight[c]) {
      ++st.stats_skipped;
      continue;
    }
    in_flight[c] = true;
    ++*remaining;
    self->request(st.cfg.covariance[c], st.cfg.request_timeout,
                  stats_atom::value, std::move(updates[c]))
      .then(bound<stats_ack&>(self,
                              [=](stats_ack& ack) {
                                auto& st = self->state;
                                st.bound->stats_in_flight[c] = false;
                                ++st.stats_sent;
                                if (!ack.accepted)
                                  ++st.stats_stale;
                                finish();
                              }),
            bound<caf::error&>(self, [=](caf::error& err) {
              // A lost statistics update costs K-FAC one sample of the
              // factors, not the run: count it and go on.
              auto& st = self->state;
              st.bound->stats_in_flight[c] = false;
              ++st.stats_failed;
              st.stats_error = render(request_failed(
                self, "statistics to covariance:" + std::to_string(c),
                std::move(err)));
              finish();
            }));
  }
  // Nothing was sent (every update empty or skipped): nothing to wait for.
  if (*remaining == 0 && done)
    done();
}

// -- the step loop ------------------------------------------------------------

void end_step(self_ptr self, const token_grant& grant) {
  auto& st = self->state;
  // A token never carries a step below the one it follows: the chief's
  // global_step only grows (and a restarted chief restores it).
  if (!grant.stop && grant.global_step < st.local_step)
    return fail(self, make_error(ec::bad_message,
                                 st.who() + ": token for step "
                                   + std::to_string(grant.global_step)
                                   + " is older than local_step "
                                   + std::to_string(st.local_step)));
  ++st.steps;
  st.step_s += seconds_since(st.step_started);
  if (grant.stop) {
    self->become(stopped(self));
    if (st.promise.pending())
      st.promise.deliver(st.status());
    return;
  }
  st.local_step = grant.global_step;
  if (st.mode == step_mode::until_stop)
    return run_step(self);
  self->become(ready(self));
  if (st.promise.pending())
    st.promise.deliver(st.status());
}

caf::error absorb(self_ptr self, std::vector<shard_params>& pulled);

/// The token and a pull travel together: the pull asks for the step
/// after the one the worker pushed at, and the shards answer it once that
/// step is applied (at once when they are past it), so the values come
/// with the token instead of a round trip after it, and the values of the
/// step before the apply are never sent to be thrown away
/// (docs/protocol.md, "The pull with the token").
struct step_end {
  std::optional<token_grant> grant;
  std::optional<std::vector<shard_params>> pulled;
  /// The worker told the shards it does not need the values.
  bool cancelled = false;
  bool done = false;
};

/// Whether a shard's answer holds its values at `step` or later.
bool current(const shard_params& sp, int64_t step) {
  return sp.has_values && sp.global_step >= step;
}

/// The shards hold the pull for a step the worker no longer needs.
void cancel_pull(self_ptr self) {
  auto& st = self->state;
  for (const auto& shard : st.cfg.shards) {
    st.sent.add();
    self->send(shard, pull_atom::value, cancel_atom::value);
  }
}

/// Takes what the pull brought for the token's step; false when the step
/// must pull again.
caf::expected<bool> take_pulled(self_ptr self, std::vector<shard_params>& all,
                                int64_t step) {
  auto& st = self->state;
  // A token for the step the worker's values are at already (an initial
  // token, or one of several batches per update when N < R): any shard's
  // newer values are as good, the others' answers came without values.
  bool holds_step = step == st.local_step;
  std::vector<shard_params> use;
  bool complete = true;
  // A row pull whose rows did not come (its wait ran out; a cancelled one
  // gets its rows): the worker's copies of the next batch's rows may be
  // older than its other values, so it pulls again.
  bool rows_missing = false;
  for (auto& sp : all) {
    if (current(sp, step)) {
      use.push_back(std::move(sp));
    } else {
      complete = false;
      st.bytes_pulled_unused += payload_bytes(sp);
      if (pulls_rows(st)
          && static_cast<size_t>(&sp - all.data()) == table_shard(st))
        rows_missing = true;
    }
  }
  if (!complete && (!holds_step || rows_missing)) {
    st.bytes_pulled_unused += payload_bytes(use);
    return false;
  }
  if (auto err = absorb(self, use))
    return err;
  return true;
}

void finish_step_end(self_ptr self, step_end& end) {
  if (end.done || !end.grant)
    return;
  auto& st = self->state;
  const auto grant = *end.grant;
  if (!grant.stop && !end.pulled) {
    // A token for a later step: its values come once the shards are there.
    if (grant.global_step > st.local_step)
      return;
    // A token for the step the worker is at: the apply the pull waits for
    // may need this very worker's next push, so the shards are told to
    // answer now, without values unless they have newer ones on the way.
    if (!end.cancelled) {
      end.cancelled = true;
      cancel_pull(self);
    }
    return;
  }
  if (grant.stop) {
    if (!end.pulled && !end.cancelled)
      cancel_pull(self);
    st.params_step.reset();
  } else {
    auto taken = take_pulled(self, *end.pulled, grant.global_step);
    if (!taken)
      return fail(self, std::move(taken.error()));
    if (*taken)
      st.params_step = grant.global_step;
    else
      st.params_step.reset();
  }
  end.done = true; // whatever arrives later is ignored
  end_step(self, grant);
}

void take_token(self_ptr self, const step_result& res, int32_t stale) {
  auto& st = self->state;
  worker_report rep{st.cfg.index, st.local_step, res.loss,
                    res.correct,    res.count,     stale,
                    st.batches->state(), st.incarnation};
  auto end = std::make_shared<step_end>();
  auto asked = std::chrono::steady_clock::now();
  st.sent.add();
  self->request(st.cfg.chief, st.cfg.token_timeout, token_atom::value, rep)
    .then(bound<token_grant&>(self,
                              [=](token_grant& grant) {
                                self->state.token_wait_s
                                  += seconds_since(asked);
                                end->grant = grant;
                                finish_step_end(self, *end);
                              }),
          bound<caf::error&>(self, [=](caf::error& err) {
            if (end->done)
              return;
            end->done = true;
            lose_peer(self, "token request", std::move(err));
          }));
  // The shards hold the pull as long as the chief may hold the token; the
  // request's own timeout leaves them time to answer without values.
  auto wait = st.cfg.token_timeout;
  auto unused = [=](std::vector<shard_params> pulled) {
    self->state.bytes_pulled_unused += payload_bytes(pulled);
  };
  auto on_values = while_bound<std::vector<shard_params>>(
    st.bound,
    [=](std::vector<shard_params> pulled) {
      if (end->done)
        return unused(std::move(pulled));
      end->pulled = std::move(pulled);
      finish_step_end(self, *end);
    },
    // Values that came for an abandoned step are still bytes received.
    unused);
  auto on_error = bound<size_t, caf::error>(
    self, [=](size_t s, caf::error err) {
      if (end->done)
        return;
      end->done = true;
      lose_peer(self, "pull from ps:" + std::to_string(s), std::move(err));
    });
  auto wait_ms = static_cast<int64_t>(wait.count());
  // The next batch is known now: its rows go with the pull.
  if (pulls_rows(st))
    return pull_rows(self, wait + st.cfg.request_timeout,
                     std::move(on_values), std::move(on_error),
                     st.local_step + 1, wait_ms, row_requests(st));
  pull_all(self, wait + st.cfg.request_timeout, std::move(on_values),
           std::move(on_error), st.local_step + 1, wait_ms);
}

/// Splits the gradients by shard and pushes them, tagged with local_step.
void push(self_ptr self, step_result res) {
  auto& st = self->state;
  std::vector<gradient_push> pushes(st.cfg.shards.size());
  for (auto& p : pushes) {
    p.worker = st.cfg.index;
    p.local_step = st.local_step;
  }
  for (auto& g : res.gradients) {
    auto i = st.slot_of.find(g.name);
    if (i == st.slot_of.end())
      return fail(self, make_error(ec::unknown_name,
                                   st.who() + ": the device returned a "
                                     "gradient for unknown variable '"
                                     + g.name + "'"));
    pushes[st.shard_of[i->second]].dense.push_back(std::move(g));
  }
  for (auto& g : res.sparse_gradients) {
    auto i = st.slot_of.find(g.variable);
    if (i == st.slot_of.end())
      return fail(self, make_error(ec::unknown_name,
                                   st.who() + ": the device returned a "
                                     "gradient for unknown variable '"
                                     + g.variable + "'"));
    pushes[st.shard_of[i->second]].sparse.push_back(std::move(g));
  }
  res.gradients.clear();
  res.sparse_gradients.clear();
  for (const auto& p : pushes)
    st.bytes_pushed += payload_bytes(p);
  // Across the network a large push goes as parts, sent back to back; a
  // shard's push is stale when its last part's answer says so.
  struct progress {
    size_t remaining = 0;
    std::vector<bool> stale;
    bool failed = false;
  };
  auto prog = std::make_shared<progress>();
  prog->stale.assign(pushes.size(), false);
  std::vector<std::vector<gradient_push>> parts(pushes.size());
  for (size_t s = 0; s < pushes.size(); ++s) {
    if (pushes[s].dense.empty() && pushes[s].sparse.empty())
      continue;
    bool remote = st.cfg.shards[s].node() != self->home_system().node();
    parts[s] = split_push(std::move(pushes[s]),
                          remote ? st.cfg.push_part_bytes : 0);
    prog->remaining += parts[s].size();
  }
  if (prog->remaining == 0)
    return take_token(self, res, 0);
  for (size_t s = 0; s < parts.size(); ++s) {
    for (auto& part : parts[s]) {
      st.sent.add(payload_bytes(part));
      self->request(st.cfg.shards[s], st.cfg.request_timeout, push_atom::value,
                    std::move(part))
        .then(
          bound<push_ack&>(self,
                           [=](push_ack& ack) {
                             if (prog->failed)
                               return;
                             if (!ack.accepted)
                               prog->stale[s] = true;
                             if (--prog->remaining > 0)
                               return;
                             auto stale = static_cast<int32_t>(std::count(
                               prog->stale.begin(), prog->stale.end(), true));
                             if (stale > 0)
                               ++self->state.stale_pushes;
                             take_token(self, res, stale);
                           }),
          bound<caf::error&>(self, [=](caf::error& err) {
            if (prog->failed)
              return;
            prog->failed = true;
            lose_peer(self, "gradient push to ps:" + std::to_string(s),
                      std::move(err));
          }));
    }
  }
}

void compute(self_ptr self) {
  auto& st = self->state;
  draw_batch(st);
  auto on_error = bound<caf::error&>(self, [=](caf::error& err) {
    fail(self, request_failed(self, "gradient computation", std::move(err)));
  });
  auto on_result = bound<step_result&>(self, [=](step_result& res) {
    self->state.compute_s += res.compute_s;
    push(self, std::move(res));
  });
  if (!st.cfg.stats && pulls_rows(st) && st.device_tables_current) {
    // The device's tables differ from the worker's only by the rows pulled
    // since its last step: those go, and every other variable, instead of
    // a copy of the tables (33.5 MB for langid's largest).
    parameter_set others;
    for (const auto& p : st.params)
      if (p.name != *st.row_table)
        others.push_back(p);
    auto rows = std::move(st.rows_for_device);
    st.rows_for_device.clear();
    self->request(st.cfg.device, st.cfg.request_timeout, grads_atom::value,
                  std::move(others), std::move(rows), st.current)
      .then(on_result, on_error);
    return;
  }
  // Every variable whole: the device's tables are the worker's after it.
  st.device_tables_current = true;
  st.rows_for_device.clear();
  if (!st.cfg.stats) {
    self->request(st.cfg.device, st.cfg.request_timeout, grads_atom::value,
                  st.params, st.current)
      .then(on_result, on_error);
    return;
  }
  self->request(st.cfg.device, st.cfg.request_timeout, grads_atom::value,
                st.params, st.current, *st.cfg.stats)
    .then(
      bound<step_result&>(
        self,
        [=](step_result& res) {
          auto& st = self->state;
          st.compute_s += res.compute_s;
          auto stats = std::move(res.stats);
          res.stats.clear();
          if (st.cfg.push_after_stats) {
            auto pending = std::make_shared<step_result>(std::move(res));
            // Called by the last statistics answer, a continuation of this
            // binding itself.
            send_stats(self, std::move(stats), st.local_step,
                       pending->stats_examples,
                       [=] { push(self, std::move(*pending)); });
            return;
          }
          send_stats(self, std::move(stats), st.local_step,
                     res.stats_examples);
          push(self, std::move(res));
        }),
      on_error);
}

/// Copies pulled values into the model's parameter order, and pulled rows
/// into their tables: those are then current for the next batch only
/// (rows_for).
caf::error absorb(self_ptr self, std::vector<shard_params>& pulled) {
  auto& st = self->state;
  bool rows = false;
  bool table_whole = false;
  for (auto& sp : pulled) {
    for (auto& v : sp.values) {
      auto i = st.slot_of.find(v.name);
      if (i == st.slot_of.end())
        return make_error(ec::unknown_name,
                          st.who() + ": ps:" + std::to_string(sp.shard)
                            + " holds '" + v.name
                            + "', which the model does not have");
      st.bytes_pulled += v.value.size()
                         * static_cast<int64_t>(sizeof(float));
      table_whole = table_whole || (st.row_table && v.name == *st.row_table);
      st.params[i->second].value = std::move(v.value);
    }
    for (auto& r : sp.rows) {
      auto i = st.slot_of.find(r.variable);
      if (i == st.slot_of.end())
        return make_error(ec::unknown_name,
                          st.who() + ": ps:" + std::to_string(sp.shard)
                            + " sent rows of '" + r.variable
                            + "', which the model does not have");
      if (auto err = scatter_rows(r, st.params[i->second].value))
        return with_context(err, st.who() + ": rows from ps:"
                                   + std::to_string(sp.shard));
      st.bytes_pulled += payload_bytes(r);
      rows = true;
      st.rows_for_device.push_back(std::move(r));
    }
  }
  if (table_whole) {
    st.device_tables_current = false;
    st.rows_for_device.clear();
  }
  if (rows)
    st.rows_for = st.batches->state();
  else if (table_whole)
    st.rows_for.reset();
  return caf::none;
}

void run_step(self_ptr self) {
  auto& st = self->state;
  st.step_started = std::chrono::steady_clock::now();
  st.step_data = st.batches->state();
  if (st.params_current())
    return compute(self);
  auto on_values
    = bound<std::vector<shard_params>>(self,
                                       [=](std::vector<shard_params> pulled) {
                                         if (auto err = absorb(self, pulled))
                                           return fail(self, std::move(err));
                                         compute(self);
                                       });
  auto on_error = bound<size_t, caf::error>(self, [=](size_t s,
                                                      caf::error err) {
    lose_peer(self, "pull from ps:" + std::to_string(s), std::move(err));
  });
  if (!pulls_rows(st))
    return pull_all(self, st.cfg.request_timeout, std::move(on_values),
                    std::move(on_error));
  // Step 0 is behind every shard: answered at once, with this batch's
  // rows.
  pull_rows(self, st.cfg.request_timeout, std::move(on_values),
            std::move(on_error), 0, 0, row_requests(st));
}

// -- the statistics role ------------------------------------------------------

void statistics_update(self_ptr self);

/// The statistics role's loop: one update per global step, polling the
/// shards' step every poll_interval while the gradient workers move on.
void statistics_after(self_ptr self, std::chrono::milliseconds delay) {
  if (delay.count() == 0)
    return statistics_step(self);
  self->state.bound->wake_pending = true;
  caf::delayed_anon_send(caf::actor_cast<worker_actor>(self), delay,
                         step_atom::value);
}

/// Waits for a global step it has no statistics of yet: asks one shard's
/// status (a few bytes) rather than pulling every variable each poll.
void statistics_step(self_ptr self) {
  auto& st = self->state;
  self->request(st.cfg.shards.front(), st.cfg.request_timeout,
                status_atom::value)
    .then(bound<shard_status&>(self,
                               [=](shard_status& ss) {
                                 auto& st = self->state;
                                 if (ss.global_step <= st.stats_step)
                                   return statistics_after(
                                     self, st.cfg.poll_interval);
                                 statistics_update(self);
                               }),
          bound<caf::error&>(self, [=](caf::error& err) {
            lose_peer(self, "status of ps:0", std::move(err));
          }));
}

/// Pulls the variables and computes and sends statistics at their step.
void statistics_update(self_ptr self) {
  auto on_pulled = [=](std::vector<shard_params> pulled) {
    auto& st = self->state;
    auto step = pulled.empty() ? 0 : pulled.front().global_step;
    if (auto err = absorb(self, pulled))
      return fail(self, std::move(err));
    st.local_step = step;
    st.batches->next(st.current);
    auto t0 = std::chrono::steady_clock::now();
    self->request(st.cfg.device, st.cfg.request_timeout, stats_atom::value,
                  st.params, st.current, *st.cfg.stats)
      .then(bound<stats_update&>(
              self,
              [=](stats_update& u) {
                auto& st = self->state;
                st.compute_s += seconds_since(t0);
                st.stats_step = step;
                ++st.steps;
                send_stats(self, std::move(u.layers), step, u.examples, [=] {
                  statistics_after(self, std::chrono::milliseconds{0});
                });
              }),
            bound<caf::error&>(self, [=](caf::error& err) {
              fail(self, request_failed(self, "statistics computation",
                                        std::move(err)));
            }));
  };
  pull_all(self, self->state.cfg.request_timeout,
           bound<std::vector<shard_params>>(self, on_pulled),
           bound<size_t, caf::error>(self, [=](size_t s, caf::error err) {
             lose_peer(self, "pull from ps:" + std::to_string(s),
                       std::move(err));
           }));
}

// -- initialising, resuming, rebinding ----------------------------------------

/// Learns the model's variables and which shard holds each, and starts at
/// the shards' global step (TF's local_step_init_op); a step or run asked
/// for meanwhile begins once that is done.
void initialise(self_ptr self) {
  auto& st = self->state;
  self->become(initialising(self));
  auto on_pulled = [=](std::vector<shard_params> pulled) {
    auto& st = self->state;
    // absorb() refuses variables the model lacks; names stay readable
    // after it moved the values out.
    if (auto err = absorb(self, pulled))
      return fail(self, std::move(err));
    std::vector<size_t> shard_of(st.params.size(), st.cfg.shards.size());
    for (size_t s = 0; s < pulled.size(); ++s)
      for (auto& v : pulled[s].values)
        shard_of[st.slot_of[v.name]] = s;
    for (size_t i = 0; i < st.params.size(); ++i)
      if (shard_of[i] == st.cfg.shards.size())
        return fail(self, make_error(ec::unknown_name,
                                     st.who() + ": no PS shard holds '"
                                       + st.params[i].name + "'"));
    st.shard_of = std::move(shard_of);
    // A resume point that came first (a restored run) wins over a pull
    // answered before the restore reached the shards.
    auto pulled_step = pulled.empty() ? 0 : pulled.front().global_step;
    st.params_step = pulled_step;
    st.local_step = std::max(st.local_step, pulled_step);
    if (st.promise.pending())
      start_loop(self);
    else
      self->become(ready(self));
  };
  auto on_model = [=](model_info& info) {
    auto& st = self->state;
    st.params = std::move(info.initial);
    st.slot_of.clear();
    for (size_t i = 0; i < st.params.size(); ++i)
      st.slot_of[st.params[i].name] = i;
    pull_all(self, st.cfg.request_timeout,
             bound<std::vector<shard_params>>(self, on_pulled),
             bound<size_t, caf::error>(self, [=](size_t s, caf::error err) {
               lose_peer(self, "first pull from ps:" + std::to_string(s),
                         std::move(err));
             }));
  };
  self->request(st.cfg.device, st.cfg.request_timeout, load_model_atom::value,
                st.cfg.model, st.cfg.seed)
    .then(bound<model_info&>(self, on_model),
          bound<caf::error&>(self, [=](caf::error& err) {
            fail(self, request_failed(self, "model load", std::move(err)));
          }));
}

/// Takes a resume point's data position (when it has one) and run
/// incarnation; refuses a negative step.
caf::error take_resume_point(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (rp.global_step < 0)
    return make_error(ec::invalid_argument,
                      st.who() + ": resume at negative step "
                        + std::to_string(rp.global_step));
  if (rp.has_data_order)
    if (auto err = st.batches->restore(rp.data_order))
      return with_context(err, st.who() + ": data order to resume from");
  st.incarnation = rp.incarnation;
  return caf::none;
}

/// Starts from a restored checkpoint: its step (values pulled at an
/// earlier one are out of date, so the first step pulls again) and its
/// data position.
caf::error resume(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (auto err = take_resume_point(self, rp))
    return err;
  st.local_step = std::max(st.local_step, rp.global_step);
  return caf::none;
}

/// How a state that took a step or run request goes on: the loop begins
/// at once (ready), or once the first pull is done (initialising).
using then_begin = void (*)(self_ptr);

void begins_at_first_pull(self_ptr) {
  // initialise()'s end starts the loop of the caller it finds.
}

/// Takes a step or run request: its caller and how far it asked to go.
caf::result<worker_status> begin(self_ptr self, step_mode mode,
                                 then_begin then) {
  auto& st = self->state;
  if (st.promise.pending())
    return make_error(ec::invalid_argument,
                      st.who() + ": already running a step");
  // The statistics role runs until stopped (the driver's exit), not step
  // by step.
  st.mode = st.cfg.role == worker_role::statistics ? step_mode::until_stop
                                                   : mode;
  st.promise = self->make_response_promise<worker_status>();
  then(self);
  return st.promise;
}

/// Whether the rebind asks the worker to go on as it does already.
enum class bound_now : uint8_t {
  /// Initialising, ready or running on a binding in force.
  going_on,
  /// Stalled or stopped.
  not_going_on,
};

/// Goes on with another chief and shards after a fault, from `rp`: the
/// step abandoned, local_step set to the resume point's (lower after a
/// rollback to a checkpoint) and, when it has one, the data position.
caf::result<worker_status> rebind(self_ptr self, bound_now now,
                                  const resume_point& rp, chief_actor chief,
                                  std::vector<ps_actor> shards,
                                  std::vector<covariance_actor> covariance) {
  auto& st = self->state;
  if (!chief || shards.size() != st.cfg.shards.size()
      || std::any_of(shards.begin(), shards.end(),
                     [](const ps_actor& s) { return !s; }))
    return make_error(ec::invalid_argument,
                      st.who() + ": rebinding needs a chief and "
                        + std::to_string(st.cfg.shards.size())
                        + " PS shard(s), got "
                        + std::to_string(shards.size()));
  if (!covariance.empty() && !st.cfg.covariance.empty()
      && covariance.size() != st.cfg.covariance.size())
    return make_error(ec::invalid_argument,
                      st.who() + ": rebinding with "
                        + std::to_string(covariance.size())
                        + " covariance actors, the worker sends to "
                        + std::to_string(st.cfg.covariance.size()));
  // Bound to this incarnation of the run already and going on (the
  // chief's driver rebound it; its node's rejoin comes second): giving the
  // step up now would waste a token it may be waiting for, and without
  // backups the steps would wait for it forever.
  if (now == bound_now::going_on && st.rebinds > 0
      && rp.incarnation == st.incarnation && st.cfg.chief == chief)
    return st.status();
  // The abandoned step's update was not applied when the run goes on at
  // that very step with the shards' state kept (a restarted chief, a lost
  // K-FAC role): its batch is taken again, so that no batch is skipped.
  // Its gradient may be in the shards' sums already; the same batch at
  // the same parameters gives the same gradient, so with one worker the
  // average is unchanged and the run stays bit for bit an undisturbed
  // one (docs/design.md §6). A rollback brings a data position instead.
  if (!rp.has_data_order && rp.global_step == st.local_step && st.step_data
      && st.cfg.role == worker_role::gradients)
    if (auto err = st.batches->restore(*st.step_data))
      return with_context(err, st.who() + ": data position of the "
                                          "abandoned step");
  if (auto err = take_resume_point(self, rp))
    return err;
  // A new binding: whatever the old one has in flight is answered to
  // nothing (worker_binding.hpp).
  st.bound = std::make_shared<worker_binding>(st.cfg.covariance.size());
  // The device's tables are sent whole with the next step: simpler than
  // knowing which rows the abandoned binding's requests carried.
  st.device_tables_current = false;
  st.rows_for_device.clear();
  if (st.cfg.role == worker_role::gradients && st.cfg.chief != chief) {
    self->unlink_from(st.cfg.chief);
    self->link_to(chief);
  }
  st.cfg.chief = std::move(chief);
  st.cfg.shards = std::move(shards);
  if (!covariance.empty() && !st.cfg.covariance.empty())
    st.cfg.covariance = std::move(covariance);
  ++st.rebinds;
  // Whoever started the abandoned run (a chief that may be gone) hears
  // how far it went; the new run's caller gets the next answer.
  if (st.promise.pending())
    st.promise.deliver(st.status());
  st.local_step = rp.global_step;
  st.stats_step = rp.global_step - 1;
  st.params_step.reset();
  // The first pull never came (the loss was a shard's, before it): the
  // new binding initialises again.
  if (!st.initialised()) {
    initialise(self);
    return begin(self, step_mode::until_stop, begins_at_first_pull);
  }
  return begin(self, step_mode::until_stop, start_loop);
}

/// The rebinding did not come within peer_wait of the loss.
void give_up_waiting(self_ptr self, const std::string& reason,
                     std::chrono::steady_clock::time_point since) {
  auto waited = std::chrono::duration_cast<std::chrono::seconds>(
    self->clock().now() - since);
  fail(self, make_error(ec::timeout,
                        self->state.who() + ": no chief rebound it within "
                          + std::to_string(waited.count())
                          + " s (--max_wait_ms) after: " + reason));
}

// -- the states ---------------------------------------------------------------

// Handlers every state has.

/// A rebind (run_atom, resume point, chief, shards, covariance actors).
auto rebinds(self_ptr self, bound_now now) {
  return [=](run_atom, const resume_point& rp, chief_actor& chief,
             std::vector<ps_actor>& shards,
             std::vector<covariance_actor>& covariance) {
    return rebind(self, now, rp, std::move(chief), std::move(shards),
                  std::move(covariance));
  };
}

/// The deadline of a stall since rebound (only the stalled state waits on
/// one).
auto ignores_deadlines() {
  return [](stall_atom, int64_t) {};
}

auto reports(self_ptr self) {
  return [=](status_atom) { return self->state.status(); };
}

/// No step in progress: a step or run request begins, then `then`.
behavior waiting_to_step(self_ptr self, then_begin then) {
  return {
    [=](step_atom) { return begin(self, step_mode::one_step, then); },
    [=](run_atom) { return begin(self, step_mode::until_stop, then); },
    [=](run_atom, const resume_point& rp) -> caf::result<worker_status> {
      if (self->state.promise.pending())
        return make_error(ec::invalid_argument,
                          self->state.who() + ": already running a step");
      if (auto err = resume(self, rp))
        return err;
      return begin(self, step_mode::until_stop, then);
    },
    rebinds(self, bound_now::going_on),
    ignores_deadlines(),
    reports(self),
  };
}

/// Loading the model and pulling the variables for the first time (at
/// spawn, or after a rebind when the first pull never came): a request
/// is kept for the first pull's end to begin.
behavior initialising(self_ptr self) {
  return waiting_to_step(self, begins_at_first_pull);
}

/// Initialised, no step in progress (before the first request, between
/// the steps of step requests): a request begins at once.
behavior ready(self_ptr self) {
  return waiting_to_step(self, start_loop);
}

/// A step loop in progress on the binding in force.
behavior running(self_ptr self) {
  auto busy = [=]() -> caf::error {
    return make_error(ec::invalid_argument,
                      self->state.who() + ": already running a step");
  };
  return {
    [=](step_atom) -> caf::result<worker_status> {
      auto& st = self->state;
      if (st.cfg.role != worker_role::statistics)
        return busy();
      // The statistics role's own wake-up (delayed_anon_send: no one
      // reads the answer); one of an earlier binding is not this loop's.
      if (st.bound->wake_pending) {
        st.bound->wake_pending = false;
        statistics_step(self);
      }
      return st.status();
    },
    [=](run_atom) -> caf::result<worker_status> { return busy(); },
    [=](run_atom, const resume_point&) -> caf::result<worker_status> {
      return busy();
    },
    rebinds(self, bound_now::going_on),
    ignores_deadlines(),
    reports(self),
  };
}

/// Lost a peer (loss number `loss`, `reason`) at `since`: no binding is in
/// force; waits for a rebind until the deadline of this loss.
behavior stalled(self_ptr self, int64_t loss, std::string reason,
                 std::chrono::steady_clock::time_point since) {
  auto waiting = [=]() -> caf::error {
    return make_error(ec::peer_lost,
                      self->state.who() + ": waiting to be rebound after: "
                        + reason);
  };
  return {
    [=](step_atom) -> caf::result<worker_status> { return waiting(); },
    [=](run_atom) -> caf::result<worker_status> { return waiting(); },
    [=](run_atom, const resume_point&) -> caf::result<worker_status> {
      return waiting();
    },
    rebinds(self, bound_now::not_going_on),
    [=](stall_atom, int64_t deadline_of) {
      if (deadline_of == loss)
        give_up_waiting(self, reason, since);
    },
    reports(self),
  };
}

/// A stop token came: requests are answered with the counters; a rebind
/// (a run that goes on after all) starts the loop again.
behavior stopped(self_ptr self) {
  return {
    [=](step_atom) { return self->state.status(); },
    [=](run_atom) { return self->state.status(); },
    [=](run_atom, const resume_point& rp) -> caf::result<worker_status> {
      if (auto err = resume(self, rp))
        return err;
      return self->state.status();
    },
    rebinds(self, bound_now::not_going_on),
    ignores_deadlines(),
    reports(self),
  };
}

} // namespace

caf::error worker_config::validate() const {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config,
                      "worker " + std::to_string(index) + ": " + what);
  };
  if (num_workers < 1 || index < 0 || index >= num_workers)
    return bad("index must be in [0, " + std::to_string(num_workers) + ")");
  if (batch_size < 1)
    return bad("batch_size must be at least 1");
  if (!data)
    return bad("no training data");
  if (!device)
    return bad("no device actor");
  if (!chief)
    return bad("no chief");
  if (shards.empty())
    return bad("no PS shards");
  if (request_timeout.count() <= 0 || token_timeout.count() <= 0)
    return bad("timeouts must be positive");
  if (peer_wait.count() < 0)
    return bad("peer_wait must not be negative");
  if (role == worker_role::statistics && (!stats || covariance.empty()))
    return bad("the statistics role needs a stats request and covariance "
               "actors");
  if (stats && covariance.empty())
    return bad("statistics requested but no covariance actor to send them to");
  for (const auto& [layer, c] : covariance_of)
    if (c < 0 || static_cast<size_t>(c) >= covariance.size())
      return bad("layer '" + layer + "' is assigned to covariance actor "
                 + std::to_string(c) + " of "
                 + std::to_string(covariance.size()));
  if (poll_interval.count() <= 0)
    return bad("poll_interval must be positive");
  return model.validate();
}

worker_actor::behavior_type worker(self_ptr self, worker_config cfg) {
  end_program_on_exception(self, "worker");
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.batches = batcher{*st.cfg.data, st.cfg.batch_size, st.cfg.seed,
                       st.cfg.index, st.cfg.num_workers};
  st.bound = std::make_shared<worker_binding>(st.cfg.covariance.size());
  // A gradient worker of a model with an embedding_bag pulls the rows of
  // the table its next batch looks up; the statistics role pulls whole.
  if (!st.cfg.whole_pulls && st.cfg.role == worker_role::gradients)
    st.row_table = looked_up_table(st.cfg.model.description);
  // The statistics go to covariance actors, which take a factor with fewer
  // rows than columns as its rows: far less to compute, send, check and
  // fold than the matrix (the ConvNet's dense A: 16 x 785 against 785²).
  if (st.cfg.stats)
    st.cfg.stats->rows = true;
  // Linked: a worker that fails takes the run down with its reason instead
  // of leaving the chief to time out, and a failed chief stops the worker.
  // A statistics worker takes no tokens and outlives nothing: it is not
  // part of the sync step, and the driver stops it.
  if (st.cfg.role == worker_role::gradients)
    self->link_to(st.cfg.chief);
  // A chief whose process or node went away is, in a cluster, a peer to
  // wait for (lose_peer); any other failure of the chief stops the worker.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (!msg.reason || msg.reason == caf::exit_reason::normal)
      return;
    auto& st = self->state;
    if (msg.reason == caf::exit_reason::remote_link_unreachable
        && msg.source == st.cfg.chief.address()
        && st.cfg.peer_wait.count() > 0) {
      stall(self, st.who() + ": lost the chief (its link broke)");
      return;
    }
    if (msg.source != st.cfg.chief.address()
        && msg.reason == caf::exit_reason::remote_link_unreachable)
      return; // an earlier chief, since replaced
    fail(self, std::move(msg.reason));
  });
  // Like TF's local_step_init_op at session creation: the worker learns the
  // global step now, not at its first step, so a late first step is stale.
  initialise(self);
  return initialising(self);
}

caf::expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                         worker_config cfg) {
  if (auto err = cfg.validate())
    return err;
  auto shard = batcher::make(*cfg.data, cfg.batch_size, cfg.seed, cfg.index,
                             cfg.num_workers);
  if (!shard)
    return shard.error();
  return sys.spawn(worker, std::move(cfg));
}

} // namespace syncfac
