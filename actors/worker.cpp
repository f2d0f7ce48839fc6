#include "actors/worker.hpp"

#include <algorithm>
#include <functional>

#include <caf/send.hpp>

#include "actors/gather.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using self_ptr = worker_actor::stateful_pointer<worker_state>;

std::string who(self_ptr self) {
  return "worker " + std::to_string(self->state.cfg.index);
}

worker_status status_of(self_ptr self) {
  auto& st = self->state;
  return worker_status{st.cfg.index,     st.local_step,   st.steps,
                       st.stale_pushes,  st.step_s,       st.token_wait_s,
                       st.compute_s,     st.stats_sent,   st.stats_stale,
                       st.stats_skipped, st.stats_failed, st.stats_error,
                       st.peers_lost,    st.rebinds,      st.bytes_pushed,
                       st.bytes_pulled};
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
    return make_error(ec::timeout, who(self) + ": no answer to " + what
                                     + " in time");
  return make_error(ec::peer_down, who(self) + ": " + what + " failed: "
                                     + render(err));
}

/// Whether an answer belongs to a step the worker has since abandoned.
bool outdated(self_ptr self, int64_t generation) {
  return self->state.generation != generation;
}

/// The chief or a shard did not answer (a broken connection, a dead or
/// frozen process): in a cluster the worker abandons its step and waits,
/// bounded by peer_wait, for a chief to rebind it; otherwise it fails. An
/// error the peer answered with (a refused push, a failed run) is no loss.
void stall(self_ptr self, std::string reason) {
  auto& st = self->state;
  if (st.stalled)
    return;
  st.stalled = true;
  st.stall_reason = std::move(reason);
  st.stalled_since = std::chrono::steady_clock::now();
  ++st.generation;
  ++st.peers_lost;
  self->delayed_send(self, st.cfg.peer_wait, stall_atom::value,
                     st.generation);
}

void lose_peer(self_ptr self, const std::string& what, caf::error err) {
  if (self->state.cfg.peer_wait.count() == 0
      || err.category() != caf::atom("system"))
    return fail(self, request_failed(self, what, std::move(err)));
  stall(self, render(request_failed(self, what, std::move(err))));
}

void run_step(self_ptr self);

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
                                   who(self) + ": statistics for layer '"
                                     + ls.layer
                                     + "', which no covariance actor owns"));
    updates[static_cast<size_t>(i->second)].layers.push_back(std::move(ls));
  }
  auto remaining = std::make_shared<size_t>(0);
  auto gen = st.generation;
  auto finish = [remaining, done] {
    if (--*remaining == 0 && done)
      done();
  };
  for (size_t c = 0; c < n; ++c) {
    if (updates[c].layers.empty())
      continue;
    if (st.stats_in_flight[c]) {
      ++st.stats_skipped;
      continue;
    }
    st.stats_in_flight[c] = true;
    ++*remaining;
    self->request(st.cfg.covariance[c], st.cfg.request_timeout,
                  stats_atom::value, std::move(updates[c]))
      .then(
        [=](stats_ack& ack) {
          if (outdated(self, gen))
            return;
          auto& st = self->state;
          st.stats_in_flight[c] = false;
          ++st.stats_sent;
          if (!ack.accepted)
            ++st.stats_stale;
          finish();
        },
        [=](caf::error& err) {
          // A lost statistics update costs K-FAC one sample of the
          // factors, not the run: count it and go on.
          if (outdated(self, gen))
            return;
          auto& st = self->state;
          st.stats_in_flight[c] = false;
          ++st.stats_failed;
          st.stats_error = render(request_failed(
            self, "statistics to covariance:" + std::to_string(c),
            std::move(err)));
          finish();
        });
  }
  // Nothing was sent (every update empty or skipped): nothing to wait for.
  if (*remaining == 0 && done)
    done();
  if (*remaining == 0 && done)
    done();
}

void end_step(self_ptr self, const token_grant& grant) {
  auto& st = self->state;
  // A token never carries a step below the one it follows: the chief's
  // global_step only grows (and a restarted chief restores it).
  if (!grant.stop && grant.global_step < st.local_step)
    return fail(self, make_error(ec::bad_message,
                                 who(self) + ": token for step "
                                   + std::to_string(grant.global_step)
                                   + " is older than local_step "
                                   + std::to_string(st.local_step)));
  ++st.steps;
  st.step_s += seconds_since(st.step_started);
  if (grant.stop) {
    st.stopped = true;
    st.running = false;
    if (st.promise.pending())
      st.promise.deliver(status_of(self));
    return;
  }
  st.local_step = grant.global_step;
  if (st.running)
    run_step(self);
  else if (st.promise.pending())
    st.promise.deliver(status_of(self));
}

caf::error absorb(self_ptr self, std::vector<shard_params>& pulled);

/// The token and a speculative pull travel together: when the pulled
/// variables are already at the token's step, the next step needs no pull
/// of its own (one round trip less on the critical path).
struct step_end {
  std::optional<token_grant> grant;
  std::optional<std::vector<shard_params>> pulled;
  bool failed = false;
};

void finish_step_end(self_ptr self, step_end& end) {
  if (end.failed || !end.grant || (!end.pulled && !end.grant->stop))
    return;
  auto& st = self->state;
  st.params_ready = false;
  if (!end.grant->stop) {
    bool current = true;
    for (auto& sp : *end.pulled)
      current = current && sp.global_step >= end.grant->global_step;
    if (current) {
      if (auto err = absorb(self, *end.pulled))
        return fail(self, std::move(err));
      st.params_ready = true;
    }
  }
  auto grant = *end.grant;
  end.failed = true; // done: ignore whatever arrives later
  end_step(self, grant);
}

void take_token(self_ptr self, const step_result& res, int32_t stale) {
  auto& st = self->state;
  worker_report rep{st.cfg.index, st.local_step, res.loss,
                    res.correct,    res.count,     stale,
                    st.batches->state(), st.incarnation};
  auto end = std::make_shared<step_end>();
  auto asked = std::chrono::steady_clock::now();
  auto gen = st.generation;
  self->request(st.cfg.chief, st.cfg.token_timeout, token_atom::value, rep)
    .then(
      [=](token_grant& grant) {
        if (outdated(self, gen))
          return;
        self->state.token_wait_s += seconds_since(asked);
        end->grant = grant;
        finish_step_end(self, *end);
      },
      [=](caf::error& err) {
        if (end->failed || outdated(self, gen))
          return;
        end->failed = true;
        lose_peer(self, "token request", std::move(err));
      });
  gather<shard_params>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_params> pulled) {
      if (outdated(self, gen))
        return;
      end->pulled = std::move(pulled);
      finish_step_end(self, *end);
    },
    [=](size_t s, caf::error err) {
      if (end->failed || outdated(self, gen))
        return;
      end->failed = true;
      lose_peer(self, "pull from ps:" + std::to_string(s), std::move(err));
    },
    pull_atom::value);
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
                                   who(self) + ": the device returned a "
                                     "gradient for unknown variable '"
                                     + g.name + "'"));
    pushes[st.shard_of[i->second]].dense.push_back(std::move(g));
  }
  for (auto& g : res.sparse_gradients) {
    auto i = st.slot_of.find(g.variable);
    if (i == st.slot_of.end())
      return fail(self, make_error(ec::unknown_name,
                                   who(self) + ": the device returned a "
                                     "gradient for unknown variable '"
                                     + g.variable + "'"));
    pushes[st.shard_of[i->second]].sparse.push_back(std::move(g));
  }
  res.gradients.clear();
  res.sparse_gradients.clear();
  for (const auto& p : pushes) {
    for (const auto& g : p.dense)
      st.bytes_pushed += g.value.size() * static_cast<int64_t>(sizeof(float));
    for (const auto& g : p.sparse)
      st.bytes_pushed += static_cast<int64_t>(
                           g.indices.size() * sizeof(int64_t))
                         + g.rows.size()
                             * static_cast<int64_t>(sizeof(float));
  }
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
  auto gen = st.generation;
  for (size_t s = 0; s < parts.size(); ++s) {
    for (auto& part : parts[s]) {
      self->request(st.cfg.shards[s], st.cfg.request_timeout, push_atom::value,
                    std::move(part))
        .then(
          [=](push_ack& ack) {
            if (prog->failed || outdated(self, gen))
              return;
            if (!ack.accepted)
              prog->stale[s] = true;
            if (--prog->remaining == 0) {
              auto stale = static_cast<int32_t>(
                std::count(prog->stale.begin(), prog->stale.end(), true));
              if (stale > 0)
                ++self->state.stale_pushes;
              take_token(self, res, stale);
            }
          },
          [=](caf::error& err) {
            if (prog->failed || outdated(self, gen))
              return;
            prog->failed = true;
            lose_peer(self, "gradient push to ps:" + std::to_string(s),
                      std::move(err));
          });
    }
  }
}

void compute(self_ptr self) {
  auto& st = self->state;
  st.batches->next(st.current);
  auto gen = st.generation;
  auto on_error = [=](caf::error& err) {
    if (outdated(self, gen))
      return;
    fail(self, request_failed(self, "gradient computation", std::move(err)));
  };
  if (!st.cfg.stats) {
    self->request(st.cfg.device, st.cfg.request_timeout, grads_atom::value,
                  st.params, st.current)
      .then(
        [=](step_result& res) {
          if (outdated(self, gen))
            return;
          self->state.compute_s += res.compute_s;
          push(self, std::move(res));
        },
        on_error);
    return;
  }
  self->request(st.cfg.device, st.cfg.request_timeout, grads_atom::value,
                st.params, st.current, *st.cfg.stats)
    .then(
      [=](step_result& res) {
        if (outdated(self, gen))
          return;
        auto& st = self->state;
        st.compute_s += res.compute_s;
        auto stats = std::move(res.stats);
        res.stats.clear();
        if (st.cfg.push_after_stats) {
          auto pending = std::make_shared<step_result>(std::move(res));
          send_stats(self, std::move(stats), st.local_step,
                     pending->stats_examples, [=] {
                       if (!outdated(self, gen))
                         push(self, std::move(*pending));
                     });
          return;
        }
        send_stats(self, std::move(stats), st.local_step, res.stats_examples);
        push(self, std::move(res));
      },
      on_error);
}

// -- the statistics role ------------------------------------------------------

void statistics_step(self_ptr self);

/// The statistics role's loop: one update per global step, polling the
/// shards' step every poll_interval while the gradient workers move on.
void statistics_after(self_ptr self, std::chrono::milliseconds delay) {
  if (delay.count() == 0)
    return statistics_step(self);
  caf::delayed_anon_send(caf::actor_cast<worker_actor>(self), delay,
                         step_atom::value);
}

/// Pulls the variables and computes and sends statistics at their step.
void statistics_update(self_ptr self) {
  auto& st = self->state;
  auto gen = st.generation;
  gather<shard_params>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_params> pulled) {
      if (outdated(self, gen))
        return;
      auto& st = self->state;
      auto step = pulled.empty() ? 0 : pulled.front().global_step;
      if (auto err = absorb(self, pulled))
        return fail(self, std::move(err));
      st.local_step = step;
      st.batches->next(st.current);
      auto t0 = std::chrono::steady_clock::now();
      self->request(st.cfg.device, st.cfg.request_timeout, stats_atom::value,
                    st.params, st.current, *st.cfg.stats)
        .then(
          [=](stats_update& u) {
            if (outdated(self, gen))
              return;
            auto& st = self->state;
            st.compute_s += seconds_since(t0);
            st.stats_step = step;
            ++st.steps;
            send_stats(self, std::move(u.layers), step, u.examples, [=] {
              statistics_after(self, std::chrono::milliseconds{0});
            });
          },
          [=](caf::error& err) {
            if (outdated(self, gen))
              return;
            fail(self, request_failed(self, "statistics computation",
                                      std::move(err)));
          });
    },
    [=](size_t s, caf::error err) {
      if (outdated(self, gen))
        return;
      lose_peer(self, "pull from ps:" + std::to_string(s), std::move(err));
    },
    pull_atom::value);
}

/// Waits for a global step it has no statistics of yet: asks one shard's
/// status (a few bytes) rather than pulling every variable each poll.
void statistics_step(self_ptr self) {
  auto& st = self->state;
  if (!st.running)
    return;
  auto gen = st.generation;
  self->request(st.cfg.shards.front(), st.cfg.request_timeout,
                status_atom::value)
    .then(
      [=](shard_status& ss) {
        if (outdated(self, gen))
          return;
        auto& st = self->state;
        if (ss.global_step <= st.stats_step)
          return statistics_after(self, st.cfg.poll_interval);
        statistics_update(self);
      },
      [=](caf::error& err) {
        if (outdated(self, gen))
          return;
        lose_peer(self, "status of ps:0", std::move(err));
      });
}

/// Copies pulled values into the model's parameter order.
caf::error absorb(self_ptr self, std::vector<shard_params>& pulled) {
  auto& st = self->state;
  for (auto& sp : pulled)
    for (auto& v : sp.values) {
      auto i = st.slot_of.find(v.name);
      if (i == st.slot_of.end())
        return make_error(ec::unknown_name,
                          who(self) + ": ps:" + std::to_string(sp.shard)
                            + " holds '" + v.name
                            + "', which the model does not have");
      st.bytes_pulled += v.value.size()
                         * static_cast<int64_t>(sizeof(float));
      st.params[i->second].value = std::move(v.value);
    }
  return caf::none;
}

void run_step(self_ptr self) {
  auto& st = self->state;
  st.step_started = std::chrono::steady_clock::now();
  if (st.params_ready)
    return compute(self);
  auto gen = st.generation;
  gather<shard_params>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_params> pulled) {
      if (outdated(self, gen))
        return;
      if (auto err = absorb(self, pulled))
        return fail(self, std::move(err));
      compute(self);
    },
    [=](size_t s, caf::error err) {
      if (outdated(self, gen))
        return;
      lose_peer(self, "pull from ps:" + std::to_string(s), std::move(err));
    },
    pull_atom::value);
}

/// Learns the model's variables and which shard holds each, and starts at
/// the shards' global step (TF's local_step_init_op).
void initialise(self_ptr self) {
  auto& st = self->state;
  st.initialising = true;
  self->request(st.cfg.device, st.cfg.request_timeout, load_model_atom::value,
                st.cfg.model, st.cfg.seed)
    .then(
      [=](model_info& info) {
        auto& st = self->state;
        st.params = std::move(info.initial);
        for (size_t i = 0; i < st.params.size(); ++i)
          st.slot_of[st.params[i].name] = i;
        st.shard_of.assign(st.params.size(), st.cfg.shards.size());
        gather<shard_params>(
          self, st.cfg.shards, st.cfg.request_timeout,
          [=](std::vector<shard_params> pulled) {
            auto& st = self->state;
            // absorb() refuses variables the model lacks; names stay
            // readable after it moved the values out.
            if (auto err = absorb(self, pulled))
              return fail(self, std::move(err));
            for (size_t s = 0; s < pulled.size(); ++s)
              for (auto& v : pulled[s].values)
                st.shard_of[st.slot_of[v.name]] = s;
            for (size_t i = 0; i < st.params.size(); ++i)
              if (st.shard_of[i] == st.cfg.shards.size())
                return fail(self, make_error(ec::unknown_name,
                                             who(self) + ": no PS shard holds '"
                                               + st.params[i].name + "'"));
            // A resume point that came first (a restored run) wins over
            // a pull answered before the restore reached the shards.
            auto pulled_step = pulled.empty() ? 0 : pulled.front().global_step;
            st.params_ready = pulled_step >= st.local_step;
            st.local_step = std::max(st.local_step, pulled_step);
            st.initialised = true;
            st.initialising = false;
            if (!st.promise.pending())
              return;
            if (st.cfg.role == worker_role::statistics)
              statistics_step(self);
            else
              run_step(self);
          },
          [=](size_t s, caf::error err) {
            self->state.initialising = false;
            lose_peer(self, "first pull from ps:" + std::to_string(s),
                      std::move(err));
          },
          pull_atom::value);
      },
      [=](caf::error& err) {
        fail(self, request_failed(self, "model load", std::move(err)));
      });
}

/// Takes a resume point's data position (when it has one) and run
/// incarnation; refuses a negative step.
caf::error take_resume_point(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (rp.global_step < 0)
    return make_error(ec::invalid_argument,
                      who(self) + ": resume at negative step "
                        + std::to_string(rp.global_step));
  if (rp.has_data_order)
    if (auto err = st.batches->restore(rp.data_order))
      return with_context(err, who(self) + ": data order to resume from");
  st.incarnation = rp.incarnation;
  return caf::none;
}

/// Starts from a restored checkpoint: its step (an earlier pull is out of
/// date, so the first step pulls again) and its data position.
caf::error resume(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (auto err = take_resume_point(self, rp))
    return err;
  if (rp.global_step > st.local_step) {
    st.local_step = rp.global_step;
    st.params_ready = false;
  }
  return caf::none;
}

caf::result<worker_status> begin(self_ptr self, bool keep_running);

/// Goes on with another chief and shards after a fault, from `rp`: the
/// step abandoned, local_step set to the resume point's (lower after a
/// rollback to a checkpoint) and, when it has one, the data position.
caf::result<worker_status> rebind(self_ptr self, const resume_point& rp,
                                  chief_actor chief,
                                  std::vector<ps_actor> shards,
                                  std::vector<covariance_actor> covariance) {
  auto& st = self->state;
  if (!chief || shards.size() != st.cfg.shards.size()
      || std::any_of(shards.begin(), shards.end(),
                     [](const ps_actor& s) { return !s; }))
    return make_error(ec::invalid_argument,
                      who(self) + ": rebinding needs a chief and "
                        + std::to_string(st.cfg.shards.size())
                        + " PS shard(s), got "
                        + std::to_string(shards.size()));
  if (!covariance.empty() && !st.cfg.covariance.empty()
      && covariance.size() != st.cfg.covariance.size())
    return make_error(ec::invalid_argument,
                      who(self) + ": rebinding with "
                        + std::to_string(covariance.size())
                        + " covariance actors, the worker sends to "
                        + std::to_string(st.cfg.covariance.size()));
  // Bound to this incarnation of the run already and going on (the
  // chief's driver rebound it; its node's rejoin comes second): giving the
  // step up now would waste a token it may be waiting for, and without
  // backups the steps would wait for it forever.
  if (st.rebinds > 0 && !st.stalled && !st.stopped
      && rp.incarnation == st.incarnation && st.cfg.chief == chief)
    return status_of(self);
  if (auto err = take_resume_point(self, rp))
    return err;
  ++st.generation;
  if (st.cfg.role == worker_role::gradients && st.cfg.chief != chief) {
    self->unlink_from(st.cfg.chief);
    self->link_to(chief);
  }
  st.cfg.chief = std::move(chief);
  st.cfg.shards = std::move(shards);
  if (!covariance.empty() && !st.cfg.covariance.empty())
    st.cfg.covariance = std::move(covariance);
  st.stats_in_flight.assign(st.stats_in_flight.size(), false);
  st.stalled = false;
  ++st.rebinds;
  // Whoever started the abandoned run (a chief that may be gone) hears
  // how far it went; the new run's caller gets the next answer.
  if (st.promise.pending())
    st.promise.deliver(status_of(self));
  st.stopped = false;
  st.local_step = rp.global_step;
  st.stats_step = rp.global_step - 1;
  st.params_ready = false;
  if (!st.initialised && !st.initialising)
    initialise(self);
  return begin(self, true);
}

/// The rebinding did not come within peer_wait of the loss.
void give_up_waiting(self_ptr self, int64_t generation) {
  auto& st = self->state;
  if (!st.stalled || st.generation != generation)
    return;
  auto waited = std::chrono::duration_cast<std::chrono::seconds>(
    std::chrono::steady_clock::now() - st.stalled_since);
  fail(self, make_error(ec::timeout,
                        who(self) + ": no chief rebound it within "
                          + std::to_string(waited.count())
                          + " s (--max_wait_ms) after: " + st.stall_reason));
}

caf::result<worker_status> begin(self_ptr self, bool keep_running) {
  auto& st = self->state;
  if (st.promise.pending())
    return make_error(ec::invalid_argument,
                      who(self) + ": already running a step");
  if (st.stopped)
    return status_of(self);
  st.running = keep_running;
  st.promise = self->make_response_promise<worker_status>();
  if (st.cfg.role == worker_role::statistics) {
    // Runs until stopped (the driver's exit), not step by step.
    st.running = true;
    if (st.initialised)
      statistics_step(self);
    return st.promise;
  }
  if (st.initialised)
    run_step(self);
  // else: the step starts once initialise() is done
  return st.promise;
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
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.batches = batcher{*st.cfg.data, st.cfg.batch_size, st.cfg.seed,
                       st.cfg.index, st.cfg.num_workers};
  st.stats_in_flight.assign(st.cfg.covariance.size(), false);
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
      stall(self, who(self) + ": lost the chief (its link broke)");
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
  return {
    [=](step_atom) -> caf::result<worker_status> {
      // The statistics role's own wake-up (delayed_anon_send): no reply.
      if (self->state.cfg.role == worker_role::statistics
          && self->state.running) {
        statistics_step(self);
        return status_of(self);
      }
      return begin(self, false);
    },
    [=](run_atom) { return begin(self, true); },
    [=](run_atom, const resume_point& rp) -> caf::result<worker_status> {
      if (self->state.promise.pending())
        return make_error(ec::invalid_argument,
                          who(self) + ": already running a step");
      if (auto err = resume(self, rp))
        return err;
      return begin(self, true);
    },
    [=](run_atom, const resume_point& rp, chief_actor& chief,
        std::vector<ps_actor>& shards,
        std::vector<covariance_actor>& covariance)
      -> caf::result<worker_status> {
      return rebind(self, rp, std::move(chief), std::move(shards),
                    std::move(covariance));
    },
    [=](stall_atom, int64_t generation) { give_up_waiting(self, generation); },
    [=](status_atom) { return status_of(self); },
  };
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
