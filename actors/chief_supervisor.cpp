// The chief's node supervisor (actors/chief_supervisor.hpp): connecting,
// awaiting and starting, the handlers every state shares and the end. The
// states of the run and of a recovery are in actors/chief_recovery.cpp,
// the restores in actors/chief_restore.cpp.

#include "actors/chief_supervisor.hpp"

#include <algorithm>

#include <caf/send.hpp>

#include "actors/chief_supervisor_parts.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace chief_supervision {

namespace {

behavior awaiting(self_ptr self);
behavior starting(self_ptr self);
void start_run(self_ptr self);

/// Forgets the K-FAC roles of `lost` that are not back (their handles
/// become null): the end of the run asks every role for its counters, and
/// a request to a role that is gone fails only by its timeout.
void forget_lost_kfac_roles(run_roles& roles,
                            const std::vector<std::string>& lost) {
  for (const auto& name : lost) {
    auto t = task_id::parse(name);
    if (!t || t->index < 0)
      continue;
    auto i = static_cast<size_t>(t->index);
    if (t->job == "covariance" && i < roles.covariance.size())
      roles.covariance[i] = nullptr;
    else if (t->job == "inverse" && i < roles.inverses.size())
      roles.inverses[i] = nullptr;
  }
}

} // namespace

void end_run(self_ptr self, caf::error err, sync_summary summary) {
  auto& st = self->state;
  chief_run_end end;
  end.error = std::move(err);
  end.summary = std::move(summary);
  end.roles = st.roles;
  // Workers that restarted meanwhile, as their nodes answer now.
  if (!st.cfg.placement.empty() && st.watch)
    if (auto now = st.resolve())
      end.roles = std::move(*now);
  if (st.watch)
    end.nodes = st.watch->nodes();
  end.hellos = st.hellos;
  end.restored = st.run.restored;
  if (st.plan) {
    // Roles still lost when the run ends are not there to ask.
    forget_lost_kfac_roles(end.roles, st.plan->lost());
    end.shards_lost = st.plan->shards_lost();
    end.kfac_roles_lost = st.plan->kfac_roles_lost();
    end.rolled_back_steps = st.plan->rolled_back_steps();
  }
  if (st.done.pending())
    st.done.deliver(std::move(end));
  self->quit();
}

void watch_node(self_ptr self, const std::string& task, const caf::actor& n,
                std::optional<node_info> info) {
  if (auto m = self->state.watch->connected(task, n, std::move(info)))
    self->monitor(m);
}

/// Monitors the roles whose loss pauses the steps: the PS shards and the
/// K-FAC roles (a worker's loss is the chief's, by its link: its token
/// goes back to the queue).
void watch_roles(self_ptr self) {
  auto& st = self->state;
  auto add = [&](const auto& handles, const std::string& job) {
    for (size_t i = 0; i < handles.size(); ++i)
      if (handles[i]) {
        st.watch->host(job + ":" + std::to_string(i), handles[i].address());
        self->monitor(handles[i]);
      }
  };
  add(st.roles.shards, "ps");
  add(st.roles.covariance, "covariance");
  add(st.roles.inverses, "inverse");
}

namespace {

/// Whether `info` of `task` lacks a role the placement puts there: a
/// worker task says hello before its workers exist, and one that hosts
/// several (--workers_per_task) may answer between two of them. Without a
/// placement: whether it names no role but its node.
bool roles_missing(const chief_supervisor_state& st, const std::string& task,
                   const node_info& info) {
  if (info.role_names.size() <= 1) // only "node"
    return true;
  const auto& p = st.cfg.placement;
  for (const auto* places : {&p.shards, &p.workers, &p.stats_workers,
                             &p.covariance, &p.inverses})
    for (const auto& x : *places)
      if (x.host == task
          && std::find(info.role_names.begin(), info.role_names.end(),
                       x.role)
               == info.role_names.end())
        return true;
  return false;
}

/// A node that said hello is asked for its roles over the connection it
/// opened; a node that has not published them all yet (roles_missing) is
/// asked again after hello_retry.
void ask_roles(self_ptr self, const std::string& task, const caf::actor& n) {
  auto& st = self->state;
  self->request(caf::actor_cast<node_actor>(n), st.cfg.request_timeout,
                hello_atom::value, *st.cfg.hello)
    .then(
      [=](node_info& info) {
        auto& st = self->state;
        auto i = st.hellos.find(task);
        if (i == st.hellos.end() || i->second != n)
          return; // a newer hello of the task is asked already
        if (roles_missing(st, task, info)) {
          self->delayed_send(me_of(self), st.cfg.hello_retry,
                             hello_atom::value, task, n);
          return;
        }
        st.absent.erase(task);
        watch_node(self, task, n, std::move(info));
        // The behaviour may be waiting for it.
        self->send(me_of(self), deadline_atom::value, uint64_t{0});
      },
      [=](caf::error& err) {
        self->state.log(self->state.cfg.me + ": " + task
                        + " said hello but did not answer: " + render(err));
      });
}

} // namespace

void heard(self_ptr self, const std::string& task, const caf::actor& n) {
  auto& st = self->state;
  if (task == st.cfg.me || !n)
    return;
  st.refusals.erase(task);
  st.hellos[task] = n;
  ask_roles(self, task, n);
}

namespace {

/// Whether a refusal of `peer` ends the run in every state. An evaluator
/// joins on its own: the run neither awaits it nor notices its loss, so
/// its refusal would otherwise only be logged while the run trains on
/// without the evaluation it was configured with.
bool refusal_always_ends_run(const std::string& peer) {
  auto t = task_id::parse(peer);
  return t && t->job == "evaluator";
}

/// Keeps `refusal` of `peer`; a fatal one (or one of a task whose refusal
/// always ends the run) ends the run with its text as `how` says, any
/// other is logged.
void keep_refusal(self_ptr self, const std::string& peer, task_refusal refusal,
                  bool fatal, refusal_end how = refusal_end::at_once) {
  auto& st = self->state;
  auto text = refusal.text;
  st.refusals[peer] = std::move(refusal);
  if (!fatal && !refusal_always_ends_run(peer)) {
    st.log(st.cfg.me + ": " + text);
    return;
  }
  if (how == refusal_end::at_once)
    return end_run(self, make_error(ec::invalid_config, text));
  if (st.refusal_ends_run) {
    st.log(st.cfg.me + ": " + text + " (the run is ending already)");
    return;
  }
  st.log(st.cfg.me + ": " + text + "; the run ends after the global step "
         "in flight");
  st.refusal_ends_run = make_error(ec::invalid_config, text);
  self->send(st.run.chief, preempt_atom::value, "the refusal of " + peer);
}

} // namespace

void refused(self_ptr self, const std::string& peer, const std::string& why,
             bool fatal, refusal_end how) {
  keep_refusal(self, peer,
               task_refusal{"refused " + peer + " at connect: " + why, false},
               fatal, how);
}

void cannot_join(self_ptr self, const std::string& peer,
                 const std::string& why, bool fatal, refusal_end how) {
  keep_refusal(self, peer,
               task_refusal{peer + " cannot join the run: " + why, true},
               fatal, how);
}

namespace {

bool awaited_here(const chief_supervisor_state& st, const std::string& t) {
  return std::find(st.run.awaited.begin(), st.run.awaited.end(), t)
         != st.run.awaited.end();
}

std::string missing_of(const chief_supervisor_state& st) {
  std::string out;
  for (const auto& t : st.run.awaited)
    if (!st.watch->knows(t))
      out += (out.empty() ? "" : ", ") + st.where(t);
  return out;
}

bool gradient_worker(const chief_supervisor_state& st, const std::string& t) {
  for (const auto& p : st.cfg.placement.workers)
    if (p.host == t)
      return true;
  return false;
}

/// The task hosting role `role`.
std::optional<std::string> host_of(const chief_supervisor_state& st,
                                   const std::string& role) {
  const auto& p = st.cfg.placement;
  for (const auto* places : {&p.shards, &p.covariance, &p.inverses})
    for (const auto& x : *places)
      if (x.role == role)
        return x.host;
  return std::nullopt;
}

} // namespace

void forget_host_of(self_ptr self, const std::string& role) {
  auto& st = self->state;
  auto host = host_of(st, role);
  if (!host || *host == st.cfg.me)
    return;
  caf::actor old;
  if (auto i = st.watch->nodes().find(*host); i != st.watch->nodes().end())
    old = node_of(i->second);
  st.watch->forget(*host);
  // Restarted already: its hello came before the old node's down message.
  if (auto h = st.hellos.find(*host); h != st.hellos.end() && h->second != old)
    ask_roles(self, *host, h->second);
}

namespace {

/// A node's loss before the run is under way (`when`: "before the
/// start", "during the start") is only logged.
void loss_before_the_run(self_ptr self, const node_loss& loss,
                         const char* when) {
  if (loss.kind == node_loss::peer_node)
    self->state.log(self->state.cfg.me + ": " + loss.name + "'s node went down "
                    + when + " (" + loss.reason + ")");
}

// -- connecting ---------------------------------------------------------------

behavior connecting(self_ptr self) {
  return state_of(
    self, [=](run_atom, chief_run& run) -> caf::result<chief_run_end> {
      auto& st = self->state;
      st.done = self->make_response_promise<chief_run_end>();
      st.run = std::move(run);
      for (auto& [task, info] : st.run.nodes)
        watch_node(self, task, node_of(info), info);
      self->become(awaiting(self));
      return st.done;
    });
}

// -- awaiting -----------------------------------------------------------------

/// Every awaited task is here (or left out): on to the start.
void all_here(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.placement.empty()) {
    st.roles = st.run.roles;
  } else {
    auto roles = st.resolve();
    if (!roles)
      return end_run(self, roles.error());
    st.roles = std::move(*roles);
  }
  if (st.run.on_connected)
    if (auto err = st.run.on_connected())
      return end_run(self, std::move(err));
  // Out of awaiting at once: the start is a chain of requests, and a
  // hello answered meanwhile (two workers back together) must not start
  // the run a second time.
  self->become(starting(self));
  start_run(self);
}

/// The start's requests are out (the checkpoint's factors, then the
/// workers' start); their chain goes on to running. Hellos are kept; a
/// loss here is only logged, as while awaiting (the run has not started).
behavior starting(self_ptr self) {
  return state_of(
    self,
    [=](lost_atom, const node_loss& loss) {
      loss_before_the_run(self, loss, "during the start");
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      cannot_join(self, peer, why, true);
    });
}

behavior awaiting(self_ptr self) {
  auto& st = self->state;
  auto id = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.run.await_wait, deadline_atom::value,
                     id);
  auto started = self->clock().now();
  auto check = [=] {
    auto& st = self->state;
    if (missing_of(st).empty())
      all_here(self);
  };
  // Tasks that said hello before the run was handed over.
  self->send(me_of(self), deadline_atom::value, uint64_t{0});
  return state_of(
    self,
    [=](hello_atom, const std::string& peer, const std::string& why) {
      // The node refused a task configured for another run: the run
      // cannot start when it is one awaited.
      refused(self, peer, why, awaited_here(self->state, peer));
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      // Whichever task it is: the run cannot go on without it.
      cannot_join(self, peer, why, true);
    },
    [=](lost_atom, const node_loss& loss) {
      loss_before_the_run(self, loss, "before the start");
    },
    [=](deadline_atom, uint64_t wait) {
      auto& st = self->state;
      if (wait == 0) {
        // A task the run awaits was refused before the run came, or a
        // task said it cannot join: its refusal ends the run now, naming
        // what differed.
        for (const auto& [t, r] : st.refusals)
          if (r.own || awaited_here(st, t))
            return end_run(self, make_error(ec::invalid_config, r.text));
        check();
        return;
      }
      if (wait != id)
        return;
      auto secs = std::chrono::duration_cast<std::chrono::seconds>(
                    self->clock().now() - started)
                    .count();
      auto missing = missing_of(st);
      bool only_workers = true;
      for (const auto& t : st.run.awaited)
        if (!st.watch->knows(t) && !gradient_worker(st, t))
          only_workers = false;
      if (st.run.partial && only_workers) {
        st.log(st.cfg.me + ": going on without " + missing + " (not back after "
               + std::to_string(secs) + " s; each may rejoin when it is)");
        for (const auto& t : st.run.awaited)
          if (!st.watch->knows(t))
            st.absent.insert(t);
        all_here(self);
        return;
      }
      end_run(self, make_error(ec::timeout,
                               "tasks that never connected after "
                                 + std::to_string(secs) + " s: " + missing));
    });
}

// -- starting -----------------------------------------------------------------

/// The covariance actors take the checkpoint's factors, the chief its
/// K-FAC roles, the workers their start; then the run request goes out.
void start_run(self_ptr self) {
  auto& st = self->state;
  std::vector<size_t> all(st.roles.covariance.size());
  for (size_t c = 0; c < all.size(); ++c)
    all[c] = c;
  auto from = st.run.restored ? st.run.restored : st.run.factors_from;
  restore_covariance(self, all, from, [] { return true; },
                     [=](caf::error err) {
                       auto& st = self->state;
                       if (err)
                         return end_run(self, std::move(err));
                       self->send(st.run.chief, rewire_atom::value,
                                  st.roles.covariance, st.roles.inverses);
                       watch_roles(self);
                       start_workers(self);
                       // From here on a loss is the recovery plan's.
                       st.plan.emplace(layout_of(st));
                       self->become(running(self));
                     });
}

} // namespace

} // namespace chief_supervision

using namespace chief_supervision;

caf::expected<run_roles> chief_supervisor_state::resolve() const {
  run_roles out;
  auto find = [&](const role_place& p, auto& into, bool may_be_absent) {
    using handle = typename std::decay_t<decltype(into)>::value_type;
    if (p.host == cfg.me) {
      auto i = run.hosted.find(p.role);
      if (i == run.hosted.end())
        return make_error(ec::internal, cfg.me + " does not host " + p.role);
      into.push_back(caf::actor_cast<handle>(i->second));
      return caf::error{};
    }
    if (may_be_absent && absent.count(p.host) > 0
        && !watch->knows(p.host)) {
      into.emplace_back(); // not back: skipped until it rejoins
      return caf::error{};
    }
    auto h = watch->role<handle>(p.host, p.role);
    if (!h)
      return h.error();
    into.push_back(*h);
    return caf::error{};
  };
  // Workers may be absent (a restarted chief went on without them); the
  // other roles may not.
  auto find_all = [&](const std::vector<role_place>& places, auto& into,
                      bool may_be_absent) {
    for (const auto& p : places)
      if (auto err = find(p, into, may_be_absent))
        return err;
    return caf::error{};
  };
  const auto& pl = cfg.placement;
  for (auto err : {find_all(pl.shards, out.shards, false),
                   find_all(pl.workers, out.workers, true),
                   find_all(pl.stats_workers, out.stats_workers, true),
                   find_all(pl.covariance, out.covariance, false),
                   find_all(pl.inverses, out.inverses, false)})
    if (err)
      return err;
  return out;
}

std::string chief_supervisor_state::where(const std::string& task) const {
  auto i = cfg.addresses.find(task);
  return i == cfg.addresses.end() ? task : task + " at " + i->second;
}

caf::error check_all_restored(const restored_run& run, size_t restored) {
  if (restored == run.variables.size())
    return caf::none;
  return make_error(ec::unknown_name,
                    "checkpoint " + run.path + " holds "
                      + std::to_string(run.variables.size())
                      + " variables, the model "
                      + std::to_string(restored)
                      + " (it was written for another model)");
}

chief_supervisor_actor::behavior_type
chief_supervisor(self_ptr self, chief_supervisor_config cfg) {
  auto& st = self->state;
  st.watch.emplace(cfg.me, std::vector<std::string>{});
  st.cfg = std::move(cfg);
  self->attach_functor([stop = st.to_stop] {
    for (const auto& c : *stop)
      caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
  });
  // A worker answers the start sent to it (a message, not a request) when
  // its run ends, and a worker that failed answers with its error. CAF's
  // default handler of an error message quits with it: this actor would
  // then die with the worker's reason and the driver's run request would
  // wait out its whole bound (a diverged run hung for minutes). The
  // failure ends the run anyway, through the worker's link to the chief,
  // whose run request then fails with it.
  self->set_error_handler([=](caf::error& err) {
    self->state.log("chief supervisor: a role's run ended with an error: "
                    + render(err));
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto why = self->system().render(dm.reason);
    if (auto loss = self->state.watch->went_down(dm.source, why))
      self->send(me_of(self), lost_atom::value, std::move(*loss));
  });
  return connecting(self);
}

caf::expected<chief_supervisor_actor>
spawn_chief_supervisor(caf::actor_system& sys, chief_supervisor_config cfg) {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "chief supervisor: " + what);
  };
  if (cfg.me.empty())
    return bad("needs its own task (me)");
  if (cfg.max_wait.count() <= 0)
    return bad("max_wait " + ms(cfg.max_wait) + " must be positive");
  if (cfg.request_timeout.count() <= 0)
    return bad("request_timeout " + ms(cfg.request_timeout)
               + " must be positive");
  if (cfg.probe_timeout.count() < 0)
    return bad("probe_timeout must be >= 0 (0: no probe), got "
               + ms(cfg.probe_timeout));
  if (!cfg.placement.empty() && !cfg.hello)
    return bad("a placement of roles on other tasks needs this node's hello");
  if (cfg.connect_attempt.count() <= 0 || cfg.hello_retry.count() <= 0)
    return bad("connect_attempt and hello_retry must be positive");
  for (const auto* places :
       {&cfg.placement.workers, &cfg.placement.stats_workers,
        &cfg.placement.covariance, &cfg.placement.inverses})
    if (!places->empty() && cfg.placement.shards.empty())
      return bad("a placement of roles needs the PS shards' too");
  return sys.spawn(chief_supervisor, std::move(cfg));
}

} // namespace syncfac
