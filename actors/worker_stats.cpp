// The worker's K-FAC statistics and the statistics role's loop.

#include "actors/worker_parts.hpp"

namespace syncfac::worker_parts {

// -- K-FAC statistics ---------------------------------------------------------

/// Sends each covariance actor the statistics of its layers, tagged with
/// the step they were computed at. Does not wait: a covariance actor that
/// still works on this worker's previous update skips this one (counted),
/// so a slow covariance actor never slows the gradient path. `done` runs
/// once every send is answered (the statistics role paces itself by it).
void send_stats(self_ptr self, std::vector<layer_stats> stats, int64_t step,
                int64_t examples, std::function<void()> done) {
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
      ++st.counters.stats_skipped;
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
                                ++st.counters.stats_sent;
                                if (!ack.accepted)
                                  ++st.counters.stats_stale;
                                finish();
                              }),
            bound<caf::error&>(self, [=](caf::error& err) {
              // A lost statistics update costs K-FAC one sample of the
              // factors, not the run: count it and go on.
              auto& st = self->state;
              st.bound->stats_in_flight[c] = false;
              ++st.counters.stats_failed;
              st.counters.stats_error = render(request_failed(
                self, "statistics to covariance:" + std::to_string(c),
                std::move(err)));
              finish();
            }));
  }
  // Nothing was sent (every update empty or skipped): nothing to wait for.
  if (*remaining == 0 && done)
    done();
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
    st.counters.local_step = step;
    st.batches->next(st.current);
    auto t0 = std::chrono::steady_clock::now();
    self->request(st.cfg.device, st.cfg.request_timeout, stats_atom::value,
                  st.params, st.current, *st.cfg.stats)
      .then(bound<stats_update&>(
              self,
              [=](stats_update& u) {
                auto& st = self->state;
                st.counters.compute_s += seconds_since(t0);
                st.stats_step = step;
                ++st.counters.steps;
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

} // namespace syncfac::worker_parts
