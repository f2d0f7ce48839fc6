// The chief's part in the fault path (actors/chief.hpp): a lost role
// pauses the steps, a rollback starts a new incarnation of the run, a
// preemption ends it after the step in flight. Its supervisor decides and
// brings roles back (actors/chief_recovery.cpp).

#include <algorithm>

#include "actors/chief_parts.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::chief_parts {

namespace {

/// The run request fails with ec::peer_lost once the checkpoints begun
/// before the loss are written: the driver rolls back to the newest.
void report_pause(self_ptr self) {
  auto& st = self->state;
  if (!st.run_promise.pending() || !st.pause)
    return;
  st.run_promise.deliver(make_error(ec::peer_lost,
                                    st.pause->lost_task + " lost at global step "
                                      + std::to_string(st.pause->lost_at)));
}

} // namespace

/// The chief's supervisor found a PS shard lost (no step can complete
/// without it), or a K-FAC role (its work and the checkpoints need it).
/// The steps pause: no token goes out, the token requests and the
/// checkpoint whose snapshots were being taken are dropped (the workers
/// give their steps up when they are rebound), the answers to the steps'
/// requests reach nothing but a round's apply (actors/chief_round.hpp),
/// and the run request fails with ec::peer_lost once no checkpoint is in
/// flight.
void lose_task(self_ptr self, const std::string& task) {
  auto& st = self->state;
  st.pause = chief_pause{task, st.global_step};
  st.steps.reset();
  st.waiting.clear();
  st.tokens.clear();
  self->become(paused(self));
  note(self, "chief: " + task + " lost at global step "
               + std::to_string(st.global_step) + "; the steps pause");
  abandon_checkpoint(self, task);
  when_checkpoints_settled(self, [=] { report_pause(self); });
}

caf::result<int64_t> roll_back(self_ptr self, int64_t step,
                               std::vector<ps_actor> shards,
                               std::vector<resume_point> points) {
  auto& st = self->state;
  if (shards.size() != st.cfg.shards.size() || step < 0
      || step > st.cfg.steps)
    return make_error(ec::invalid_argument,
                      "chief: rollback to step " + std::to_string(step)
                        + " with " + std::to_string(shards.size())
                        + " shard(s); the run has "
                        + std::to_string(st.cfg.shards.size())
                        + " and ends at step "
                        + std::to_string(st.cfg.steps));
  st.cfg.shards = std::move(shards);
  st.cfg.start_step = step;
  st.updates.roll_back(st.global_step, step);
  st.global_step = step;
  ++st.incarnation;
  // Whatever the run before did, or waited for, reaches nothing now.
  st.steps.reset();
  st.round.reset();
  st.checkpoints.when_settled = nullptr;
  st.pause.reset();
  st.waiting.clear();
  st.tokens.clear();
  st.window.clear();
  // A worker whose link went down with the loss misses its rebind and
  // rejoins instead: at its position in the checkpoint, not at its own.
  st.positions.roll_back(step, points);
  for (auto& w : st.workers)
    w.granted_step = -1;
  self->become(ready(self));
  return st.incarnation;
}

void preempt(self_ptr self, const std::string& why, bool step_in_flight) {
  auto& st = self->state;
  if (!st.preempted.empty()) {
    note(self, "chief: " + why + " as well; the run is ending already");
    return;
  }
  st.preempted = why;
  if (!step_in_flight) {
    // No round in flight (not started yet, or paused while the driver
    // brings a lost role back): the run ends where it stands; a paused
    // one does not wait for its role (end_paused_run).
    st.cfg.steps = std::max(st.cfg.start_step, st.global_step);
    note(self, "chief: preempted (" + why + ") at global step "
                 + std::to_string(st.global_step)
                 + " with no step in flight; the run ends there");
    if (st.pause && st.supervisor)
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
/// ends at the last applied step, checkpointed unless it was already; the
/// round is given up (its answers reach nothing).
void preempt_step_timed_out(self_ptr self, int64_t step) {
  auto& st = self->state;
  if (st.global_step != step)
    return; // it finished
  note(self, "chief: the global step in flight at the preemption ("
               + std::to_string(step) + " to " + std::to_string(step + 1)
               + ") did not finish within "
               + std::to_string(st.cfg.preempt_wait.count()) + " ms ("
               + st.lost_workers() + "); the run ends at global step "
               + std::to_string(step));
  st.round.reset();
  st.cfg.steps = step;
  if (st.cfg.checkpointer && step != st.cfg.start_step
      && st.checkpoints.newest_step != step)
    begin_checkpoint(self);
  finish(self);
}

/// The run ends at the newest applied step, checkpointed when every shard
/// is there (a lost K-FAC role's snapshot fails within the request timeout
/// and the checkpoint with it, said in the summary).
caf::result<sync_summary> end_paused_run(self_ptr self) {
  auto& st = self->state;
  st.run_promise = self->make_response_promise<sync_summary>();
  st.cfg.steps = st.global_step;
  const auto& lost = st.pause->lost_task;
  bool shard_lost = is_shard_role(lost);
  note(self, "chief: the run ends at global step "
               + std::to_string(st.global_step) + " without " + lost
               + (shard_lost ? " (no checkpoint without a shard)" : ""));
  if (st.cfg.checkpointer && !shard_lost
      && st.global_step != st.cfg.start_step
      && st.checkpoints.newest_step != st.global_step)
    begin_checkpoint(self);
  finish(self);
  return st.run_promise;
}

} // namespace syncfac::chief_parts
