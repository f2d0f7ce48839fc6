// The chief's steps (actors/chief.hpp): the token queue, the workers and
// their reports, the rounds of apply requests, the run's end. Which of
// these a message leads to in which state is actors/chief.cpp's.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "actors/chief_parts.hpp"
#include "actors/gather.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"
#include "runtime/gradient_clip.hpp"

namespace syncfac {

// -- report_window and chief_state --------------------------------------------

void report_window::add(const worker_report& rep) {
  loss += rep.loss;
  correct += rep.correct;
  count += rep.count;
  examples += rep.count;
  stale_pushes += rep.stale_shards > 0 ? 1 : 0;
  ++reports;
}

void report_window::close(round_report& out) {
  out.reports = reports;
  out.stale_pushes = stale_pushes;
  out.examples = examples;
  if (count > 0) {
    last_loss = loss / static_cast<double>(reports);
    last_accuracy = static_cast<double>(correct) / static_cast<double>(count);
  }
  // Without a report this round: the last ones reported (reports says so).
  out.mean_loss = last_loss;
  out.accuracy = last_accuracy;
  clear();
}

void report_window::clear() {
  loss = 0;
  correct = count = reports = 0;
}

chief_status chief_state::status(bool finished) const {
  return chief_status{global_step,
                      static_cast<int64_t>(tokens.size()),
                      static_cast<int64_t>(waiting.size()),
                      tokens_granted,
                      finished,
                      refused_reports,
                      pause ? pause->lost_task : std::string{},
                      pause ? pause->lost_at : int64_t{-1},
                      sent};
}

std::string chief_state::lost_workers() const {
  std::string out;
  for (size_t i = 0; i < workers.size(); ++i)
    if (workers[i].losses > 0 && !workers[i].actor)
      out += (out.empty() ? "" : ", ") + std::to_string(i);
  if (out.empty())
    return "are enough workers alive?";
  return "worker(s) " + out + " lost and not back";
}

namespace chief_parts {

namespace {

using clock_type = std::chrono::steady_clock;

/// A report a worker sends with its token request; a malformed one is
/// refused (and counted).
caf::error check_report(self_ptr self, const worker_report& rep) {
  auto& st = self->state;
  auto bad = [&](const std::string& what) {
    ++st.refused_reports;
    return make_error(ec::bad_message, "chief: report of worker "
                                         + std::to_string(rep.worker) + ": "
                                         + what);
  };
  if (rep.worker < 0 || rep.worker >= st.cfg.worker_replicas)
    return bad("worker index out of range [0, "
               + std::to_string(st.cfg.worker_replicas) + ")");
  if (rep.count < 0 || rep.correct < 0 || rep.correct > rep.count)
    return bad("inconsistent counts " + std::to_string(rep.correct) + " of "
               + std::to_string(rep.count));
  if (rep.local_step < 0 || rep.local_step > st.global_step)
    return bad("local_step " + std::to_string(rep.local_step)
               + " is ahead of global_step "
               + std::to_string(st.global_step));
  return caf::none;
}

void put_tokens(self_ptr self, int64_t count) {
  auto& st = self->state;
  for (int64_t i = 0; i < count; ++i)
    st.tokens.push_back(st.global_step);
  grant_tokens(self);
}

void deliver_summary(self_ptr self) {
  auto& st = self->state;
  gather<shard_status>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_status> statuses) {
      auto& st = self->state;
      sync_summary summary;
      summary.global_step = st.global_step;
      summary.examples = st.window.examples;
      summary.last_loss = st.window.last_loss;
      summary.last_accuracy = st.window.last_accuracy;
      for (auto& s : statuses) {
        summary.accepted_pushes += s.accepted_pushes;
        summary.stale_pushes += s.stale_pushes;
        summary.refused_pushes += s.refused_pushes;
      }
      summary.shards = std::move(statuses);
      for (const auto& w : st.workers) {
        summary.worker_losses += w.losses;
        summary.worker_rejoins += w.rejoins;
      }
      summary.checkpoints_written = st.checkpoints.written;
      summary.last_checkpoint = st.checkpoints.last_path;
      summary.checkpoint_errors = st.checkpoints.errors;
      // A run whose updates do not add up to its step lost or invented
      // one somewhere: not a result to report as a success.
      if (auto why = st.updates.imbalance(st.global_step); !why.empty())
        return fail(self, make_error(ec::internal, "chief: " + why));
      summary.updates_inherited = st.updates.inherited;
      summary.updates_applied = st.updates.applied;
      summary.updates_rolled_back = st.updates.rolled_back;
      summary.updates_redone = st.updates.redone;
      summary.preempted = st.preempted;
      st.run_promise.deliver(std::move(summary));
      self->become(done(self));
    },
    [=](size_t i, caf::error err) {
      fail(self, make_error(ec::timeout, "final status of " + shard_role(i)
                                           + ": " + render(err)));
    },
    status_atom::value);
}

void report_round(self_ptr self, double round_s, double gradient_norm) {
  auto& st = self->state;
  round_report rep;
  rep.global_step = st.global_step;
  rep.round_s = round_s;
  rep.gradient_norm = gradient_norm;
  rep.refused_pushes = st.refused_pushes;
  rep.preconditioned_steps = st.preconditioned_steps;
  rep.inverse_sets = st.inverse_sets;
  rep.token_wait_s = st.token_wait_s;
  st.window.close(rep);
  if (st.cfg.on_round)
    st.cfg.on_round(rep);
}

/// What ends a round whose shards did not answer the request `what`
/// ("apply", "send its gradient norm"): a shard gone away is the
/// supervisor's to handle, anything else ends the run.
auto round_failed(self_ptr self, const std::shared_ptr<chief_round>& round,
                  const char* what) {
  auto step = round->step;
  return while_round<size_t, caf::error>(round, [=](size_t i,
                                                    caf::error err) {
    auto& st = self->state;
    // The shard is gone: its supervisor saw it go down too and pauses
    // the steps (the loss is the supervisor's decision).
    if (err == caf::sec::request_receiver_down) {
      note(self, "chief: " + shard_role(i) + " went away during step "
                   + std::to_string(step) + "; waiting for the pause");
      return;
    }
    if (err == caf::sec::request_timeout)
      err = make_error(ec::timeout,
                       "step " + std::to_string(step) + ": " + shard_role(i)
                         + " did not aggregate "
                         + std::to_string(st.cfg.replicas_to_aggregate)
                         + " gradients per variable within "
                         + std::to_string(st.cfg.step_timeout.count())
                         + " ms (" + st.lost_workers() + ")");
    else
      err = make_error(ec::peer_down, "step " + std::to_string(step) + ": "
                                        + shard_role(i) + " failed to "
                                        + what + ": " + render(err));
    fail(self, std::move(err));
  });
}

/// --clip_norm's part of a round: the global norm of its averages and
/// the factor every shard applies them with.
struct round_clip {
  double norm = 0;
  gradient_scale scale;
};

/// Every shard applied the round of `step` after the steps paused: the
/// update is in the parameters, so the run goes on (or rolls back) from
/// the step after it. Dropping it made a resumed run apply the step twice.
void applied_after_pause(self_ptr self, int64_t step,
                         const std::vector<applied>& results) {
  auto& st = self->state;
  bool all = std::all_of(results.begin(), results.end(),
                         [&](const applied& r) {
                           return r.global_step == step + 1;
                         });
  if (!all || st.global_step != step)
    return;
  st.global_step = step + 1;
  st.updates.apply(st.global_step);
  note(self, "chief: the round of global step " + std::to_string(step)
               + " was applied by every shard after the pause; the run is "
                 "at global step "
               + std::to_string(st.global_step));
}

/// Every shard applied the round: the step moves on, its checkpoint and
/// tokens go out, the next round begins.
void applied_everywhere(self_ptr self, const chief_round& round,
                        std::optional<round_clip> clip,
                        const std::vector<applied>& results) {
  auto& st = self->state;
  auto step = round.step;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].global_step != step + 1)
      return fail(self, make_error(ec::internal,
                                   shard_role(i) + " moved to step "
                                     + std::to_string(results[i].global_step)
                                     + ", the chief to "
                                     + std::to_string(step + 1)));
  st.global_step = step + 1;
  st.updates.apply(st.global_step);
  st.refused_pushes = st.preconditioned_steps = st.inverse_sets = 0;
  for (const auto& r : results) {
    st.refused_pushes += r.refused_pushes;
    st.preconditioned_steps = std::max(st.preconditioned_steps,
                                       r.preconditioned_applies);
    st.inverse_sets += r.inverse_sets;
  }
  if (chief_checkpoints::due(st.cfg, st.global_step))
    begin_checkpoint(self);
  // No tokens past the last step: a worker waiting for one gets the stop
  // when the run finishes (grant_stops) instead of computing a step that
  // no round applies, whose pull goes unused and whose statistics the
  // covariance actor would still fold.
  if (st.global_step < st.cfg.steps)
    put_tokens(self, st.cfg.tokens_per_step());
  report_round(self,
               std::chrono::duration<double>(clock_type::now() - round.started)
                 .count(),
               clip ? clip->norm : std::numeric_limits<double>::quiet_NaN());
  run_round(self);
}

/// The round's apply on every shard (clipped when `clip` is given).
void apply_round(self_ptr self, const std::shared_ptr<chief_round>& round,
                 std::optional<round_clip> clip) {
  auto& st = self->state;
  auto step = round->step;
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  auto done = while_round<std::vector<applied>>(
    round,
    [=, r = round.get()](std::vector<applied> results) {
      applied_everywhere(self, *r, clip, results);
    },
    [=](std::vector<applied> results) {
      applied_after_pause(self, step, results);
    });
  auto n = int64_t{st.cfg.replicas_to_aggregate};
  if (clip)
    gather<applied>(self, st.cfg.shards, st.cfg.step_timeout, std::move(done),
                    round_failed(self, round, "apply"), apply_atom::value,
                    step, n, clip->scale);
  else
    gather<applied>(self, st.cfg.shards, st.cfg.step_timeout, std::move(done),
                    round_failed(self, round, "apply"), apply_atom::value,
                    step, n);
}

} // namespace

void note(self_ptr self, const std::string& line) {
  if (self->state.cfg.on_event)
    self->state.cfg.on_event(line);
}

caf::result<token_grant> take_report(self_ptr self, const worker_report& rep) {
  auto& st = self->state;
  // A step abandoned by a rollback: the worker has given it up.
  if (rep.incarnation != st.incarnation)
    return make_error(ec::invalid_argument,
                      "chief: report of worker " + std::to_string(rep.worker)
                        + " from incarnation "
                        + std::to_string(rep.incarnation)
                        + " of the run, which is at "
                        + std::to_string(st.incarnation));
  if (auto err = check_report(self, rep))
    return err;
  if (!std::isfinite(rep.loss)) {
    auto err = make_error(ec::non_finite,
                          "training diverged: worker "
                            + std::to_string(rep.worker) + " reported loss "
                            + std::to_string(rep.loss) + " at step "
                            + std::to_string(rep.local_step)
                            + " (try a smaller learning rate)");
    fail(self, err);
    return err;
  }
  st.window.add(rep);
  record_position(self, rep);
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto& rec = st.workers[static_cast<size_t>(rep.worker)];
  // A lost worker reporting again has rejoined, whichever way it came
  // back: asking the chief (rejoin) or rebound by a rollback.
  if (!rec.actor && rec.losses > rec.rejoins)
    ++rec.rejoins;
  rec.actor = sender;
  auto rp = self->make_response_promise<token_grant>();
  st.waiting.push_back(token_request{rp, rep.worker, sender});
  return rp;
}

void grant_tokens(self_ptr self) {
  auto& st = self->state;
  while (!st.waiting.empty() && !st.tokens.empty()) {
    auto& req = st.waiting.front();
    token_grant grant;
    grant.global_step = st.tokens.front();
    st.tokens.pop_front();
    ++st.tokens_granted;
    st.token_wait_s
      += std::chrono::duration<double>(clock_type::now() - req.since).count();
    st.workers[static_cast<size_t>(req.worker)].granted_step
      = grant.global_step;
    st.sent.add();
    req.promise.deliver(grant);
    st.waiting.pop_front();
  }
}

void grant_stops(self_ptr self) {
  auto& st = self->state;
  while (!st.waiting.empty()) {
    token_grant grant;
    grant.stop = true;
    grant.global_step = st.global_step;
    st.sent.add();
    st.waiting.front().promise.deliver(grant);
    st.waiting.pop_front();
  }
}

void lose_worker(self_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  auto i = std::find_if(st.workers.begin(), st.workers.end(),
                        [&](const worker_record& w) { return w.actor == who; });
  if (i == st.workers.end()) {
    note(self, "chief: a worker went away before its first report");
    return;
  }
  auto index = static_cast<int32_t>(i - st.workers.begin());
  ++i->losses;
  i->actor = caf::actor_addr{};
  st.waiting.erase(std::remove_if(st.waiting.begin(), st.waiting.end(),
                                  [&](const token_request& r) {
                                    return r.sender == who;
                                  }),
                   st.waiting.end());
  // The step still needs R gradients; whoever comes next may take it.
  bool regrant = i->granted_step == st.global_step;
  if (regrant)
    st.tokens.push_front(st.global_step);
  i->granted_step = -1;
  note(self, "chief: worker " + std::to_string(index)
               + " lost at global step " + std::to_string(st.global_step)
               + (regrant ? " (its token goes back to the queue)" : "")
               + "; the run goes on and it may rejoin");
}

void start(self_ptr self) {
  auto& st = self->state;
  st.global_step = st.cfg.start_step;
  st.steps = std::make_shared<chief_steps>();
  self->become(running(self));
  answer_held_rejoins(self);
  // Every accumulator starts at the chief's step, so that gradients
  // computed before a (re)start are recognised as stale.
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  gather<caf::ok_atom>(
    self, st.cfg.shards, st.cfg.request_timeout,
    while_steps<std::vector<caf::ok_atom>>(st.steps,
                                           [=](std::vector<caf::ok_atom>) {
                                             put_tokens(self,
                                                        self->state.cfg
                                                          .initial_tokens());
                                             run_round(self);
                                           }),
    while_steps<size_t, caf::error>(st.steps, [=](size_t i, caf::error err) {
      fail(self, make_error(ec::peer_down, "set_global_step on "
                                             + shard_role(i) + ": "
                                             + render(err)));
    }),
    set_step_atom::value, st.cfg.start_step);
}

void run_round(self_ptr self) {
  auto& st = self->state;
  if (st.global_step >= st.cfg.steps)
    return finish(self);
  auto round = std::make_shared<chief_round>(st.global_step, st.steps);
  st.round = round;
  if (st.cfg.clip_norm <= 0)
    return apply_round(self, round, std::nullopt);
  // --clip_norm: the global norm of the round's averages is spread over
  // the shards; each sends its sum of squares, and every shard applies
  // with the one factor (runtime/gradient_clip.hpp).
  auto step = round->step;
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  gather<norm_part>(
    self, st.cfg.shards, st.cfg.step_timeout,
    while_round<std::vector<norm_part>>(
      round,
      [=, w = std::weak_ptr<chief_round>{round}](
        std::vector<norm_part> parts) {
        double squares = 0;
        for (const auto& part : parts)
          squares += part.sum_of_squares;
        if (!std::isfinite(squares))
          return fail(self, make_error(ec::non_finite,
                                       "step " + std::to_string(step)
                                         + ": the averaged gradient's squared "
                                           "global norm is "
                                         + std::to_string(squares)
                                         + " (--clip_norm)"));
        apply_round(self, w.lock(),
                    round_clip{std::sqrt(squares),
                               gradient_scale{clip_factor(
                                 squares, self->state.cfg.clip_norm)}});
      }),
    round_failed(self, round, "send its gradient norm"), norm_atom::value,
    step, int64_t{st.cfg.replicas_to_aggregate});
}

void finish(self_ptr self) {
  auto& st = self->state;
  self->become(finishing(self));
  fail_held_rejoins(self, "the run ended at global step "
                            + std::to_string(st.global_step)
                            + (st.preempted.empty()
                                 ? std::string{}
                                 : " (preempted: " + st.preempted + ")"));
  if (!st.pause)
    grant_stops(self);
  when_checkpoints_settled(self, [=] { deliver_summary(self); });
}

void fail(self_ptr self, caf::error err) {
  auto& st = self->state;
  if (!st.pause)
    grant_stops(self);
  fail_held_rejoins(self, "the run failed: " + render(err));
  if (st.run_promise.pending())
    st.run_promise.deliver(err);
  self->quit(std::move(err));
}

} // namespace chief_parts

} // namespace syncfac
