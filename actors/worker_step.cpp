// The worker's step loop: pull, compute, push, token.

#include <cmath>
#include <utility>

#include "actors/worker_parts.hpp"

namespace syncfac::worker_parts {

/// The step loop of the caller's request begins (the first pull is done).
void start_loop(self_ptr self) {
  self->become(running(self));
  if (self->state.cfg.role == worker_role::statistics)
    statistics_step(self);
  else
    run_step(self);
}

// -- the step loop ------------------------------------------------------------

void end_step(self_ptr self, const token_grant& grant) {
  auto& st = self->state;
  // A token never carries a step below the one it follows: the chief's
  // global_step only grows (and a restarted chief restores it).
  if (!grant.stop && grant.global_step < st.counters.local_step)
    return fail(self, make_error(ec::bad_message,
                                 st.who() + ": token for step "
                                   + std::to_string(grant.global_step)
                                   + " is older than local_step "
                                   + std::to_string(st.counters.local_step)));
  ++st.counters.steps;
  st.counters.step_s += seconds_since(st.step_started);
  if (grant.stop) {
    self->become(stopped(self));
    if (st.promise.pending())
      st.promise.deliver(st.status());
    st.asked = false;
    return;
  }
  st.counters.local_step = grant.global_step;
  if (st.mode == step_mode::until_stop)
    return run_step(self);
  self->become(ready(self));
  if (st.promise.pending())
    st.promise.deliver(st.status());
  st.asked = false;
}

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
    st.counters.sent.add();
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
  bool holds_step = step == st.counters.local_step;
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
      st.counters.bytes_pulled_unused += payload_bytes(sp);
      if (pulls_rows(st)
          && static_cast<size_t>(&sp - all.data()) == table_shard(st))
        rows_missing = true;
    }
  }
  if (!complete && (!holds_step || rows_missing)) {
    st.counters.bytes_pulled_unused += payload_bytes(use);
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
    if (grant.global_step > st.counters.local_step)
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

void take_token(self_ptr self, const step_result& res) {
  auto& st = self->state;
  worker_report rep{st.cfg.index,
                    st.counters.local_step,
                    res.loss,
                    res.correct,
                    res.count,
                    std::exchange(st.stale_unreported, 0),
                    st.batches->state(),
                    st.incarnation};
  auto end = std::make_shared<step_end>();
  auto asked = std::chrono::steady_clock::now();
  st.counters.sent.add();
  self->request(st.cfg.chief, st.cfg.token_timeout, token_atom::value, rep)
    .then(bound<token_grant&>(self,
                              [=](token_grant& grant) {
                                self->state.counters.token_wait_s
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
    self->state.counters.bytes_pulled_unused += payload_bytes(pulled);
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
                     st.counters.local_step + 1, wait_ms, row_requests(st));
  pull_all(self, wait + st.cfg.request_timeout, std::move(on_values),
           std::move(on_error), st.counters.local_step + 1, wait_ms);
}

/// Splits the gradients by shard and pushes them, tagged with local_step.
void push(self_ptr self, step_result res) {
  auto& st = self->state;
  std::vector<gradient_push> pushes(st.cfg.shards.size());
  for (auto& p : pushes) {
    p.worker = st.cfg.index;
    p.local_step = st.counters.local_step;
  }
  // The push a variable's gradient joins: its shard's; one the worker
  // does not know fails the step.
  auto push_of = [&](const std::string& variable)
    -> caf::expected<gradient_push*> {
    auto i = st.slot_of.find(variable);
    if (i == st.slot_of.end())
      return make_error(ec::unknown_name,
                        st.who() + ": the device returned a gradient for "
                                   "unknown variable '"
                          + variable + "'");
    return &pushes[st.shard_of[i->second]];
  };
  for (auto& g : res.gradients) {
    auto p = push_of(g.name);
    if (!p)
      return fail(self, p.error());
    (*p)->dense.push_back(std::move(g));
  }
  for (auto& g : res.sparse_gradients) {
    auto p = push_of(g.variable);
    if (!p)
      return fail(self, p.error());
    (*p)->sparse.push_back(std::move(g));
  }
  res.gradients.clear();
  res.sparse_gradients.clear();
  for (const auto& p : pushes)
    st.counters.bytes_pushed += payload_bytes(p);
  // Across the network a large push goes as parts, sent back to back; a
  // shard's push is stale when its last part's answer says so. The token
  // request goes right behind the parts, not after their answers: the
  // chief grants a later step only once every shard applied this one,
  // which waits for this push where it counts, so waiting for the answers
  // first would only add a round trip to every step (docs/protocol.md,
  // "The token behind the push"). The answers say what became of the
  // push, and a stale one is reported with the next token request.
  // A step whose loss is not finite waits for them, as every step once
  // did: its gradient is about to be refused by a shard naming the
  // variable, and that, not the chief's "loss is NaN" racing it, should
  // be what ends the run.
  const bool after_answers = !std::isfinite(res.loss);
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
  for (size_t s = 0; s < parts.size(); ++s) {
    for (auto& part : parts[s]) {
      st.counters.sent.add(payload_bytes(part));
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
                             if (stale > 0) {
                               ++self->state.counters.stale_pushes;
                               self->state.stale_unreported += stale;
                             }
                             if (after_answers)
                               take_token(self, res);
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
  if (!after_answers || prog->remaining == 0)
    take_token(self, res);
}

void compute(self_ptr self) {
  auto& st = self->state;
  draw_batch(st);
  auto on_error = bound<caf::error&>(self, [=](caf::error& err) {
    fail(self, request_failed(self, "gradient computation", std::move(err)));
  });
  auto on_result = bound<step_result&>(self, [=](step_result& res) {
    self->state.counters.compute_s += res.compute_s;
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
          st.counters.compute_s += res.compute_s;
          auto stats = std::move(res.stats);
          res.stats.clear();
          if (st.cfg.push_after_stats) {
            auto pending = std::make_shared<step_result>(std::move(res));
            // Called by the last statistics answer, a continuation of this
            // binding itself.
            send_stats(self, std::move(stats), st.counters.local_step,
                       pending->stats_examples,
                       [=] { push(self, std::move(*pending)); });
            return;
          }
          send_stats(self, std::move(stats), st.counters.local_step,
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
    // The model's parameter `name`, of which the shard `sent` something.
    auto param = [&](const std::string& sent, const std::string& name)
      -> caf::expected<tensor*> {
      auto i = st.slot_of.find(name);
      if (i == st.slot_of.end())
        return make_error(ec::unknown_name,
                          st.who() + ": ps:" + std::to_string(sp.shard) + " "
                            + sent + " '" + name
                            + "', which the model does not have");
      return &st.params[i->second].value;
    };
    for (auto& v : sp.values) {
      auto p = param("holds", v.name);
      if (!p)
        return p.error();
      st.counters.bytes_pulled += v.value.size()
                         * static_cast<int64_t>(sizeof(float));
      table_whole = table_whole || (st.row_table && v.name == *st.row_table);
      **p = std::move(v.value);
    }
    for (auto& r : sp.rows) {
      auto p = param("sent rows of", r.variable);
      if (!p)
        return p.error();
      if (auto err = scatter_rows(r, **p))
        return with_context(err, st.who() + ": rows from ps:"
                                   + std::to_string(sp.shard));
      st.counters.bytes_pulled += payload_bytes(r);
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

} // namespace syncfac::worker_parts
