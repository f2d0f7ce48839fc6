// The chief supervisor while the steps run and while a lost role is brought
// back (actors/chief_supervisor_parts.hpp). What a loss means and what
// comes next is the recovery plan's (runtime/cluster/recovery_plan.hpp);
// this file carries its commands out and hands it their answers, each
// through the attempt that asked (actors/recovery_attempt.hpp), so an
// answer of an attempt given up reaches nothing.

#include <algorithm>

#include "actors/chief_supervisor_parts.hpp"
#include "actors/role_names.hpp"
#include "runtime/comma_list.hpp"
#include "runtime/json.hpp"

namespace syncfac::chief_supervision {

namespace cmd = recovery_command;
namespace ev = recovery_event;

namespace {

behavior pausing(self_ptr self);
behavior recovering(self_ptr self);
behavior ending_preempted(self_ptr self);

bool is_peer_lost(const caf::error& err) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(ec::peer_lost);
}

/// A role whose loss pauses the steps went away (or did not answer a
/// probe): its host is forgotten and the plan told.
void role_lost(self_ptr self, const node_loss& loss) {
  if (loss.kind != node_loss::hosted_role)
    return;
  forget_host_of(self, loss.name);
  feed(self, ev::role_lost{loss.name, loss.reason});
}

/// The attempt `number` of the plan: the one under way, or a new one that
/// replaces it (whose answers then reach nothing).
std::shared_ptr<recovery_attempt> attempt_of(self_ptr self, uint64_t number) {
  auto& st = self->state;
  if (!st.attempt || st.attempt->number != number)
    st.attempt = std::make_shared<recovery_attempt>(number);
  return st.attempt;
}

still_wanted wanted_by(const std::shared_ptr<recovery_attempt>& a) {
  return [w = std::weak_ptr<recovery_attempt>{a}] { return !w.expired(); };
}

// -- running ------------------------------------------------------------------

/// Sends the chief's run request; its answer ends the run or, with
/// ec::peer_lost (the steps paused for a lost role), is the plan's.
void request_run(self_ptr self) {
  auto& st = self->state;
  self->request(st.run.chief, st.run.run_timeout, run_atom::value,
                st.roles.covariance)
    .then(
      [=](sync_summary& s) {
        end_run(self, std::move(self->state.refusal_ends_run), std::move(s));
      },
      [=](caf::error& err) {
        if (is_peer_lost(err))
          return feed(self, ev::chief_paused{err});
        feed(self, ev::chief_lost{make_error(
                     err == caf::sec::request_timeout ? ec::timeout
                                                      : ec::peer_down,
                     "training run: " + render(err))});
      });
}

/// Asks each of the K-FAC roles for its status; one that does not answer
/// within probe_timeout is lost like one whose process went away.
template <class Status, class Handle>
void probe_each(self_ptr self, const std::vector<Handle>& roles,
                const std::string& job, uint64_t round) {
  auto timeout = self->state.cfg.probe_timeout;
  for (size_t i = 0; i < roles.size(); ++i) {
    auto role = roles[i];
    auto name = job + ":" + std::to_string(i);
    self->request(role, timeout, status_atom::value)
      .then([](const Status&) {},
            [=](caf::error& err) {
              // A probe of an earlier round, or of a role replaced since,
              // says nothing of the one there now.
              if (self->state.probe_round != round)
                return;
              self->send(me_of(self), lost_atom::value,
                         node_loss{node_loss::hosted_role, name,
                                   "no answer to a liveness probe within "
                                     + ms(timeout) + ": " + render(err)});
            });
  }
}

void probe(self_ptr self, uint64_t round) {
  auto& st = self->state;
  if (round != st.probe_round)
    return;
  probe_each<covariance_status>(self, st.roles.covariance, "covariance",
                                round);
  probe_each<inverse_status>(self, st.roles.inverses, "inverse", round);
  self->delayed_send(me_of(self), st.cfg.probe_timeout / 2,
                     probe_atom::value, round);
}

// -- pausing ------------------------------------------------------------------

/// The chief was told to pause: its run request fails with ec::peer_lost
/// once the checkpoints begun are settled (request_run), or answers the
/// summary when the run ended meanwhile. More losses join the recovery.
behavior pausing(self_ptr self) {
  ++self->state.probe_round; // no probes while paused
  return state_of(self, [=](lost_atom, const node_loss& loss) {
    role_lost(self, loss);
  });
}

// -- recovering ---------------------------------------------------------------

/// Whether the recovery waits for `t` to come back.
bool awaited_back(const chief_supervisor_state& st, const std::string& t) {
  const auto& hosts = st.plan->hosts();
  return std::any_of(hosts.begin(), hosts.end(), [&](const awaited_host& h) {
    return h.task == t && !h.back;
  });
}

/// Connects to `task` again for attempt `a`: one connector request at a
/// time, each bounded by connect_attempt, asked again at once after a
/// failed one, while the attempt is under way.
void reconnect(self_ptr self, const std::string& task,
               const std::shared_ptr<recovery_attempt>& a) {
  auto& st = self->state;
  auto i = st.connectors.find(task);
  if (i == st.connectors.end()) {
    i = st.connectors.emplace(task, st.cfg.connector(task)).first;
    st.to_stop->push_back(caf::actor_cast<caf::actor>(i->second));
  }
  std::weak_ptr<recovery_attempt> w = a;
  self->request(i->second, st.cfg.connect_attempt, connect_atom::value, task)
    .then(while_current<node_info&>(a,
                                    [=](node_info& info) {
                                      auto n = node_of(info);
                                      watch_node(self, task, n,
                                                 std::move(info));
                                      self->send(me_of(self),
                                                 deadline_atom::value,
                                                 uint64_t{0});
                                    }),
          [=](caf::error&) {
            if (auto held = w.lock())
              reconnect(self, task, held);
          });
}

/// The hosts awaited that are known again (a connector's answer, or the
/// roles of a hello) are back.
void check_hosts(self_ptr self) {
  auto& st = self->state;
  std::vector<std::string> back;
  for (const auto& h : st.plan->hosts())
    if (!h.back && st.watch->knows(h.task))
      back.push_back(h.task);
  for (const auto& task : back)
    feed(self, ev::host_back{task});
}

/// Every role answers a status request, or is silent (lost too: its host
/// is forgotten, and the plan awaits it).
void probe_roles(self_ptr self, const std::shared_ptr<recovery_attempt>& a) {
  auto& st = self->state;
  auto number = a->number;
  auto roles = st.resolve();
  if (!roles)
    return feed(self, ev::step_failed{number, with_context(roles.error(),
                                                           "after the "
                                                           "recovery")});
  st.roles = std::move(*roles);
  auto timeout = st.cfg.probe_timeout.count() > 0 ? st.cfg.probe_timeout
                                                  : st.cfg.request_timeout;
  struct tally {
    size_t pending = 0;
    std::vector<std::string> silent;
  };
  auto t = std::make_shared<tally>();
  const auto& r = st.roles;
  t->pending = r.shards.size() + r.covariance.size() + r.inverses.size();
  if (t->pending == 0)
    return feed(self, ev::probed{number, {}});
  auto one_done = [=] {
    if (--t->pending > 0)
      return;
    for (const auto& name : t->silent)
      forget_host_of(self, name);
    feed(self, ev::probed{number, t->silent});
  };
  auto ask = [&](const auto& handles, const std::string& job, auto status) {
    using status_type = decltype(status);
    for (size_t i = 0; i < handles.size(); ++i) {
      auto name = job + ":" + std::to_string(i);
      self->request(handles[i], timeout, status_atom::value)
        .then(while_current<const status_type&>(
                a, [=](const status_type&) { one_done(); }),
              while_current<caf::error&>(a, [=](caf::error&) {
                t->silent.push_back(name);
                one_done();
              }));
    }
  };
  ask(r.shards, "ps", shard_status{});
  ask(r.covariance, "covariance", covariance_status{});
  ask(r.inverses, "inverse", inverse_status{});
}

/// How a lost K-FAC role came back, for the log.
std::string back_how(const run_roles& before, const run_roles& now,
                     const std::shared_ptr<const restored_run>& factors_from) {
  if (before.covariance == now.covariance && before.inverses == now.inverses)
    return " (the same actors: the task was frozen and thawed, its state "
           "kept)";
  if (factors_from)
    return " (factors of a new covariance actor from " + factors_from->path
           + ")";
  return {};
}

// -- the plan's commands ------------------------------------------------------

void carry_out(self_ptr self, const cmd::say& c) {
  self->state.log(c.line);
}

void carry_out(self_ptr self, const cmd::pause_chief& c) {
  auto& st = self->state;
  st.before = st.roles;
  self->send(st.run.chief, lost_atom::value, c.role);
  self->become(pausing(self));
}

void carry_out(self_ptr self, const cmd::find_checkpoint& c) {
  auto& st = self->state;
  attempt_of(self, c.attempt);
  self->become(recovering(self));
  if (!st.run.newest_checkpoint)
    return feed(self, ev::checkpoint_found{c.attempt, nullptr});
  auto latest = st.run.newest_checkpoint();
  if (!latest)
    return feed(self, ev::step_failed{c.attempt, latest.error()});
  feed(self, ev::checkpoint_found{c.attempt, *latest});
}

void carry_out(self_ptr self, const cmd::await_hosts& c) {
  auto& st = self->state;
  auto a = attempt_of(self, c.attempt);
  self->become(recovering(self));
  a->wait = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.cfg.max_wait, deadline_atom::value,
                     a->wait);
  for (const auto& h : c.hosts)
    // A task that connects to the chief itself says hello again.
    if (!st.cfg.passive.count(h.task))
      reconnect(self, h.task, a);
  // Hosts whose roles came meanwhile (a hello while pausing).
  self->send(me_of(self), deadline_atom::value, uint64_t{0});
}

void carry_out(self_ptr self, const cmd::probe_roles& c) {
  probe_roles(self, attempt_of(self, c.attempt));
}

void carry_out(self_ptr self, const cmd::ask_chief_step& c) {
  auto a = attempt_of(self, c.attempt);
  auto number = c.attempt;
  self->request(self->state.run.chief, self->state.cfg.request_timeout,
                status_atom::value)
    .then(while_current<chief_status&>(
            a,
            [=](chief_status& cs) {
              feed(self, ev::chief_step{number, cs.global_step});
            }),
          while_current<caf::error&>(a, [=](caf::error& err) {
            feed(self, ev::chief_lost{
                         with_context(err, "status of the paused chief")});
          }));
}

void carry_out(self_ptr self, const cmd::restore_shards& c) {
  auto a = attempt_of(self, c.attempt);
  auto number = c.attempt;
  restore_shards(self, c.from, wanted_by(a),
                 while_current<caf::error>(a, [=](caf::error err) {
                   if (err)
                     return feed(self, ev::step_failed{number, std::move(err)});
                   feed(self, ev::shards_restored{number});
                 }));
}

void carry_out(self_ptr self, const cmd::restore_covariance& c) {
  auto& st = self->state;
  auto a = attempt_of(self, c.attempt);
  auto number = c.attempt;
  // All of them back to the checkpoint after a rollback, a new one from
  // it (or from nothing, before the first checkpoint).
  std::vector<size_t> which;
  for (size_t i = 0; i < st.roles.covariance.size(); ++i) {
    bool is_new = i >= st.before.covariance.size()
                  || st.before.covariance[i] != st.roles.covariance[i];
    if (c.from && (c.every || is_new))
      which.push_back(i);
  }
  a->new_factors = !which.empty();
  restore_covariance(self, std::move(which), c.from, wanted_by(a),
                     while_current<caf::error>(a, [=](caf::error err) {
                       if (err)
                         return feed(self,
                                     ev::step_failed{number, std::move(err)});
                       feed(self, ev::covariance_restored{number});
                     }));
}

void carry_out(self_ptr self, const cmd::roll_back_chief& c) {
  auto& st = self->state;
  auto a = attempt_of(self, c.attempt);
  auto number = c.attempt;
  for (auto& inv : st.roles.inverses)
    self->send(inv, rewire_atom::value, st.roles.shards);
  for (auto& cov : st.roles.covariance)
    self->send(cov, rewire_atom::value, st.roles.inverses);
  // With a rollback to a checkpoint: a worker whose link went down with the
  // loss misses its rebind and rejoins instead; it resumes at its data
  // position in the checkpoint, not at its own.
  std::vector<resume_point> points;
  if (c.rolls_back && c.from) {
    auto n = static_cast<int32_t>(st.roles.workers.size());
    for (int32_t i = 0; i < n; ++i)
      points.push_back(resume_of(*c.from, i, n));
  }
  self->request(st.run.chief, st.cfg.request_timeout, rollback_atom::value,
                c.step, st.roles.shards, std::move(points))
    .then(while_current<int64_t>(a,
                                 [=](int64_t incarnation) {
                                   feed(self, ev::chief_rolled_back{
                                                number, incarnation});
                                 }),
          while_current<caf::error&>(a, [=](caf::error& err) {
            feed(self,
                 ev::chief_lost{with_context(err, "rollback of the chief")});
          }));
}

void carry_out(self_ptr self, const cmd::go_on& c) {
  auto& st = self->state;
  bool new_factors = st.attempt && st.attempt->new_factors;
  st.attempt.reset();
  self->send(st.run.chief, rewire_atom::value, st.roles.covariance,
             st.roles.inverses);
  if (st.run.evaluator)
    self->send(st.run.evaluator, rewire_atom::value, st.roles.shards);
  auto lost_text = comma_joined(c.lost);
  json_object fields;
  fields.add("step", c.step)
    .add("shards_lost", st.plan->shards_lost())
    .add("kfac_roles_lost", st.plan->kfac_roles_lost())
    .add("rolled_back_steps", st.plan->rolled_back_steps());
  auto text
    = c.rolled_back
        ? "chief: " + lost_text + " is back; the run rolls back to global "
            "step " + std::to_string(c.step) + " (" + c.from->path + "), "
            + std::to_string(c.paused_step - c.step) + " step(s) to do again"
        : "chief: " + lost_text + " is back; the run goes on from there"
            + back_how(st.before, st.roles, new_factors ? c.from : nullptr);
  if (st.run.out) {
    st.run.out->record(text, fields);
    if (c.rolled_back)
      st.run.out->restart_at(c.step);
  } else {
    st.log(text);
  }
  // The workers as the nodes say now: a worker's node that connected
  // again since the hosts were back has a new proxy.
  if (auto now = st.resolve()) {
    st.roles.workers = now->workers;
    st.roles.stats_workers = now->stats_workers;
  }
  if (c.rolled_back) {
    st.run.restored = c.from;
    st.run.kept_step = -1;
    rebind_workers(self, c.incarnation, -1);
  } else {
    rebind_workers(self, c.incarnation, c.step);
  }
  watch_roles(self);
  self->become(running(self));
}

void carry_out(self_ptr self, const cmd::end_where_it_stands&) {
  self->state.attempt.reset();
  self->become(ending_preempted(self));
}

void carry_out(self_ptr self, const cmd::end_run& c) {
  self->state.attempt.reset();
  end_run(self, c.error);
}

// -- the behaviours of a recovery ---------------------------------------------

/// The plan's commands are carried out; losses, a preemption and the
/// wait's deadline are the plan's, as is each host found back.
behavior recovering(self_ptr self) {
  return state_of(
    self,
    [=](hello_atom, const std::string& peer, const std::string& why) {
      refused(self, peer, why, awaited_back(self->state, peer));
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      cannot_join(self, peer, why, awaited_back(self->state, peer));
    },
    [=](lost_atom, const node_loss& loss) { role_lost(self, loss); },
    [=](deadline_atom, uint64_t wait) {
      auto& st = self->state;
      if (wait == 0)
        return check_hosts(self);
      if (st.attempt && st.attempt->wait == wait)
        feed(self, ev::wait_expired{st.attempt->number});
    });
}

/// Preempted while the steps are paused for a lost role: the run ends
/// where it stands instead of waiting --max_wait_ms for the role; the chief
/// checkpoints the newest applied step when every shard is there, and the
/// node exits preempted.
behavior ending_preempted(self_ptr self) {
  auto& st = self->state;
  self->request(st.run.chief, st.run.run_timeout, run_atom::value,
                st.roles.covariance)
    .then([=](sync_summary& s) { end_run(self, caf::none, std::move(s)); },
          [=](caf::error& err) {
            end_run(self, with_context(err, "ending the preempted run"));
          });
  return state_of(self, [](lost_atom, const node_loss&) {},
                  [](preempt_atom, const std::string&) {});
}

} // namespace

recovery_layout layout_of(const chief_supervisor_state& st) {
  recovery_layout l;
  l.me = st.cfg.me;
  const auto& p = st.cfg.placement;
  for (const auto* places : {&p.shards, &p.covariance, &p.inverses})
    for (const auto& x : *places)
      l.hosts[x.role] = x.host;
  l.addresses = st.cfg.addresses;
  l.passive = st.cfg.passive;
  l.has_connector = static_cast<bool>(st.cfg.connector);
  l.writes_checkpoints = st.run.writes_checkpoints;
  l.max_wait = st.cfg.max_wait;
  return l;
}

void feed(self_ptr self, recovery_input in) {
  auto& st = self->state;
  // The event taken now stays first in the queue until its commands are
  // carried out: an event one of them answers at once (the checkpoint's
  // lookup) waits its turn behind it.
  st.plan_events.push_back(std::move(in));
  if (st.plan_events.size() > 1)
    return;
  while (!st.plan_events.empty()) {
    for (const auto& order : st.plan->on(st.plan_events.front()))
      std::visit([&](const auto& c) { carry_out(self, c); }, order);
    st.plan_events.pop_front();
  }
}

behavior running(self_ptr self) {
  auto& st = self->state;
  st.watch->begin_wait(); // the waits of the states before are over
  auto round = ++st.probe_round;
  if (st.cfg.probe_timeout.count() > 0 && !st.cfg.placement.empty())
    self->send(me_of(self), probe_atom::value, round);
  request_run(self);
  return state_of(
    self,
    [=](lost_atom, const node_loss& loss) {
      if (loss.kind == node_loss::hosted_role)
        role_lost(self, loss);
      else
        self->state.log(self->state.cfg.me + ": " + loss.name
                        + "'s node went down (" + loss.reason + ")");
    },
    [=](probe_atom, uint64_t r) { probe(self, r); },
    [=](hello_atom, const std::string& peer, const std::string& why) {
      refused(self, peer, why, false, refusal_end::after_the_step);
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      cannot_join(self, peer, why, false, refusal_end::after_the_step);
    });
}

} // namespace syncfac::chief_supervision
