// The chief's states as behaviours (actors/chief.hpp):
//
//   ready      at spawn, and after a rollback: token requests (and, after
//              a rollback, rejoins) wait; the run request starts the
//              steps
//   running    the steps run: tokens go out, rounds are applied; a lost
//              role pauses them
//   paused     a role is lost: token requests and rejoins wait; a
//              rollback goes back to ready, a preempted run ends where it
//              stands
//   finishing  the steps are over: token requests are answered with a
//              stop; the summary waits for the checkpoints in flight
//   done       the summary is delivered
//
// Each state names only what it does differently; the handlers every
// state shares stand for the rest (actors/with_defaults.hpp). What a state
// does is in actors/chief_steps.cpp, chief_faults.cpp and
// chief_checkpoints.cpp.

#include "actors/chief.hpp"

#include <cmath>
#include <tuple>

#include <caf/exit_reason.hpp>

#include "actors/chief_parts.hpp"
#include "actors/fatal_exception.hpp"
#include "actors/with_defaults.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/least_counts.hpp"

namespace syncfac {

namespace chief_parts {

namespace {

/// The error a request gets in a state that has no use for it.
caf::error refused(const std::string& why) {
  return make_error(ec::invalid_argument, "chief: " + why);
}

/// Workers link to the chief; one that ends normally is of no concern.
/// `link_broken(source)`: a worker's process or node went away;
/// `failed(source, reason)`: a worker failed with its own error.
template <class LinkBroken, class Failed>
void on_worker_exit(self_ptr self, LinkBroken link_broken, Failed failed) {
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (!msg.reason || msg.reason == caf::exit_reason::normal)
      return;
    if (msg.reason == caf::exit_reason::user_shutdown
        || msg.reason == caf::exit_reason::kill) {
      fail_held_rejoins(self, "the chief was stopped ("
                                + caf::to_string(msg.reason) + ")");
      self->quit(msg.reason);
      return;
    }
    if (msg.reason == caf::exit_reason::remote_link_unreachable)
      return link_broken(msg.source);
    failed(msg.reason);
  });
}

/// A worker that failed ends the run with its reason.
auto ends_the_run(self_ptr self) {
  return [=](const caf::error& reason) {
    fail(self, make_error(ec::peer_down,
                          "a linked worker failed: " + render(reason)));
  };
}

/// The handlers every state shares; each state names what it does
/// differently.
template <class... Own>
behavior state_of(self_ptr self, Own... own) {
  return with_defaults<behavior>(
    std::make_tuple(
      // Taken and queued: a token, or a stop, comes when the state gives
      // one.
      [=](token_atom, const worker_report& rep) -> caf::result<token_grant> {
        return take_report(self, rep);
      },
      [](run_atom) -> caf::result<sync_summary> {
        return refused("already running");
      },
      [](run_atom, std::vector<covariance_actor>&)
        -> caf::result<sync_summary> { return refused("already running"); },
      [](rejoin_atom, int32_t) -> caf::result<resume_point> {
        return make_error(ec::unavailable,
                          "chief: the run has not started yet");
      },
      [](rollback_atom, int64_t, std::vector<ps_actor>&,
         std::vector<resume_point>&) -> caf::result<int64_t> {
        return refused("a rollback needs a paused run");
      },
      [=](rewire_atom, std::vector<covariance_actor>& cov,
          std::vector<inverse_actor>& inv) {
        auto& st = self->state;
        st.cfg.covariance = std::move(cov);
        st.inverses = std::move(inv);
      },
      [=](lost_atom, const std::string&) {
        self->state.supervisor
          = caf::actor_cast<caf::actor>(self->current_sender());
      },
      [=](checkpoint_atom, int64_t step) { checkpoint_grace_over(self, step); },
      [=](preempt_atom, int64_t step) { preempt_step_timed_out(self, step); },
      [=](status_atom) { return self->state.status(false); }),
    std::move(own)...);
}

/// The run request of the ready state: the steps start.
caf::result<sync_summary> run_from_ready(self_ptr self) {
  auto& st = self->state;
  st.run_promise = self->make_response_promise<sync_summary>();
  start(self);
  return st.run_promise;
}

/// A run request once the steps are over: a paused run that ended
/// (preempted) hands its summary to its supervisor's request, the one
/// asking now; any other is refused.
caf::result<sync_summary> run_when_over(self_ptr self, bool summary_sent) {
  auto& st = self->state;
  if (!st.pause)
    return refused("already running");
  st.run_promise = self->make_response_promise<sync_summary>();
  if (summary_sent)
    finish(self);
  return st.run_promise;
}

/// The handlers of finishing and done (`summary_sent`).
behavior over(self_ptr self, bool summary_sent) {
  on_worker_exit(
    self,
    // Once the run is over the workers' processes end, and their links
    // break: no loss, and the driver's log may be gone already.
    [](const caf::actor_addr&) {},
    // A worker of steps given up at a pause may fail with them.
    [=](const caf::error& reason) {
      if (!self->state.pause)
        ends_the_run(self)(reason);
    });
  return state_of(
    self,
    [=](token_atom, const worker_report& rep) -> caf::result<token_grant> {
      auto res = take_report(self, rep);
      if (!self->state.pause)
        grant_stops(self);
      return res;
    },
    [=](run_atom) { return run_when_over(self, summary_sent); },
    [=](run_atom, std::vector<covariance_actor>&) {
      return run_when_over(self, summary_sent);
    },
    [](rejoin_atom, int32_t) -> caf::result<resume_point> {
      return make_error(ec::unavailable, "chief: the run is over");
    },
    [=](lost_atom, const std::string& task) {
      auto& st = self->state;
      st.supervisor = caf::actor_cast<caf::actor>(self->current_sender());
      // The steps are over: only the last checkpoint may still wait for
      // the role.
      if (!st.pause)
        abandon_checkpoint(self, task);
    },
    [=](preempt_atom, const std::string& why) {
      note(self, "chief: " + why + " as well; the run is ending already");
    },
    [](preempt_atom, int64_t) {},
    [=](status_atom) { return self->state.status(true); });
}

} // namespace

behavior ready(self_ptr self) {
  on_worker_exit(
    self, [=](const caf::actor_addr& who) { lose_worker(self, who); },
    ends_the_run(self));
  return state_of(
    self, [=](run_atom) { return run_from_ready(self); },
    [=](run_atom, std::vector<covariance_actor>& cov) {
      self->state.cfg.covariance = std::move(cov);
      return run_from_ready(self);
    },
    // Before the first run request the chief's driver starts every
    // worker; after a rollback the steps go on with the next one.
    [=](rejoin_atom, int32_t worker) -> caf::result<resume_point> {
      auto& st = self->state;
      if (st.incarnation == 0)
        return make_error(ec::unavailable,
                          "chief: the run has not started yet");
      return hold_rejoin(self, worker,
                         "the run was rolled back to global step "
                           + std::to_string(st.global_step)
                           + " and had not gone on");
    },
    // Rolled back already, its steps not run since: a role lost while
    // that rollback was on its way gave its recovery attempt up, and the
    // next attempt rolls back again.
    [=](rollback_atom, int64_t step, std::vector<ps_actor>& shards,
        std::vector<resume_point>& points) -> caf::result<int64_t> {
      if (self->state.incarnation == 0)
        return refused("a rollback needs a paused run");
      return roll_back(self, step, std::move(shards), std::move(points));
    },
    [=](preempt_atom, const std::string& why) { preempt(self, why, false); });
}

behavior running(self_ptr self) {
  on_worker_exit(
    self,
    [=](const caf::actor_addr& who) {
      lose_worker(self, who);
      grant_tokens(self);
    },
    ends_the_run(self));
  return state_of(
    self,
    [=](token_atom, const worker_report& rep) -> caf::result<token_grant> {
      auto res = take_report(self, rep);
      grant_tokens(self);
      return res;
    },
    [=](rejoin_atom, int32_t worker) { return rejoin(self, worker); },
    [=](lost_atom, const std::string& task) {
      self->state.supervisor
        = caf::actor_cast<caf::actor>(self->current_sender());
      lose_task(self, task);
    },
    [=](preempt_atom, const std::string& why) { preempt(self, why, true); });
}

behavior paused(self_ptr self) {
  on_worker_exit(
    self, [=](const caf::actor_addr& who) { lose_worker(self, who); },
    // A worker rebound to another chief leaves this one normally; one of
    // the steps given up may fail with them.
    [](const caf::error&) {});
  auto end_or_refuse = [=]() -> caf::result<sync_summary> {
    if (self->state.preempted.empty())
      return refused("already running");
    return end_paused_run(self);
  };
  return state_of(
    self, [=](run_atom) { return end_or_refuse(); },
    [=](run_atom, std::vector<covariance_actor>&) { return end_or_refuse(); },
    // Answered where the steps go on, once the lost task is back.
    [=](rejoin_atom, int32_t worker) {
      return hold_rejoin(self, worker,
                         self->state.pause->lost_task + " was lost");
    },
    [=](rollback_atom, int64_t step, std::vector<ps_actor>& shards,
        std::vector<resume_point>& points) {
      return roll_back(self, step, std::move(shards), std::move(points));
    },
    [=](preempt_atom, const std::string& why) { preempt(self, why, false); });
}

behavior finishing(self_ptr self) {
  return over(self, false);
}

behavior done(self_ptr self) {
  return over(self, true);
}

} // namespace chief_parts

caf::error chief_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "chief: " + what);
  };
  if (auto why = first_below_least(
        {{"worker_replicas", worker_replicas, 1},
         {"replicas_to_aggregate", replicas_to_aggregate, 1},
         {"checkpoint_every", checkpoint_every, 0}});
      !why.empty())
    return bad(why);
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
  if (checkpointer && checkpoint_grace.count() <= 0)
    return bad("checkpoint_grace must be positive");
  if (!(clip_norm >= 0 && std::isfinite(clip_norm)))
    return bad("clip_norm must be >= 0 (0: no clipping), got "
               + std::to_string(clip_norm));
  return caf::none;
}

namespace {

chief_actor::behavior_type chief(chief_parts::self_ptr self,
                                 chief_config cfg) {
  end_program_on_exception(self, "chief");
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.global_step = st.cfg.start_step;
  st.updates.start_at(st.cfg.start_step);
  auto workers = static_cast<size_t>(st.cfg.worker_replicas);
  st.positions = worker_positions{workers};
  st.workers.resize(workers);
  return chief_parts::ready(self);
}

} // namespace

caf::expected<chief_actor> spawn_chief(caf::actor_system& sys,
                                       chief_config cfg) {
  if (auto err = cfg.validate())
    return err;
  return sys.spawn(chief, std::move(cfg));
}

} // namespace syncfac
