#include "actors/chief_supervisor.hpp"

#include <algorithm>

#include <caf/send.hpp>

#include "actors/role_names.hpp"
#include "actors/with_defaults.hpp"
#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"
#include "runtime/json.hpp"

namespace syncfac {

namespace {

using self_ptr
  = chief_supervisor_actor::stateful_pointer<chief_supervisor_state>;
using behavior = chief_supervisor_actor::behavior_type;

behavior awaiting(self_ptr self);
behavior starting(self_ptr self);
behavior running(self_ptr self);
behavior pausing(self_ptr self);
behavior recovering(self_ptr self);
behavior restoring(self_ptr self);
void start_run(self_ptr self);
void restore(self_ptr self);

chief_supervisor_actor me_of(self_ptr self) {
  return caf::actor_cast<chief_supervisor_actor>(self);
}

bool is_peer_lost(const caf::error& err) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(ec::peer_lost);
}

std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

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

/// Answers the driver and stops.
void end_run(self_ptr self, caf::error err, sync_summary summary = {}) {
  auto& st = self->state;
  chief_run_end end;
  end.error = std::move(err);
  end.summary = std::move(summary);
  end.roles = st.roles;
  // Workers that restarted meanwhile, as their nodes answer now.
  if (!st.cfg.placement.empty() && st.watch)
    if (auto now = st.resolve())
      end.roles = std::move(*now);
  // Roles still lost when the run ends are not there to ask.
  forget_lost_kfac_roles(end.roles, st.lost);
  if (st.watch)
    end.nodes = st.watch->nodes();
  end.hellos = st.hellos;
  end.restored = st.run.restored;
  end.shards_lost = st.shards_lost;
  end.kfac_roles_lost = st.kfac_roles_lost;
  end.rolled_back_steps = st.rolled_back_steps;
  if (st.done.pending())
    st.done.deliver(std::move(end));
  self->quit();
}

void watch_node(self_ptr self, const std::string& task, const caf::actor& n,
                std::optional<node_info> info = std::nullopt) {
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

/// A node that said hello is asked for its roles over the connection it
/// opened; a node that has not published them yet (a worker says hello
/// before its worker exists) is asked again after hello_retry.
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
        if (info.role_names.size() <= 1) { // only "node"
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

void heard(self_ptr self, const std::string& task, const caf::actor& n) {
  auto& st = self->state;
  if (task == st.cfg.me || !n)
    return;
  st.refusals.erase(task);
  st.hellos[task] = n;
  ask_roles(self, task, n);
}

/// Whether a refusal of `peer` ends the run in every state. An evaluator
/// joins on its own: the run neither awaits it nor notices its loss, so
/// its refusal would otherwise only be logged while the run trains on
/// without the evaluation it was configured with.
bool refusal_always_ends_run(const std::string& peer) {
  auto t = task_id::parse(peer);
  return t && t->job == "evaluator";
}

/// How a fatal refusal ends the run: at once (no steps run, or they are
/// paused), or after the global step in flight, whose checkpoint the
/// chief writes as for a preemption, so that no step trained is lost.
enum class refusal_end { at_once, after_the_step };

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

/// The node refused `peer`'s hello for its configuration.
void refused(self_ptr self, const std::string& peer, const std::string& why,
             bool fatal, refusal_end how = refusal_end::at_once) {
  keep_refusal(self, peer,
               task_refusal{"refused " + peer + " at connect: " + why, false},
               fatal, how);
}

/// `peer` said it cannot join the run, and exits.
void cannot_join(self_ptr self, const std::string& peer,
                 const std::string& why, bool fatal,
                 refusal_end how = refusal_end::at_once) {
  keep_refusal(self, peer,
               task_refusal{peer + " cannot join the run: " + why, true},
               fatal, how);
}

bool awaited_here(const chief_supervisor_state& st, const std::string& t) {
  return std::find(st.run.awaited.begin(), st.run.awaited.end(), t)
         != st.run.awaited.end();
}

/// Whether the recovery waits for `t` to come back.
bool awaited_back(const chief_supervisor_state& st, const std::string& t) {
  return std::any_of(st.hosts.begin(), st.hosts.end(),
                     [&](const awaited_host& h) {
                       return h.task == t && !h.back;
                     });
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

std::optional<std::string> host_of(const chief_supervisor_state& st,
                                   const std::string& role);

/// `role` is lost: it joins the recovery, and its host's node information
/// is forgotten (the host's answer once it is back counts: a task that
/// connects to the chief may say hello again before the recovery begins).
void mark_lost(self_ptr self, const std::string& role) {
  auto& st = self->state;
  // A role the probe found frozen is lost again when its link goes down
  // (or the other way round): one loss, in the recovery and in the counts.
  if (std::find(st.lost.begin(), st.lost.end(), role) == st.lost.end())
    st.lost.push_back(role);
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

// -- what the states share ---------------------------------------------------

/// How a state treats a message it does not name itself: the run is
/// handed over once; a node's hello has its roles asked for (a worker
/// that restarted, a task that connected again after a freeze); a task
/// refused at connect, or that cannot join, is kept and logged (before
/// the run is handed over, the handover ends it; while it runs, a task
/// that did not come back is a loss of its own); and the node's own shutdown, a loss
/// before the run, a probe or deadline of another state and a worker's
/// answer to its start are over.
template <class... Own>
behavior state_of(self_ptr self, Own... own) {
  return with_defaults<behavior>(
    std::make_tuple(
      [](run_atom, chief_run&) -> caf::result<chief_run_end> {
        return make_error(ec::invalid_argument,
                          "chief supervisor: the run is supervised already");
      },
      [=](hello_atom, const std::string& peer, const caf::actor& n) {
        heard(self, peer, n);
      },
      [=](hello_atom, const std::string& peer, const std::string& why) {
        refused(self, peer, why, false);
      },
      [=](refuse_atom, const std::string& peer, const std::string& why) {
        cannot_join(self, peer, why, false);
      },
      [=](refuse_atom) -> std::string {
        for (const auto& kvp : self->state.refusals)
          if (kvp.second.own)
            return kvp.second.text;
        return {};
      },
      [](shutdown_atom, const std::string&) {},
      [=](preempt_atom, const std::string& why) {
        // Pausing: acted on once the pause is reported (recovering);
        // restoring: the run goes on and the chief ends it where it is.
        self->state.preempted_while_paused = why;
      },
      [](lost_atom, const node_loss&) {},
      [](probe_atom, uint64_t) {},
      [](deadline_atom, uint64_t) {},
      [](const worker_status&) {}),
    std::move(own)...);
}

/// A loss while the run is paused joins the recovery; the states past
/// pausing (`again`) begin it again with the role added.
void another_loss(self_ptr self, const node_loss& loss, bool again) {
  auto& st = self->state;
  if (loss.kind != node_loss::hosted_role)
    return;
  st.log("chief: " + loss.name + " lost too (" + loss.reason + ")");
  mark_lost(self, loss.name);
  if (again)
    self->become(recovering(self));
}

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

/// Asks `target` for its snapshot (which names its variables or layers),
/// fills that from the checkpoint and sends it back to restore; then
/// `next` (an error names `who`).
template <class Snapshot, class Handle>
void restore_one(self_ptr self, const Handle& target,
                 std::shared_ptr<const restored_run> run,
                 const std::string& who,
                 std::function<void(caf::error)> next) {
  auto timeout = self->state.cfg.request_timeout;
  self->request(target, timeout, checkpoint_atom::value)
    .then(
      [=](Snapshot& snap) {
        if (auto e = fill_snapshot(*run, snap))
          return next(with_context(e, who));
        self->request(target, timeout, restore_atom::value, std::move(snap))
          .then([=](caf::ok_atom) { next(caf::none); },
                [=](caf::error& e) {
                  next(with_context(e, "restore of " + who));
                });
      },
      [=](caf::error& e) {
        next(make_error(ec::peer_down,
                        "restore: snapshot of " + who + ": " + render(e)));
      });
}

/// Restores the covariance actors `which` (indices into the roles) one
/// after the other from `run`, then `next`.
void restore_covariance(self_ptr self, std::vector<size_t> which,
                        std::shared_ptr<const restored_run> run,
                        std::function<void(caf::error)> next) {
  if (which.empty() || !run)
    return next(caf::none);
  auto c = which.front();
  which.erase(which.begin());
  auto who = "covariance:" + std::to_string(c);
  restore_one<covariance_snapshot>(
    self, self->state.roles.covariance[c], run, who,
    [=](caf::error err) {
      if (err)
        return next(std::move(err));
      restore_covariance(self, which, run, next);
    });
}

/// Restores shard `i` and those after it from `run`, counting the
/// variables they took; then `next`.
void restore_shards(self_ptr self, size_t i,
                    std::shared_ptr<const restored_run> run,
                    std::shared_ptr<size_t> restored,
                    std::function<void(caf::error)> next) {
  auto& st = self->state;
  if (i == st.roles.shards.size())
    return next(check_all_restored(*run, *restored));
  auto shard = st.roles.shards[i];
  auto who = shard_role(i);
  restore_one<shard_snapshot>(
    self, shard, run, who, [=](caf::error err) {
      if (err)
        return next(std::move(err));
      self->request(shard, self->state.cfg.request_timeout, pull_atom::value)
        .then(
          [=](shard_params& p) {
            *restored += p.values.size();
            restore_shards(self, i + 1, run, restored, next);
          },
          [=](caf::error& e) {
            next(make_error(ec::peer_down, "restore: variables of " + who
                                             + ": " + render(e)));
          });
    });
}

/// Where worker `i` of `n` starts or goes on: the shards' step when they
/// kept the run, else the checkpoint's (with its data position), or from
/// `step` keeping its own data position.
resume_point resume_at(const chief_supervisor_state& st, int32_t i,
                       int32_t n, int64_t step) {
  resume_point rp;
  if (step >= 0)
    rp.global_step = step;
  else if (st.run.restored && st.run.kept_step < 0)
    rp = resume_of(*st.run.restored, i, n);
  else
    rp.global_step = st.run.kept_step;
  return rp;
}

/// Rebinds every worker to the chief and the shards now, each at its
/// resume point (`step`: from there, keeping its data position).
void rebind_workers(self_ptr self, int64_t incarnation, int64_t step) {
  auto& st = self->state;
  const auto& r = st.roles;
  auto n = static_cast<int32_t>(r.workers.size());
  for (int32_t i = 0; i < n; ++i)
    if (const auto& w = r.workers[static_cast<size_t>(i)]) {
      auto rp = resume_at(st, i, n, step);
      rp.incarnation = incarnation;
      self->send(w, run_atom::value, rp, st.run.chief, r.shards,
                 r.covariance);
    }
  for (const auto& w : r.stats_workers) {
    if (!w)
      continue;
    auto rp = resume_at(st, 0, n, step);
    rp.incarnation = incarnation;
    rp.has_data_order = false;
    self->send(w, run_atom::value, rp, st.run.chief, r.shards,
                   r.covariance);
  }
}

void start_workers(self_ptr self) {
  auto& st = self->state;
  if (st.run.kept_step >= 0)
    return rebind_workers(self, 0, -1);
  const auto& r = st.roles;
  auto n = static_cast<int32_t>(r.workers.size());
  for (int32_t i = 0; i < n; ++i) {
    const auto& w = r.workers[static_cast<size_t>(i)];
    if (!w)
      continue;
    if (st.run.restored)
      self->send(w, run_atom::value, resume_of(*st.run.restored, i, n));
    else
      self->send(w, run_atom::value);
  }
  // Statistics workers only need the step; their data order starts over.
  for (const auto& w : r.stats_workers) {
    if (!w)
      continue;
    if (st.run.restored)
      self->send(w, run_atom::value,
                 resume_point{st.run.restored->global_step, false, {}});
    else
      self->send(w, run_atom::value);
  }
}

/// The covariance actors take the checkpoint's factors, the chief its
/// K-FAC roles, the workers their start; then the run request goes out.
void start_run(self_ptr self) {
  auto& st = self->state;
  std::vector<size_t> all(st.roles.covariance.size());
  for (size_t c = 0; c < all.size(); ++c)
    all[c] = c;
  auto from = st.run.restored ? st.run.restored : st.run.factors_from;
  restore_covariance(self, all, from, [=](caf::error err) {
    auto& st = self->state;
    if (err)
      return end_run(self, std::move(err));
    self->send(st.run.chief, restore_atom::value, st.roles.covariance,
               st.roles.inverses);
    watch_roles(self);
    start_workers(self);
    self->become(running(self));
  });
}

// -- running ------------------------------------------------------------------

/// A role whose loss pauses the steps went away (or did not answer a
/// probe): the chief pauses, and its run request's failure starts the
/// recovery.
void pause_for(self_ptr self, const std::string& role, const std::string& why) {
  auto& st = self->state;
  st.log("chief: " + role + " lost (" + why + "); telling the chief to pause "
         "the steps");
  mark_lost(self, role);
  self->send(st.run.chief, lost_atom::value, role);
  self->become(pausing(self));
}

/// Sends the chief's run request; its answer ends the run or, with
/// ec::peer_lost (the steps paused for a lost role), starts the recovery.
void request_run(self_ptr self) {
  auto& st = self->state;
  self->request(st.run.chief, st.run.run_timeout, run_atom::value,
                st.roles.covariance)
    .then(
      [=](sync_summary& s) {
        end_run(self, std::move(self->state.refusal_ends_run), std::move(s));
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (is_peer_lost(err) && !st.lost.empty()) {
          self->become(recovering(self));
          return;
        }
        if (is_peer_lost(err))
          return end_run(self, err);
        end_run(self, make_error(err == caf::sec::request_timeout
                                   ? ec::timeout
                                   : ec::peer_down,
                                 "training run: " + render(err)));
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

/// Whether `now` is worker `was` reached again while its process kept
/// running: the same node, another handle. Over a network that is the
/// same actor through a new proxy; a restarted process is another node.
bool reached_again(const worker_actor& was, const worker_actor& now) {
  return was && now && was.address().node() == now.address().node()
         && caf::actor_cast<caf::actor_control_block*>(was)
              != caf::actor_cast<caf::actor_control_block*>(now);
}

/// A node's roles came: a gradient worker the last recovery rebound
/// through a proxy since replaced (its node connected again after the
/// rebind went out) is rebound now, where the chief says it goes on (as
/// for a rejoin; its own node's rejoin, if it comes too, changes nothing).
/// Without this it waits for its node's next ask, a second or more, and a
/// short run can end without it.
void rebind_reconnected(self_ptr self) {
  auto& st = self->state;
  if (st.rebound.empty())
    return;
  auto now = st.resolve();
  if (!now)
    return;
  auto n = std::min(st.rebound.size(), now->workers.size());
  for (size_t i = 0; i < n; ++i) {
    auto fresh = now->workers[i];
    if (!reached_again(st.rebound[i], fresh))
      continue;
    st.rebound[i] = fresh;
    st.roles.workers[i] = fresh;
    auto index = static_cast<int32_t>(i);
    self->request(st.run.chief, st.cfg.request_timeout, run_atom::value, index)
      .then(
        [=](resume_point& rp) {
          auto& st = self->state;
          st.log(st.cfg.me + ": worker " + std::to_string(index)
                 + " connected again after the rebind; rebound at global "
                   "step " + std::to_string(rp.global_step));
          self->send(fresh, run_atom::value, rp, st.run.chief,
                     st.roles.shards, st.roles.covariance);
        },
        [=](caf::error& err) {
          auto& st = self->state;
          st.log(st.cfg.me + ": worker " + std::to_string(index)
                 + " connected again but cannot be rebound now ("
                 + render(err) + "); its node asks the chief itself");
        });
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
        pause_for(self, loss.name, loss.reason);
      else
        self->state.log(self->state.cfg.me + ": " + loss.name
                        + "'s node went down (" + loss.reason + ")");
    },
    [=](probe_atom, uint64_t r) { probe(self, r); },
    [=](deadline_atom, uint64_t id) {
      if (id == 0) // a node's roles came (ask_roles)
        rebind_reconnected(self);
    },
    [=](hello_atom, const std::string& peer, const std::string& why) {
      refused(self, peer, why, false, refusal_end::after_the_step);
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      cannot_join(self, peer, why, false, refusal_end::after_the_step);
    });
}

// -- pausing ------------------------------------------------------------------

/// The chief was told to pause: its run request fails with ec::peer_lost
/// once the checkpoints begun are settled (request_run), or answers the
/// summary when the run ended meanwhile. More losses join the recovery.
behavior pausing(self_ptr self) {
  ++self->state.probe_round; // no probes while paused
  return state_of(self, [=](lost_atom, const node_loss& loss) {
    another_loss(self, loss, false);
  });
}

// -- recovering ---------------------------------------------------------------

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

/// Connects to `task` again: one connector request at a time, each
/// bounded by connect_attempt, asked again at once after a failed one,
/// until the recovery's wait ends (the behaviour's deadline).
void reconnect(self_ptr self, const std::string& task, uint64_t wait) {
  auto& st = self->state;
  auto i = st.connectors.find(task);
  if (i == st.connectors.end()) {
    i = st.connectors.emplace(task, st.cfg.connector(task)).first;
    st.to_stop->push_back(caf::actor_cast<caf::actor>(i->second));
  }
  self->request(i->second, st.cfg.connect_attempt, connect_atom::value, task)
    .then(
      [=](node_info& info) {
        auto& st = self->state;
        if (!st.watch->is_current_wait(wait))
          return;
        auto n = node_of(info);
        watch_node(self, task, n, std::move(info));
        self->send(me_of(self), deadline_atom::value, uint64_t{0});
      },
      [=](caf::error&) {
        if (self->state.watch->is_current_wait(wait))
          reconnect(self, task, wait);
      });
}

std::string hosts_text(const std::vector<awaited_host>& hosts,
                       const chief_supervisor_state& st, bool only_missing) {
  std::string out;
  for (const auto& h : hosts) {
    if (only_missing && h.back)
      continue;
    std::string roles;
    for (const auto& r : h.roles)
      roles += (roles.empty() ? "" : ", ") + r;
    out += (out.empty() ? "" : "; ") + st.where(h.task) + " (hosting "
           + roles + ")";
  }
  return out;
}

/// The roles that did not answer a status request of the probe after
/// every host was back; empty: the recovery goes on to the restore.
void probe_all(self_ptr self, uint64_t wait) {
  auto& st = self->state;
  auto timeout = st.cfg.probe_timeout.count() > 0 ? st.cfg.probe_timeout
                                                  : st.cfg.request_timeout;
  struct tally {
    size_t pending = 0;
    std::vector<std::string> silent;
  };
  auto t = std::make_shared<tally>();
  auto r = st.roles;
  t->pending = r.shards.size() + r.covariance.size() + r.inverses.size();
  auto one_done = [=] {
    if (--t->pending > 0 || !self->state.watch->is_current_wait(wait))
      return;
    auto& st = self->state;
    if (t->silent.empty())
      return restore(self);
    std::sort(t->silent.begin(), t->silent.end());
    for (const auto& name : t->silent) {
      st.log("chief: " + name + " does not answer either; waiting for it "
             "too");
      mark_lost(self, name);
    }
    self->become(recovering(self));
  };
  auto ask = [&](const auto& handles, const std::string& job, auto status) {
    using status_type = decltype(status);
    for (size_t i = 0; i < handles.size(); ++i) {
      auto name = job + ":" + std::to_string(i);
      self->request(handles[i], timeout, status_atom::value)
        .then([=](const status_type&) { one_done(); },
              [=](caf::error&) {
                t->silent.push_back(name);
                one_done();
              });
    }
  };
  if (t->pending == 0)
    return restore(self);
  ask(r.shards, "ps", shard_status{});
  ask(r.covariance, "covariance", covariance_status{});
  ask(r.inverses, "inverse", inverse_status{});
}

/// Every awaited host is back: the roles as they are now, then a probe of
/// every role (whoever froze may have lost others whose loss never came).
void hosts_back(self_ptr self, uint64_t wait) {
  auto& st = self->state;
  auto roles = st.resolve();
  if (!roles)
    return end_run(self, with_context(roles.error(), "after the recovery"));
  st.roles = std::move(*roles);
  probe_all(self, wait);
}

/// Preempted while the steps are paused for a lost role: the run ends
/// where it stands instead of waiting --max_wait_ms for the role; the chief
/// checkpoints the newest applied step when every shard is there, and the
/// node exits preempted.
behavior ending_preempted(self_ptr self) {
  auto& st = self->state;
  auto lost_text = comma_joined(st.lost);
  st.log(st.cfg.me + ": preempted (" + st.preempted_while_paused
         + ") while waiting for " + lost_text
         + "; the run ends without it");
  // Lost for good: counted as a recovery counts them when they are back.
  for (const auto& r : st.lost)
    (is_shard_role(r) ? st.shards_lost : st.kfac_roles_lost) += 1;
  self->request(st.run.chief, st.run.run_timeout, run_atom::value,
                st.roles.covariance)
    .then([=](sync_summary& s) { end_run(self, caf::none, std::move(s)); },
          [=](caf::error& err) {
            end_run(self, with_context(err, "ending the preempted run"));
          });
  return state_of(self, [](lost_atom, const node_loss&) {},
                  [](preempt_atom, const std::string&) {});
}

behavior recovering(self_ptr self) {
  auto& st = self->state;
  if (!st.preempted_while_paused.empty())
    return ending_preempted(self);
  auto fail = [=](caf::error err) {
    end_run(self, std::move(err));
    return behavior::make_empty_behavior();
  };
  if (st.hosts.empty())
    st.before = st.roles;
  std::string lost_text;
  for (const auto& r : st.lost)
    lost_text += (lost_text.empty() ? "" : ", then ") + r;
  // The hosts of the roles lost that are not awaited yet.
  for (const auto& role : st.lost) {
    auto host = host_of(st, role);
    if (!host)
      return fail(make_error(ec::peer_lost,
                             role + " lost, and no task hosts it (an "
                                    "in-process run cannot bring it back)"));
    if (*host == st.cfg.me)
      return fail(make_error(ec::peer_lost,
                             role + " lost; it is hosted by the chief"));
    auto h = std::find_if(st.hosts.begin(), st.hosts.end(),
                          [&](const awaited_host& x) {
                            return x.task == *host;
                          });
    if (h == st.hosts.end()) {
      st.hosts.push_back(awaited_host{*host, {role}, false});
    } else if (std::find(h->roles.begin(), h->roles.end(), role)
               == h->roles.end()) {
      h->roles.push_back(role);
      if (h->back) {
        // Back already, and now silent: awaited again.
        h->back = false;
      }
    }
  }
  // A shard comes back empty: the run rolls back to a checkpoint.
  bool shard = std::any_of(st.lost.begin(), st.lost.end(), is_shard_role);
  if (shard && !st.rollback_to) {
    if (!st.run.writes_checkpoints)
      return fail(make_error(ec::peer_lost,
                             lost_text + ", and the run writes no "
                                         "checkpoints to restore it from "
                                         "(--checkpoint_dir)"));
    auto latest = st.run.newest_checkpoint();
    if (!latest)
      return fail(with_context(latest.error(), lost_text));
    if (!*latest)
      return fail(make_error(ec::peer_lost,
                             lost_text + ", before the run's first "
                                         "checkpoint: nothing to restore it "
                                         "from"));
    st.rollback_to = *latest;
  }
  if (!st.cfg.connector && std::any_of(st.hosts.begin(), st.hosts.end(),
                                       [&](const awaited_host& h) {
                                         return !st.cfg.passive.count(h.task);
                                       }))
    return fail(make_error(ec::peer_lost, lost_text
                                            + ", and this node has no "
                                              "connector to reach its host "
                                              "again"));
  auto id = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.cfg.max_wait, deadline_atom::value, id);
  st.log(st.cfg.me + ": waiting up to " + ms(st.cfg.max_wait) + " for "
         + hosts_text(st.hosts, st, true) + " to come back");
  for (auto& h : st.hosts) {
    if (h.back)
      continue;
    // A task that connects to the chief itself says hello again.
    if (!st.cfg.passive.count(h.task))
      reconnect(self, h.task, id);
  }
  auto check = [=] {
    auto& st = self->state;
    bool all = true;
    for (auto& h : st.hosts) {
      if (!h.back && st.watch->knows(h.task)) {
        h.back = true;
        st.log(st.cfg.me + ": " + h.task + " is back");
      }
      all = all && h.back;
    }
    if (all) {
      // Once: later answers (each host's own) find the restore under way.
      self->become(restoring(self));
      hosts_back(self, id);
    }
  };
  return state_of(
    self,
    [=](hello_atom, const std::string& peer, const std::string& why) {
      refused(self, peer, why, awaited_back(self->state, peer));
    },
    [=](refuse_atom, const std::string& peer, const std::string& why) {
      cannot_join(self, peer, why, awaited_back(self->state, peer));
    },
    [=](lost_atom, const node_loss& loss) { another_loss(self, loss, true); },
    [=](preempt_atom, const std::string& why) {
      self->state.preempted_while_paused = why;
      self->become(ending_preempted(self));
    },
    [=](deadline_atom, uint64_t wait) {
      auto& st = self->state;
      if (wait == 0)
        return check();
      if (wait != id)
        return;
      end_run(self, make_error(ec::timeout,
                               "no word from " + hosts_text(st.hosts, st, true)
                                 + " within " + ms(st.cfg.max_wait)
                                 + " (--max_wait_ms) after " + lost_text
                                 + " was lost"));
    });
}

/// Every lost role's host is back: the probe of every role and the
/// restore run (their requests bounded); a loss meanwhile starts the
/// recovery again.
behavior restoring(self_ptr self) {
  return state_of(self, [=](lost_atom, const node_loss& loss) {
    another_loss(self, loss, true);
  });
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

/// The chief is rolled back (or goes on from its step), the K-FAC roles
/// and the evaluator learn the roles now, the workers are rebound and the
/// run request goes out again.
void go_on(self_ptr self, int64_t paused_step, int64_t step, bool shard,
           std::shared_ptr<const restored_run> newest, bool new_factors) {
  auto& st = self->state;
  auto lost = st.lost;
  auto lost_text = comma_joined(lost);
  for (auto& inv : st.roles.inverses)
    self->send(inv, restore_atom::value, st.roles.shards);
  for (auto& cov : st.roles.covariance)
    self->send(cov, restore_atom::value, st.roles.inverses);
  if (shard && newest) {
    // Before the rollback (one mailbox, in order): a worker whose link went
    // down with the loss misses its rebind and rejoins instead; it resumes
    // at its data position in the checkpoint, not at its own.
    auto n = static_cast<int32_t>(st.roles.workers.size());
    std::vector<resume_point> points;
    for (int32_t i = 0; i < n; ++i)
      points.push_back(resume_of(*newest, i, n));
    self->send(st.run.chief, restore_atom::value, std::move(points));
  }
  self->request(st.run.chief, st.cfg.request_timeout, restore_atom::value,
                step, st.roles.shards)
    .then(
      [=](int64_t incarnation) {
        auto& st = self->state;
        self->send(st.run.chief, restore_atom::value, st.roles.covariance,
                   st.roles.inverses);
        if (st.run.evaluator)
          self->send(st.run.evaluator, restore_atom::value, st.roles.shards);
        for (const auto& r : lost)
          (is_shard_role(r) ? st.shards_lost : st.kfac_roles_lost) += 1;
        json_object fields;
        if (shard)
          st.rolled_back_steps += std::max<int64_t>(0, paused_step - step);
        fields.add("step", step)
          .add("shards_lost", st.shards_lost)
          .add("kfac_roles_lost", st.kfac_roles_lost)
          .add("rolled_back_steps", st.rolled_back_steps);
        auto text
          = shard ? "chief: " + lost_text + " is back; the run rolls back to "
                      "global step " + std::to_string(step) + " ("
                      + newest->path + "), "
                      + std::to_string(paused_step - step)
                      + " step(s) to do again"
                  : "chief: " + lost_text + " is back; the run goes on from "
                      "there" + back_how(st.before, st.roles,
                                         new_factors ? newest : nullptr);
        if (st.run.out) {
          st.run.out->record(text, fields);
          if (shard)
            st.run.out->restart_at(step);
        } else {
          st.log(text);
        }
        // The workers as the nodes say now: a worker's node that
        // connected again since the hosts were back has a new proxy.
        if (auto now = st.resolve()) {
          st.roles.workers = now->workers;
          st.roles.stats_workers = now->stats_workers;
        }
        if (shard) {
          st.run.restored = newest;
          st.run.kept_step = -1;
          rebind_workers(self, incarnation, -1);
        } else {
          rebind_workers(self, incarnation, step);
        }
        st.rebound = st.roles.workers;
        st.lost.clear();
        st.hosts.clear();
        st.rollback_to.reset();
        watch_roles(self);
        self->become(running(self));
      },
      [=](caf::error& err) {
        end_run(self, with_context(err, lost_text + ": rollback of the chief"));
      });
}

/// Every role answers: the shards from the newest checkpoint (a lost
/// shard), the covariance actors' factors, then go_on.
void restore(self_ptr self) {
  auto& st = self->state;
  auto lost = st.lost;
  auto lost_text = comma_joined(lost);
  // The round in flight when the steps paused may have been applied by
  // every shard since (the chief counts it): the run stands at the
  // chief's step now. Settled: no token went out since the pause.
  self->request(st.run.chief, st.cfg.request_timeout, status_atom::value)
    .then(
      [=](chief_status& cs) {
        auto& st = self->state;
        bool shard = static_cast<bool>(st.rollback_to);
        std::shared_ptr<const restored_run> newest = st.rollback_to;
        if (!shard && st.run.newest_checkpoint) {
          auto latest = st.run.newest_checkpoint();
          if (!latest)
            return end_run(self, with_context(latest.error(), lost_text));
          newest = *latest;
        }
        // Covariance actors: all back to the checkpoint after a rollback,
        // a new one from it (or from nothing, before the first checkpoint).
        std::vector<size_t> fresh;
        for (size_t c = 0; c < st.roles.covariance.size(); ++c) {
          bool is_new = c >= st.before.covariance.size()
                        || st.before.covariance[c] != st.roles.covariance[c];
          if (newest && (shard || is_new))
            fresh.push_back(c);
        }
        bool new_factors = !fresh.empty();
        auto paused_step = cs.global_step;
        auto covariance_then_go_on = [=](int64_t step) {
          restore_covariance(self, fresh, newest, [=](caf::error err) {
            if (err)
              return end_run(self, with_context(err, lost_text));
            go_on(self, paused_step, step, shard, newest, new_factors);
          });
        };
        if (!shard)
          return covariance_then_go_on(paused_step);
        restore_shards(self, 0, newest, std::make_shared<size_t>(0),
                       [=](caf::error err) {
                         if (err)
                           return end_run(self, with_context(err, lost_text));
                         covariance_then_go_on(newest->global_step);
                       });
      },
      [=](caf::error& err) {
        end_run(self, with_context(err, "status of the paused chief"));
      });
}

} // namespace

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
