#include "actors/chief.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "actors/fatal_exception.hpp"
#include "actors/gather.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"
#include "runtime/gradient_clip.hpp"

namespace syncfac {

namespace {

using self_ptr = chief_actor::stateful_pointer<chief_state>;
using clock_type = std::chrono::steady_clock;

void grant_waiting(self_ptr self) {
  auto& st = self->state;
  if (st.paused)
    return;
  while (!st.waiting.empty() && (st.finished || !st.tokens.empty())) {
    token_grant grant;
    auto& req = st.waiting.front();
    if (st.finished) {
      grant.stop = true;
      grant.global_step = st.global_step;
    } else {
      grant.global_step = st.tokens.front();
      st.tokens.pop_front();
      ++st.tokens_granted;
      st.token_wait_s += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - req.since)
                           .count();
      st.workers[static_cast<size_t>(req.worker)].granted_step
        = grant.global_step;
    }
    st.sent.add();
    req.promise.deliver(grant);
    st.waiting.pop_front();
  }
}

void note(self_ptr self, const std::string& line) {
  if (self->state.cfg.on_event)
    self->state.cfg.on_event(line);
}

/// A worker's process or node went away: its waiting requests go, and a
/// token it held for the current step goes back to the queue (the step
/// still needs R gradients; whoever comes next may take it).
void lose_worker(self_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  // Once the run is over the workers' processes end, and their links
  // break: no loss, and the driver's log may be gone already.
  if (st.finished)
    return;
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
  bool regrant = !st.finished && i->granted_step == st.global_step;
  if (regrant)
    st.tokens.push_front(st.global_step);
  i->granted_step = -1;
  note(self, "chief: worker " + std::to_string(index)
               + " lost at global step " + std::to_string(st.global_step)
               + (regrant ? " (its token goes back to the queue)" : "")
               + "; the run goes on and it may rejoin");
  grant_waiting(self);
}

void put_tokens(self_ptr self, int64_t count) {
  auto& st = self->state;
  for (int64_t i = 0; i < count; ++i)
    st.tokens.push_back(st.global_step);
  grant_waiting(self);
}

/// Ends the run: stops every worker and answers the run request.
void fail(self_ptr self, caf::error err) {
  auto& st = self->state;
  st.finished = true;
  grant_waiting(self);
  if (st.run_promise.pending())
    st.run_promise.deliver(err);
  self->quit(std::move(err));
}

/// The run request fails with ec::peer_lost once the checkpoints begun
/// before the loss are written: the driver rolls back to the newest.
void report_pause(self_ptr self) {
  auto& st = self->state;
  if (!st.run_promise.pending())
    return;
  st.run_promise.deliver(make_error(ec::peer_lost,
                                    st.lost_task + " lost at global step "
                                      + std::to_string(st.lost_at)));
}

void checkpoint_done(self_ptr self, caf::expected<checkpoint_written> res);

/// Drops the checkpoint whose snapshots are being taken, because `task`,
/// whose snapshot it needs, is lost. Whether there was one.
bool abandon_checkpoint(self_ptr self, const std::string& task) {
  auto& st = self->state;
  if (!st.checkpoint)
    return false;
  auto step = st.checkpoint->step;
  st.checkpoint.reset();
  checkpoint_done(self, make_error(ec::peer_lost,
                                   "checkpoint of step " + std::to_string(step)
                                     + ": " + task
                                     + " was lost before its snapshot"));
  return true;
}

/// The chief's supervisor found a PS shard lost (no step can complete
/// without it), or a K-FAC role (its work and the checkpoints need it).
/// The steps pause: no token goes out, the token requests and the
/// checkpoint whose snapshots were being taken are dropped (the workers
/// give their steps up when they are rebound), and the run request fails
/// with ec::peer_lost once no checkpoint is in flight.
void lose_task(self_ptr self, const std::string& task) {
  auto& st = self->state;
  if (!st.running || st.paused)
    return;
  if (st.finished) {
    // The steps are over: only the last checkpoint may still wait for it.
    abandon_checkpoint(self, task);
    return;
  }
  st.paused = true;
  st.lost_task = task;
  st.lost_at = st.global_step;
  st.waiting.clear();
  st.tokens.clear();
  note(self, "chief: " + task + " lost at global step "
               + std::to_string(st.global_step) + "; the steps pause");
  if (abandon_checkpoint(self, task))
    return; // checkpoint_done reports the pause once none is in flight
  if (st.checkpoints_in_flight == 0)
    report_pause(self);
}

/// Goes on after lose_task, from `step` (every shard restored to the
/// checkpoint of that step) with `shards`: a new incarnation of the run.
caf::result<int64_t> roll_back(self_ptr self, int64_t step,
                               std::vector<ps_actor> shards,
                               std::vector<resume_point> points) {
  auto& st = self->state;
  // Paused for a lost role; or rolled back already, its steps not run
  // since: a role lost while that rollback was on its way gave its
  // recovery attempt up, and the next attempt rolls back again.
  bool rolled_back_not_run = !st.running && st.incarnation > 0;
  if (!st.paused && !rolled_back_not_run)
    return make_error(ec::invalid_argument,
                      "chief: a rollback needs a paused run");
  if (shards.size() != st.cfg.shards.size() || step < 0
      || step > st.cfg.steps)
    return make_error(ec::invalid_argument,
                      "chief: rollback to step " + std::to_string(step)
                        + " with " + std::to_string(shards.size())
                        + " shard(s); the run has "
                        + std::to_string(st.cfg.shards.size())
                        + " and ends at step "
                        + std::to_string(st.cfg.steps));
  st.rollback_points = std::move(points);
  st.cfg.shards = std::move(shards);
  st.cfg.start_step = step;
  st.updates.roll_back(st.global_step, step);
  st.global_step = step;
  ++st.incarnation;
  st.paused = false;
  st.running = false;
  st.lost_task.clear();
  st.lost_at = -1;
  st.waiting.clear();
  st.tokens.clear();
  st.window_loss = 0;
  st.window_correct = st.window_count = st.window_reports = 0;
  for (auto& q : st.positions)
    q.clear();
  for (size_t i = 0; i < st.rollback_points.size() && i < st.positions.size();
       ++i)
    if (const auto& rp = st.rollback_points[i]; rp.has_data_order)
      st.positions[i].push_back(
        worker_position{static_cast<int32_t>(i), step, rp.data_order});
  st.rollback_points.clear();
  for (auto& w : st.workers)
    w.granted_step = -1;
  return st.incarnation;
}

void deliver_summary(self_ptr self) {
  auto& st = self->state;
  gather<shard_status>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_status> statuses) {
      auto& st = self->state;
      sync_summary summary;
      summary.global_step = st.global_step;
      summary.examples = st.examples;
      summary.last_loss = st.last_loss;
      summary.last_accuracy = st.last_accuracy;
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
      summary.checkpoints_written = st.checkpoints_written;
      summary.last_checkpoint = st.last_checkpoint;
      summary.checkpoint_errors = st.checkpoint_errors;
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
    },
    [=](size_t i, caf::error err) {
      fail(self, make_error(ec::timeout, "final status of " + shard_role(i)
                                           + ": " + render(err)));
    },
    status_atom::value);
}

/// Ends the run once the checkpoints begun are written (or failed).
void finish(self_ptr self) {
  auto& st = self->state;
  st.finished = true;
  grant_waiting(self);
  if (st.checkpoints_in_flight > 0) {
    st.summary_waits = true;
    return;
  }
  deliver_summary(self);
}

// -- checkpoints --------------------------------------------------------------

bool checkpoint_due(const chief_state& st) {
  if (!st.cfg.checkpointer || st.global_step == st.cfg.start_step)
    return false;
  return st.global_step == st.cfg.steps
         || (st.cfg.checkpoint_every > 0
             && st.global_step % st.cfg.checkpoint_every == 0);
}

void checkpoint_done(self_ptr self, caf::expected<checkpoint_written> res) {
  auto& st = self->state;
  if (res) {
    ++st.checkpoints_written;
    st.last_checkpoint = res->path;
  } else {
    st.checkpoint_errors.push_back(render(res.error()));
  }
  if (st.cfg.on_checkpoint)
    st.cfg.on_checkpoint(res);
  if (--st.checkpoints_in_flight == 0 && st.summary_waits)
    deliver_summary(self);
  else if (st.checkpoints_in_flight == 0 && st.paused)
    report_pause(self);
}

/// Every gradient worker has reported the position after the batch of
/// the checkpoint's last step (step - 1).
bool positions_complete(const chief_state& st, int64_t step) {
  for (const auto& q : st.positions)
    if (q.empty() || q.back().local_step < step - 1)
      return false;
  return true;
}

/// Each worker's newest position not past the checkpoint's last step.
void collect_positions(const chief_state& st, checkpoint_contents& c) {
  for (const auto& q : st.positions) {
    const worker_position* best = nullptr;
    for (const auto& p : q)
      if (p.local_step <= c.global_step - 1)
        best = &p;
    if (best)
      c.data_order.push_back(*best);
  }
}

void try_write_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (!st.checkpoint || !st.checkpoint->snapshots_in)
    return;
  if (!st.checkpoint->grace_over
      && !positions_complete(st, st.checkpoint->step))
    return;
  auto contents = std::move(st.checkpoint->contents);
  st.checkpoint.reset();
  collect_positions(st, contents);
  auto step = contents.global_step;
  self->request(st.cfg.checkpointer, st.cfg.step_timeout,
                checkpoint_atom::value, std::move(contents))
    .then([=](checkpoint_written& w) { checkpoint_done(self, std::move(w)); },
          [=](caf::error& err) {
            checkpoint_done(self, with_context(err, "checkpoint of step "
                                                      + std::to_string(step)));
          });
}

void record_position(self_ptr self, const worker_report& rep) {
  auto& st = self->state;
  auto& q = st.positions[static_cast<size_t>(rep.worker)];
  q.push_back(worker_position{rep.worker, rep.local_step, rep.data});
  while (q.size() > 4)
    q.pop_front();
  try_write_checkpoint(self);
}

/// Asks the shards (and covariance actors) for their snapshots: before the
/// step's tokens go out, so no apply can come between.
void begin_checkpoint(self_ptr self) {
  auto& st = self->state;
  auto step = st.global_step;
  if (st.checkpoint) {
    // The previous one still waits: write it with the positions known.
    st.checkpoint->grace_over = true;
    try_write_checkpoint(self);
    if (st.checkpoint) {
      st.checkpoint_errors.push_back(
        "checkpoint of step " + std::to_string(step)
        + " skipped: the snapshots of step "
        + std::to_string(st.checkpoint->step) + " were still being taken");
      return;
    }
  }
  st.checkpoint = pending_checkpoint{};
  st.checkpointed_step = step;
  st.checkpoint->step = step;
  st.checkpoint->contents.global_step = step;
  ++st.checkpoints_in_flight;
  auto failed = [=](std::string who, caf::error err) {
    auto& st = self->state;
    // Abandoned already (a role's loss), and counted then.
    if (!st.checkpoint || st.checkpoint->step != step)
      return;
    st.checkpoint.reset();
    checkpoint_done(self, make_error(ec::peer_down,
                                     "checkpoint of step "
                                       + std::to_string(step) + ": snapshot of "
                                       + who + ": " + render(err)));
  };
  gather<shard_snapshot>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<shard_snapshot> shards) {
      auto& st = self->state;
      if (!st.checkpoint || st.checkpoint->step != step)
        return;
      st.checkpoint->contents.shards = std::move(shards);
      gather<covariance_snapshot>(
        self, st.cfg.covariance, st.cfg.request_timeout,
        [=](std::vector<covariance_snapshot> covs) {
          auto& st = self->state;
          if (!st.checkpoint || st.checkpoint->step != step)
            return;
          st.checkpoint->contents.covariance = std::move(covs);
          st.checkpoint->snapshots_in = true;
          try_write_checkpoint(self);
        },
        [=](size_t i, caf::error err) {
          failed("covariance actor " + std::to_string(i), std::move(err));
        },
        checkpoint_atom::value);
    },
    [=](size_t i, caf::error err) { failed(shard_role(i), std::move(err)); },
    checkpoint_atom::value);
  self->delayed_send(caf::actor_cast<chief_actor>(self),
                     st.cfg.checkpoint_grace, checkpoint_atom::value, step);
}

void report_round(self_ptr self, double round_s, double gradient_norm) {
  auto& st = self->state;
  round_report rep;
  rep.global_step = st.global_step;
  rep.reports = st.window_reports;
  rep.stale_pushes = st.stale_pushes;
  rep.round_s = round_s;
  rep.gradient_norm = gradient_norm;
  rep.examples = st.examples;
  rep.refused_pushes = st.refused_pushes;
  rep.preconditioned_steps = st.preconditioned_steps;
  rep.inverse_sets = st.inverse_sets;
  rep.token_wait_s = st.token_wait_s;
  if (st.window_count > 0) {
    rep.mean_loss = st.window_loss / static_cast<double>(st.window_reports);
    rep.accuracy = static_cast<double>(st.window_correct)
                   / static_cast<double>(st.window_count);
    st.last_loss = rep.mean_loss;
    st.last_accuracy = rep.accuracy;
  } else {
    // No report this round: the last ones reported (reports says so).
    rep.mean_loss = st.last_loss;
    rep.accuracy = st.last_accuracy;
  }
  st.window_loss = 0;
  st.window_correct = st.window_count = st.window_reports = 0;
  if (st.cfg.on_round)
    st.cfg.on_round(rep);
}

/// After the grant, as TF's variable_averages: the shards process it before
/// the next round's apply (one mailbox, in order), so no step waits for it.
void update_averages(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.moving_average_decay <= 0)
    return;
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  auto incarnation = st.incarnation;
  gather<caf::ok_atom>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [](std::vector<caf::ok_atom>) {},
    [=](size_t i, caf::error err) {
      // As for an apply: an answer of an earlier incarnation (its shard's
      // proxy went down with the link, and the run was rolled back since)
      // says nothing of this one, and a shard gone away is the
      // supervisor's to find (it pauses the steps).
      if (self->state.paused || self->state.incarnation != incarnation)
        return;
      if (err == caf::sec::request_receiver_down) {
        note(self, "chief: " + shard_role(i) + " went away while updating "
                     "its moving averages; waiting for the pause");
        return;
      }
      fail(self, make_error(ec::peer_down, "moving averages on "
                                             + shard_role(i) + ": "
                                             + render(err)));
    },
    average_atom::value, st.cfg.moving_average_decay);
}

/// A report a worker sends with its token request; a malformed one is
/// refused (and counted), a diverged loss ends the run.
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

/// Which workers are lost and have not come back, for a step that waited
/// in vain.
std::string lost_workers(const chief_state& st) {
  std::string out;
  for (size_t i = 0; i < st.workers.size(); ++i)
    if (st.workers[i].losses > 0 && !st.workers[i].actor)
      out += (out.empty() ? "" : ", ") + std::to_string(i);
  if (out.empty())
    return "are enough workers alive?";
  return "worker(s) " + out + " lost and not back";
}

void run_round(self_ptr self);

/// What ends a round whose shards did not answer the request `what`
/// ("apply", "send its gradient norm"): a shard gone away is the supervisor's to handle,
/// anything else ends the run.
std::function<void(size_t, caf::error)>
round_failed(self_ptr self, int64_t step, int64_t incarnation,
             const char* what) {
  return [=](size_t i, caf::error err) {
    auto& st = self->state;
    if (st.paused || st.incarnation != incarnation
        || st.abandoned_step == step)
      return;
    // The shard is gone: its supervisor saw it go down too and pauses
    // the steps (the loss is the supervisor's decision).
    if (err == caf::sec::request_receiver_down) {
      note(self, "chief: " + shard_role(i) + " went away during step "
                   + std::to_string(step) + "; waiting for the pause");
      return;
    }
    if (err == caf::sec::request_timeout)
      err = make_error(ec::timeout,
                       "step " + std::to_string(step) + ": "
                         + shard_role(i) + " did not aggregate "
                         + std::to_string(st.cfg.replicas_to_aggregate)
                         + " gradients per variable within "
                         + std::to_string(st.cfg.step_timeout.count())
                         + " ms (" + lost_workers(st) + ")");
    else
      err = make_error(ec::peer_down, "step " + std::to_string(step) + ": "
                                        + shard_role(i)
                                        + " failed to " + what + ": "
                                        + render(err));
    fail(self, std::move(err));
  };
}

/// --clip_norm's part of a round: the global norm of its averages and
/// the factor every shard applies them with.
struct round_clip {
  double norm = 0;
  gradient_scale scale;
};

/// The round's apply on every shard (clipped when `clip` is given), then
/// the tokens of the next step.
void apply_round(self_ptr self, int64_t step, clock_type::time_point started,
                 std::optional<round_clip> clip) {
  auto& st = self->state;
  auto incarnation = st.incarnation;
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  std::function<void(std::vector<applied>)> applied_everywhere
    = [=](std::vector<applied> results) {
      auto& st = self->state;
      if (st.incarnation != incarnation || st.abandoned_step == step)
        return;
      if (st.paused) {
        // Every shard applied the round after the steps paused: the
        // update is in the parameters, so the run goes on (or rolls
        // back) from the step after it. Dropping it made a resumed run
        // apply the step twice.
        bool all = std::all_of(results.begin(), results.end(),
                               [&](const applied& r) {
                                 return r.global_step == step + 1;
                               });
        if (all && st.global_step == step) {
          st.global_step = step + 1;
          st.updates.apply(st.global_step);
          note(self, "chief: the round of global step " + std::to_string(step)
                       + " was applied by every shard after the pause; "
                         "the run is at global step "
                       + std::to_string(st.global_step));
        }
        return;
      }
      for (size_t i = 0; i < results.size(); ++i)
        if (results[i].global_step != step + 1)
          return fail(self, make_error(ec::internal,
                                       shard_role(i) + " moved to step "
                                         + std::to_string(
                                           results[i].global_step)
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
      if (checkpoint_due(st))
        begin_checkpoint(self);
      put_tokens(self, st.cfg.tokens_per_step());
      update_averages(self);
      report_round(self,
                   std::chrono::duration<double>(clock_type::now() - started)
                     .count(),
                   clip ? clip->norm
                        : std::numeric_limits<double>::quiet_NaN());
      run_round(self);
    };
  auto n = int64_t{st.cfg.replicas_to_aggregate};
  if (clip)
    gather<applied>(self, st.cfg.shards, st.cfg.step_timeout,
                    std::move(applied_everywhere),
                    round_failed(self, step, incarnation, "apply"),
                    apply_atom::value,
                    step, n, clip->scale);
  else
    gather<applied>(self, st.cfg.shards, st.cfg.step_timeout,
                    std::move(applied_everywhere),
                    round_failed(self, step, incarnation, "apply"),
                    apply_atom::value,
                    step, n);
}

void run_round(self_ptr self) {
  auto& st = self->state;
  if (st.global_step >= st.cfg.steps) {
    finish(self);
    return;
  }
  auto started = clock_type::now();
  auto step = st.global_step;
  if (st.cfg.clip_norm <= 0) {
    apply_round(self, step, started, std::nullopt);
    return;
  }
  // --clip_norm: the global norm of the round's averages is spread over
  // the shards; each sends its sum of squares, and every shard applies
  // with the one factor (runtime/gradient_clip.hpp).
  auto incarnation = st.incarnation;
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  gather<norm_part>(
    self, st.cfg.shards, st.cfg.step_timeout,
    [=](std::vector<norm_part> parts) {
      auto& st = self->state;
      if (st.incarnation != incarnation || st.abandoned_step == step
          || st.paused)
        return;
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
      apply_round(self, step, started,
                  round_clip{std::sqrt(squares),
                             gradient_scale{clip_factor(squares,
                                                        st.cfg.clip_norm)}});
    },
    round_failed(self, step, incarnation, "send its gradient norm"),
    norm_atom::value, step,
    int64_t{st.cfg.replicas_to_aggregate});
}

void start(self_ptr self) {
  auto& st = self->state;
  st.running = true;
  st.global_step = st.cfg.start_step;
  // Every accumulator starts at the chief's step, so that gradients
  // computed before a (re)start are recognised as stale.
  st.sent.messages += static_cast<int64_t>(st.cfg.shards.size());
  gather<caf::ok_atom>(
    self, st.cfg.shards, st.cfg.request_timeout,
    [=](std::vector<caf::ok_atom>) {
      put_tokens(self, self->state.cfg.initial_tokens());
      run_round(self);
    },
    [=, incarnation = st.incarnation](size_t i, caf::error err) {
      if (self->state.paused || self->state.incarnation != incarnation)
        return;
      fail(self, make_error(ec::peer_down, "set_global_step on "
                                             + shard_role(i) + ": "
                                             + render(err)));
    },
    set_step_atom::value, st.cfg.start_step);
}

/// A worker task that (re)started during the run: where it resumes.
caf::result<resume_point> rejoin(self_ptr self, int32_t worker) {
  auto& st = self->state;
  if (!st.running || st.finished)
    return make_error(ec::unavailable,
                      st.finished ? "chief: the run is over"
                                  : "chief: the run has not started yet");
  if (st.paused) // ask again once the lost task is back
    return make_error(ec::peer_lost, "chief: the steps are paused ("
                                       + st.lost_task + " was lost)");
  if (worker < 0 || worker >= st.cfg.worker_replicas)
    return make_error(ec::invalid_argument,
                      "chief: no gradient worker " + std::to_string(worker)
                        + " (the run has "
                        + std::to_string(st.cfg.worker_replicas) + ")");
  // Counted here; a worker rebound by a rollback instead counts with its
  // first report after its loss (the token handler).
  auto& rec = st.workers[static_cast<size_t>(worker)];
  if (rec.losses > rec.rejoins)
    ++rec.rejoins;
  resume_point rp;
  rp.global_step = st.global_step;
  rp.incarnation = st.incarnation;
  const auto& q = st.positions[static_cast<size_t>(worker)];
  if (!q.empty()) {
    rp.has_data_order = true;
    rp.data_order = q.back().data;
  }
  note(self, "chief: worker " + std::to_string(worker)
               + " rejoins at global step " + std::to_string(st.global_step));
  return rp;
}

// -- preemption ---------------------------------------------------------------

/// A node was preempted: the run ends after the global step in flight (the
/// round the shards aggregate now), whose checkpoint the normal end writes
/// (checkpoint_due: the last step). Bounded by preempt_wait.
void preempt(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.finished || !st.preempted.empty()) {
    note(self, "chief: " + why + " as well; the run is ending already");
    return;
  }
  st.preempted = why;
  if (!st.running || st.paused) {
    // No round in flight (not started yet, or paused while the driver
    // brings a lost role back): the run ends where it stands; a paused
    // one does not wait for its role (end_paused_run).
    st.cfg.steps = std::max(st.cfg.start_step, st.global_step);
    note(self, "chief: preempted (" + why + ") at global step "
                 + std::to_string(st.global_step)
                 + " with no step in flight; the run ends there");
    if (st.paused && st.supervisor)
      caf::anon_send(st.supervisor, preempt_atom::value, why);
    return;
  }
  st.cfg.steps = std::min(st.cfg.steps, st.global_step + 1);
  note(self, "chief: preempted (" + why + ") at global step "
               + std::to_string(st.global_step)
               + "; the run ends after global step "
               + std::to_string(st.cfg.steps) + " (waiting up to "
               + std::to_string(st.cfg.preempt_wait.count()) + " ms for it)");
  self->delayed_send(caf::actor_cast<chief_actor>(self), st.cfg.preempt_wait,
                     preempt_atom::value, st.global_step);
}

/// The step in flight at the preemption did not finish in time: the run
/// ends at the last applied step, checkpointed unless it was already.
void preempt_step_timed_out(self_ptr self, int64_t step) {
  auto& st = self->state;
  if (st.finished || st.global_step != step)
    return; // it finished
  note(self, "chief: the global step in flight at the preemption (" + 
               std::to_string(step) + " to " + std::to_string(step + 1)
               + ") did not finish within "
               + std::to_string(st.cfg.preempt_wait.count()) + " ms ("
               + lost_workers(st) + "); the run ends at global step "
               + std::to_string(step));
  st.abandoned_step = step;
  st.cfg.steps = step;
  if (st.cfg.checkpointer && step != st.cfg.start_step
      && st.checkpointed_step != step)
    begin_checkpoint(self);
  finish(self);
}

/// The run request of a supervisor that gives a paused run up because it
/// was preempted: the run ends at the newest applied step, checkpointed
/// when every shard is there (a lost K-FAC role's snapshot fails within
/// the request timeout and the checkpoint with it, said in the summary).
caf::result<sync_summary> end_paused_run(self_ptr self) {
  auto& st = self->state;
  st.run_promise = self->make_response_promise<sync_summary>();
  st.cfg.steps = st.global_step;
  bool shard_lost = is_shard_role(st.lost_task);
  note(self, "chief: the run ends at global step "
               + std::to_string(st.global_step) + " without " + st.lost_task
               + (shard_lost ? " (no checkpoint without a shard)" : ""));
  if (st.cfg.checkpointer && !shard_lost
      && st.global_step != st.cfg.start_step
      && st.checkpointed_step != st.global_step)
    begin_checkpoint(self);
  finish(self);
  return st.run_promise;
}

caf::result<sync_summary> run(self_ptr self) {
  auto& st = self->state;
  if (st.running && st.paused && !st.preempted.empty())
    return end_paused_run(self);
  if (st.running)
    return make_error(ec::invalid_argument, "chief: already running");
  st.run_promise = self->make_response_promise<sync_summary>();
  start(self);
  return st.run_promise;
}

} // namespace

caf::error chief_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "chief: " + what);
  };
  if (worker_replicas < 1)
    return bad("worker_replicas must be at least 1, got "
               + std::to_string(worker_replicas));
  if (replicas_to_aggregate < 1)
    return bad("replicas_to_aggregate must be at least 1, got "
               + std::to_string(replicas_to_aggregate));
  auto needed = int64_t{replicas_to_aggregate} - worker_replicas;
  if (num_tokens < -1 || (num_tokens != -1 && num_tokens < needed))
    return bad("too few tokens to finish the first step: "
               + std::to_string(num_tokens) + " (given) vs "
               + std::to_string(needed) + " (needed: replicas_to_aggregate "
               + "- worker_replicas)");
  if (start_step < 0 || steps < start_step)
    return bad("steps (" + std::to_string(steps)
               + ") must not be below the start step ("
               + std::to_string(start_step) + ")");
  if (shards.empty())
    return bad("no PS shards");
  if (step_timeout.count() <= 0 || request_timeout.count() <= 0)
    return bad("timeouts must be positive");
  if (checkpoint_every < 0)
    return bad("checkpoint_every must be >= 0, got "
               + std::to_string(checkpoint_every));
  if (checkpointer && checkpoint_grace.count() <= 0)
    return bad("checkpoint_grace must be positive");
  if (!(clip_norm >= 0 && std::isfinite(clip_norm)))
    return bad("clip_norm must be >= 0 (0: no clipping), got "
               + std::to_string(clip_norm));
  if (!(moving_average_decay >= 0 && moving_average_decay < 1))
    return bad("moving_average_decay must be in [0, 1), got "
               + std::to_string(moving_average_decay));
  return caf::none;
}

chief_actor::behavior_type chief(self_ptr self, chief_config cfg) {
  end_program_on_exception(self, "chief");
  self->state.cfg = std::move(cfg);
  self->state.global_step = self->state.cfg.start_step;
  self->state.updates.start_at(self->state.cfg.start_step);
  self->state.positions.resize(
    static_cast<size_t>(self->state.cfg.worker_replicas));
  self->state.workers.resize(
    static_cast<size_t>(self->state.cfg.worker_replicas));
  // Workers link to the chief; one that ends normally is of no concern, one
  // that fails ends the run with its reason.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (!msg.reason || msg.reason == caf::exit_reason::normal)
      return;
    if (msg.reason == caf::exit_reason::user_shutdown
        || msg.reason == caf::exit_reason::kill) {
      self->quit(msg.reason);
      return;
    }
    if (msg.reason == caf::exit_reason::remote_link_unreachable) {
      lose_worker(self, msg.source);
      return;
    }
    // A worker rebound to another chief leaves this one normally; one of
    // an abandoned incarnation may fail with the steps it gave up.
    if (self->state.paused)
      return;
    fail(self, make_error(ec::peer_down,
                          "a linked worker failed: " + render(msg.reason)));
  });
  return {
    [=](token_atom, const worker_report& rep) -> caf::result<token_grant> {
      auto& st = self->state;
      // A step abandoned by a rollback: the worker has given it up.
      if (rep.incarnation != st.incarnation)
        return make_error(ec::invalid_argument,
                          "chief: report of worker "
                            + std::to_string(rep.worker) + " from incarnation "
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
      st.window_loss += rep.loss;
      st.window_correct += rep.correct;
      st.window_count += rep.count;
      st.examples += rep.count;
      st.stale_pushes += rep.stale_shards > 0 ? 1 : 0;
      ++st.window_reports;
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
      grant_waiting(self);
      return rp;
    },
    [=](run_atom) -> caf::result<sync_summary> {
      return run(self);
    },
    [=](run_atom, std::vector<covariance_actor>& cov)
      -> caf::result<sync_summary> {
      if (!self->state.running)
        self->state.cfg.covariance = std::move(cov);
      return run(self);
    },
    [=](rejoin_atom, int32_t worker) -> caf::result<resume_point> {
      return rejoin(self, worker);
    },
    [=](rollback_atom, int64_t step, std::vector<ps_actor>& shards,
        std::vector<resume_point>& points) -> caf::result<int64_t> {
      return roll_back(self, step, std::move(shards), std::move(points));
    },
    [=](rewire_atom, std::vector<covariance_actor>& cov,
        std::vector<inverse_actor>& inv) {
      auto& st = self->state;
      st.cfg.covariance = std::move(cov);
      st.inverses = std::move(inv);
    },
    [=](lost_atom, const std::string& task) {
      self->state.supervisor
        = caf::actor_cast<caf::actor>(self->current_sender());
      lose_task(self, task);
    },
    [=](checkpoint_atom, int64_t step) {
      auto& st = self->state;
      if (st.checkpoint && st.checkpoint->step == step) {
        st.checkpoint->grace_over = true;
        try_write_checkpoint(self);
      }
    },
    [=](preempt_atom, const std::string& why) { preempt(self, why); },
    [=](preempt_atom, int64_t step) { preempt_step_timed_out(self, step); },
    [=](status_atom) -> chief_status {
      auto& st = self->state;
      return chief_status{st.global_step,
                          static_cast<int64_t>(st.tokens.size()),
                          static_cast<int64_t>(st.waiting.size()),
                          st.tokens_granted, st.finished,
                          st.refused_reports, st.lost_task, st.lost_at,
                          st.sent};
    },
  };
}

caf::expected<chief_actor> spawn_chief(caf::actor_system& sys,
                                       chief_config cfg) {
  if (auto err = cfg.validate())
    return err;
  return sys.spawn(chief, std::move(cfg));
}

} // namespace syncfac
