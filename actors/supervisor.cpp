#include "actors/supervisor.hpp"

#include <algorithm>

#include <caf/send.hpp>

#include "actors/preemption.hpp"
#include "actors/with_defaults.hpp"
#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;
using behavior = supervisor_actor::behavior_type;

behavior running(self_ptr self);
behavior chief_lost(self_ptr self, bool first);
behavior role_failed(self_ptr self);
behavior preempting(self_ptr self);

supervisor_actor me_of(self_ptr self) {
  return caf::actor_cast<supervisor_actor>(self);
}

/// Answers the node program and stops; before the node is wired the end is
/// kept and answered once it is.
void end_run(self_ptr self, node_end end) {
  auto& st = self->state;
  if (!st.done.pending()) {
    if (!st.early_end)
      st.early_end = std::move(end);
    return;
  }
  st.done.deliver(std::move(end));
  self->quit();
}

/// Stops the connectors (a detached one blocked in a connect attempt
/// stops once the attempt is over).
void stop_connectors(const std::vector<caf::actor>& connectors) {
  for (const auto& c : connectors)
    caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
}

node_end failed(caf::error err) {
  node_end out;
  out.exit_code = exit_codes::failure;
  out.reason = render(err);
  out.error = std::move(err);
  return out;
}

/// Tells the member role, if any, of an event (member_role_actor).
template <class... Ts>
void tell_member(self_ptr self, Ts&&... xs) {
  if (self->state.wiring.member)
    self->send(self->state.wiring.member, std::forward<Ts>(xs)...);
}

/// The chief ended the run: a member role finishes its work first (bounded
/// by member_finish), then `end` ends the node; the node actor answers the
/// chief once this is answered.
template <class End>
caf::result<caf::ok_atom> confirm_end(self_ptr self, const std::string& reason,
                                      End end) {
  auto& st = self->state;
  if (!st.wiring.member) {
    end();
    return caf::ok_atom::value;
  }
  auto rp = self->make_response_promise<caf::ok_atom>();
  self->request(st.wiring.member, st.cfg.member_finish, shutdown_atom::value,
                reason)
    .then(
      [=](caf::ok_atom) mutable {
        rp.deliver(caf::ok_atom::value);
        end();
      },
      [=](caf::error& err) mutable {
        // The run is over for the chief either way; this node failed.
        rp.deliver(caf::ok_atom::value);
        auto& st = self->state;
        if (err == caf::sec::request_timeout)
          err = make_error(ec::timeout,
                           "the member role did not answer the end of the "
                           "run within "
                             + std::to_string(st.cfg.member_finish.count())
                             + " ms");
        else
          err = with_context(err, "the member role at the end of the run");
        end_run(self, failed(std::move(err)));
      });
  return rp;
}

void chief_ended_run(self_ptr self, const std::string& reason) {
  auto& st = self->state;
  if (!st.role_failure.empty())
    st.log(st.role_failure);
  st.log("the chief ended the run: " + reason);
  end_run(self, node_end{exit_code_of_run_end(reason), reason, {}});
}

/// Ends the node at once, preempted: there is no chief to tell.
void preempted(self_ptr self, const std::string& why) {
  self->state.log("preempted (" + why + "); the node ends without waiting "
                  "for the chief");
  end_run(self, node_end{exit_codes::preempted, "preempted: " + why, {}});
}

/// Preempted, and the chief cannot be told: the node ends at once, saying
/// why (it exits preempted all the same).
void preempted_unreached(self_ptr self, const std::string& why,
                         const std::string& cause) {
  auto& st = self->state;
  st.log("preempted (" + why + "); cannot reach the chief (" + st.cfg.chief
         + " at " + st.cfg.chief_address + ": " + cause
         + "); the node ends without waiting for it");
  end_run(self, node_end{exit_codes::preempted, "preempted: " + why, {}});
}

void tell_chief(self_ptr self, const chief_actor& chief,
                const std::string& why) {
  auto& st = self->state;
  self->send(chief, preempt_atom::value, st.cfg.me + ": " + why);
  st.log("preempted (" + why + "); told the chief, which ends the run after "
         "the global step in flight");
}

/// Preempted while the chief is reachable: it ends the run after the
/// global step in flight (and checkpoints it); this node keeps its roles
/// until the chief's word, so that the step in flight can finish. A task
/// the chief connects to (a PS shard, a K-FAC role's host) knows only the
/// chief's node: it asks that node for the chief, bounded by the request
/// timeout, and ends on its own when no answer comes.
void pass_preemption_on(self_ptr self, const std::string& why) {
  auto& st = self->state;
  auto chief = st.watch->role<chief_actor>(st.cfg.chief, "chief");
  if (chief) {
    tell_chief(self, *chief, why);
    self->become(preempting(self));
    return;
  }
  if (!st.watch->chief_here() || !st.chief_node || !st.cfg.hello) {
    preempted_unreached(self, why, render(chief.error()));
    return;
  }
  self->become(preempting(self));
  self->request(caf::actor_cast<node_actor>(st.chief_node),
                st.cfg.request_timeout, hello_atom::value, *st.cfg.hello)
    .then(
      [=](node_info& info) {
        auto c = role_of<chief_actor>(info, "chief");
        if (!c) {
          preempted_unreached(self, why, render(c.error()));
          return;
        }
        tell_chief(self, *c, why);
      },
      [=](caf::error& err) { preempted_unreached(self, why, render(err)); });
}

void refused(self_ptr self, const std::string& peer, const std::string& why) {
  // This node refused the chief's hello, or another task's: the two were
  // configured for different runs, and waiting changes nothing.
  end_run(self, failed(make_error(ec::invalid_config,
                                  "refused " + peer + " at connect: " + why)));
}

void watch_node(self_ptr self, const std::string& task, const caf::actor& n,
                std::optional<node_info> info = std::nullopt) {
  if (task == self->state.cfg.chief && n)
    self->state.chief_node = n;
  if (auto m = self->state.watch->connected(task, n, std::move(info)))
    self->monitor(m);
}

void rebind(self_ptr self);
void told_why_not(self_ptr self, caf::error err);

bool is_shard_host(const supervisor_state& st, const std::string& task) {
  for (const auto& [host, role] : st.cfg.shard_roles)
    if (host == task)
      return true;
  return false;
}

/// The shards' host tasks this node is not connected to (now).
std::vector<std::string> missing_shard_hosts(const supervisor_state& st) {
  std::vector<std::string> missing;
  for (const auto& [host, role] : st.cfg.shard_roles)
    if (!st.watch->role<ps_actor>(host, role)
        && std::find(missing.begin(), missing.end(), host) == missing.end())
      missing.push_back(host);
  return missing;
}

/// A rebind waiting for the shards' hosts goes on once all are back.
void rebind_if_reconnected(self_ptr self) {
  auto& st = self->state;
  if (!st.rebind_after_reconnect || !missing_shard_hosts(st).empty())
    return;
  st.rebind_after_reconnect = false;
  rebind(self);
}

/// Connects to `task` again: one connector request at a time, each
/// bounded by connect_attempt, asked again at once after a failed one
/// (the connector spends its own timeout trying), until max_wait has
/// passed since the loss. Once back, the task's node is watched again, and
/// the chief's return reaches the behaviour as the chief's hello.
void reconnect(self_ptr self, const std::string& task) {
  auto& st = self->state;
  if (!st.cfg.connector)
    return;
  auto i = st.connectors.find(task);
  if (i == st.connectors.end()) {
    i = st.connectors.emplace(task, st.cfg.connector(task)).first;
    st.to_stop->push_back(caf::actor_cast<caf::actor>(i->second));
  }
  auto now = self->clock().now();
  auto until = st.reconnect_until.emplace(task, now + st.cfg.max_wait)
                 .first->second;
  self->request(i->second, st.cfg.connect_attempt, connect_atom::value, task)
    .then(
      [=](node_info& info) {
        auto& st = self->state;
        st.reconnect_until.erase(task);
        auto n = node_of(info);
        st.log("connected again to " + task);
        tell_member(self, connect_atom::value, task, info);
        watch_node(self, task, n, std::move(info));
        if (task == st.cfg.chief)
          self->send(me_of(self), hello_atom::value, task, n);
        else
          rebind_if_reconnected(self);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (self->clock().now() < until) {
          reconnect(self, task);
          return;
        }
        st.reconnect_until.erase(task);
        st.log("could not connect again to " + task + " within "
               + std::to_string(st.cfg.max_wait.count())
               + " ms (--max_wait_ms): " + render(err));
        if (st.rebind_after_reconnect && is_shard_host(st, task)) {
          st.rebind_after_reconnect = false;
          st.log("the worker cannot rejoin the run without " + task);
        }
      });
}

void lost_peer(self_ptr self, const node_loss& loss) {
  self->state.log(loss.name + " went down (" + loss.reason + ")");
  tell_member(self, lost_atom::value, loss.name, loss.reason);
  reconnect(self, loss.name);
}

/// The worker with this position in the wiring, as logs name it: only
/// where the task hosts several (--workers_per_task).
std::string which_worker(const supervisor_state& st, size_t k) {
  if (st.cfg.gradient_workers.size() <= 1)
    return "";
  return " (worker:" + std::to_string(st.cfg.gradient_workers[k]) + ")";
}

/// Asks `chief` where the task's gradient worker k rejoins. A chief whose
/// steps cannot go on yet (another lost role is being brought back) holds
/// the request until they do, so the answer is awaited up to max_wait,
/// the longest a recovery waits for a role; running out is an ec::timeout
/// naming it. An answer to an ask for worker k that a newer one for it
/// replaced reaches nothing.
template <class Then, class Otherwise>
void ask_rejoin(self_ptr self, const chief_actor& chief, size_t k, Then then,
                Otherwise otherwise) {
  auto& st = self->state;
  // The state owns the ask; a newer one for worker k replaces it, and the
  // answers hold it weakly (the shape of a worker's binding).
  auto ask = std::make_shared<const int32_t>(st.cfg.gradient_workers[k]);
  st.rejoin_asks[k] = ask;
  std::weak_ptr<const int32_t> current = ask;
  auto worker = *ask;
  auto wait = st.cfg.max_wait;
  self->request(chief, wait, rejoin_atom::value, worker)
    .then(
      [=](resume_point& rp) {
        if (current.lock())
          then(rp);
      },
      [=](caf::error& err) {
        if (!current.lock())
          return;
        if (err == caf::sec::request_timeout)
          err = make_error(ec::timeout,
                           "the chief did not say where worker "
                             + std::to_string(worker) + " rejoins within "
                             + std::to_string(wait.count())
                             + " ms (--max_wait_ms)");
        otherwise(std::move(err));
      });
}

/// Rebinds the gradient workers to the chief that is back, one after the
/// other from st.rebind_next: the chief says where each goes on, once its
/// steps go on when they are paused for another lost task (ask_rejoin).
void rebind(self_ptr self) {
  auto& st = self->state;
  auto k = st.rebind_next;
  if (k >= st.cfg.gradient_workers.size() || k >= st.wiring.workers.size()
      || !st.wiring.workers[k])
    return;
  // A freeze longer than the dead-peer timeout drops this node's links to
  // the shards as well as the chief's: the chief is asked only once they
  // are back, so that the resume point it gives is used at once.
  if (auto missing = missing_shard_hosts(st); !missing.empty()) {
    st.log("rebinds the worker once it is connected again to "
           + comma_joined(missing));
    st.rebind_after_reconnect = true;
    for (const auto& host : missing)
      if (st.reconnect_until.count(host) == 0)
        reconnect(self, host);
    return;
  }
  auto chief = st.watch->role<chief_actor>(st.cfg.chief, "chief");
  if (!chief) {
    st.log("cannot rebind the worker: " + render(chief.error()));
    return;
  }
  auto c = *chief;
  ask_rejoin(
    self, c, k,
    [=](resume_point& rp) {
      auto& st = self->state;
      std::vector<ps_actor> shards;
      for (const auto& [host, role] : st.cfg.shard_roles) {
        auto s = st.watch->role<ps_actor>(host, role);
        if (!s) {
          st.log("cannot rebind the worker: " + render(s.error()));
          return;
        }
        shards.push_back(*s);
      }
      std::vector<covariance_actor> cov;
      for (const auto& [host, role] : st.cfg.covariance_roles)
        if (auto k = st.watch->role<covariance_actor>(host, role))
          cov.push_back(*k);
      if (cov.size() != st.cfg.covariance_roles.size())
        cov.clear(); // the worker keeps its own
      st.log("the run is under way; rejoining at global step "
             + std::to_string(rp.global_step) + which_worker(st, k));
      caf::anon_send(st.wiring.workers[k], run_atom::value, rp, c,
                     std::move(shards), std::move(cov));
      st.rebind_next = k + 1;
      rebind(self);
    },
    [=](caf::error err) {
      if (err.category() == error_category
          && err.code() == static_cast<uint8_t>(ec::timeout)) {
        // The chief's own recovery ends its run after max_wait; if it
        // goes on after all, its supervisor rebinds this worker.
        self->state.log("cannot rebind the worker" + which_worker(self->state, k)
                        + ": " + render(err));
        return;
      }
      told_why_not(self, std::move(err));
    });
}

/// The chief would not rebind this worker: it says why, and
/// when the run is over this node, which the chief's word may have missed
/// while it was away, ends as that word would have ended it; a run not
/// started yet rebinds this worker itself when it starts.
void told_why_not(self_ptr self, caf::error err) {
  auto& st = self->state;
  auto chief = st.watch->role<chief_actor>(st.cfg.chief, "chief");
  if (!chief) {
    st.log("the chief did not rebind the worker (" + render(err)
           + ") and is gone again");
    return;
  }
  self->request(*chief, st.cfg.request_timeout, status_atom::value)
    .then(
      [=](chief_status& cs) {
        auto& st = self->state;
        if (cs.finished) {
          chief_ended_run(self, "the run ended at global step "
                                  + std::to_string(cs.global_step)
                                  + " while this node was away");
          return;
        }
        st.log("the chief did not rebind the worker: " + render(err)
               + (cs.tokens_granted == 0
                    ? "; it starts the worker itself when its run starts"
                    : ""));
      },
      [=](caf::error& status_err) {
        self->state.log("the chief did not rebind the worker ("
                        + render(err) + ") nor say how its run stands ("
                        + render(status_err) + ")");
      });
}

/// A worker task started while the run is under way (a restart): the chief
/// says where to resume and the worker starts on its own, since the chief's
/// driver started the workers it knew at the beginning.
void rejoin_if_running(self_ptr self) {
  auto& st = self->state;
  if (st.wiring.workers.empty() || !st.wiring.workers.front())
    return;
  auto chief = st.watch->role<chief_actor>(st.cfg.chief, "chief");
  if (!chief)
    return;
  if (st.cfg.stats_worker) {
    // One statistics worker per task (runtime/cluster/node_plan.hpp).
    auto worker = st.wiring.workers.front();
    // A statistics worker takes no tokens: it starts at the shards' step
    // once the chief's run is under way.
    self->request(*chief, st.cfg.request_timeout, status_atom::value)
      .then(
        [=](chief_status& cs) {
          if (cs.finished || cs.tokens_granted == 0)
            return;
          self->state.log("the run is under way; the statistics worker "
                          "starts at global step "
                          + std::to_string(cs.global_step));
          caf::anon_send(worker, run_atom::value);
        },
        [](caf::error&) {});
    return;
  }
  auto n = std::min(st.cfg.gradient_workers.size(), st.wiring.workers.size());
  for (size_t k = 0; k < n; ++k) {
    auto worker = st.wiring.workers[k];
    auto which = which_worker(st, k);
    ask_rejoin(
      self, *chief, k,
      [=](resume_point& rp) {
        self->state.log("the run is under way; rejoining at global step "
                        + std::to_string(rp.global_step) + which);
        caf::anon_send(worker, run_atom::value, rp);
      },
      [=](caf::error err) {
        // Not running yet (ec::unavailable): the chief's driver starts
        // this worker. Anything else is worth a line.
        if (err.category() != error_category
            || err.code() != static_cast<uint8_t>(ec::unavailable))
          self->state.log("the worker" + which
                          + " could not rejoin the run: " + render(err));
      });
  }
}

/// Wired: watch the roles and the nodes, then go on as running, or as
/// chief_lost while the chief has not said hello yet.
void start(self_ptr self, node_wiring wiring) {
  auto& st = self->state;
  st.wiring = std::move(wiring);
  for (const auto& [role, actor] : st.wiring.hosted) {
    st.watch->host(role, actor.address());
    self->monitor(actor);
  }
  for (auto& [task, info] : st.wiring.nodes)
    watch_node(self, task, node_of(info), info);
  for (auto& [peer, n] : st.early_hellos)
    if (peer == st.cfg.chief)
      watch_node(self, peer, n);
  st.early_hellos.clear();
  rejoin_if_running(self);
  if (st.watch->chief_here())
    self->become(running(self));
  else
    self->become(chief_lost(self, true));
}

/// A hosted role, the chief's node or a peer's node went away.
void lost(self_ptr self, const node_loss& loss) {
  switch (loss.kind) {
    case node_loss::hosted_role:
      self->state.role_failure = loss.name + " stopped: " + loss.reason;
      self->become(role_failed(self));
      break;
    case node_loss::chief_node:
      self->state.log("the chief's node went down (" + loss.reason
                      + "); waiting up to "
                      + std::to_string(self->state.cfg.max_wait.count())
                      + " ms for it to return");
      tell_member(self, lost_atom::value, loss.name, loss.reason);
      self->become(chief_lost(self, false));
      break;
    default:
      lost_peer(self, loss);
  }
}

/// How a state treats a message it does not name itself: the node is
/// wired once; the chief's hello has its node watched (other tasks' are
/// not this node's concern); a task refused at connect is logged; the
/// chief's word ends the run; a preemption is passed to the chief; a loss
/// is taken as lost() says; a deadline of another state is over.
template <class... Own>
behavior state_of(self_ptr self, Own... own) {
  return with_defaults<behavior>(
    std::make_tuple(
      [](run_atom, node_wiring&) -> caf::result<node_end> {
        return make_error(ec::invalid_argument,
                          "supervisor: the node is supervised already");
      },
      [=](hello_atom, const std::string& peer, const caf::actor& n) {
        if (peer == self->state.cfg.chief)
          watch_node(self, peer, n);
      },
      [=](hello_atom, const std::string& peer, const std::string& why) {
        refused(self, peer, why);
      },
      [=](shutdown_atom,
          const std::string& reason) -> caf::result<caf::ok_atom> {
        return confirm_end(self, reason,
                           [=] { chief_ended_run(self, reason); });
      },
      [=](preempt_atom, const std::string& why) { preempted(self, why); },
      [=](lost_atom, const node_loss& loss) { lost(self, loss); },
      [](deadline_atom, uint64_t) {}),
    std::move(own)...);
}

/// The node is being wired: what arrives is kept until it is.
behavior connecting(self_ptr self) {
  return state_of(
    self,
    [=](run_atom, node_wiring& w) -> caf::result<node_end> {
      auto& st = self->state;
      st.done = self->make_response_promise<node_end>();
      if (st.early_end) {
        auto end = std::move(*st.early_end);
        st.early_end.reset();
        end_run(self, std::move(end));
        return st.done;
      }
      start(self, std::move(w));
      return st.done;
    },
    [=](hello_atom, std::string& peer, caf::actor& n) {
      self->state.early_hellos.emplace_back(std::move(peer), std::move(n));
    },
    [=](lost_atom, const node_loss& loss) {
      // Nothing is monitored before the wiring.
      self->state.log("ignored the loss of " + loss.name
                      + " before the node was wired");
    });
}

/// Everything is up.
behavior running(self_ptr self) {
  // The waits of the states before are over.
  self->state.watch->begin_wait();
  return state_of(self, [=](preempt_atom, const std::string& why) {
    pass_preemption_on(self, why);
  });
}

/// The chief's node is gone (or has not said hello yet, `first`): a task
/// that connects to the chief connects again, the others wait for its
/// hello; bounded by max_wait.
behavior chief_lost(self_ptr self, bool first) {
  auto& st = self->state;
  auto id = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.cfg.max_wait, deadline_atom::value, id);
  if (!first && st.cfg.reconnects_to_chief)
    reconnect(self, st.cfg.chief);
  return state_of(
    self,
    [=](hello_atom, const std::string& peer, const caf::actor& n) {
      auto& st = self->state;
      if (peer != st.cfg.chief)
        return;
      watch_node(self, peer, n);
      bool rebinds = !first && st.cfg.reconnects_to_chief;
      // A task that connects to the chief needs the chief's roles for the
      // rebind: a hello of the chief's node (it asked this node for its
      // roles) comes before the connector's answer, which is awaited.
      if (rebinds && !st.watch->knows(st.cfg.chief))
        return;
      self->become(running(self));
      if (rebinds) {
        st.rebind_next = 0;
        rebind(self);
      }
    },
    [=](deadline_atom, uint64_t wait) {
      auto& st = self->state;
      if (wait != id)
        return; // a wait of an earlier state
      auto secs = std::chrono::duration_cast<std::chrono::seconds>(
        st.cfg.max_wait);
      end_run(self, failed(make_error(
                      ec::timeout, "no word from the chief (" + st.cfg.chief
                                     + " at " + st.cfg.chief_address
                                     + ") for "
                                     + std::to_string(secs.count())
                                     + " s (--max_wait)")));
    });
}

/// A hosted role stopped: at the end of a run a worker may stop (with the
/// chief it is linked to) just before the chief's word arrives, so the
/// word is awaited a little before this is a failure.
behavior role_failed(self_ptr self) {
  auto& st = self->state;
  auto id = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.cfg.failure_grace, deadline_atom::value,
                     id);
  return state_of(
    self,
    [=](lost_atom, const node_loss& loss) {
      if (loss.kind == node_loss::peer_node)
        lost_peer(self, loss);
      else
        self->state.log(loss.name + " went away too (" + loss.reason + ")");
    },
    [=](deadline_atom, uint64_t wait) {
      if (wait == id)
        end_run(self, failed(make_error(ec::peer_down,
                                        self->state.role_failure)));
    });
}

/// Preempted, the chief told: its word ends the node (preempted whatever
/// the word says), or preempt_wait, or the chief's loss.
behavior preempting(self_ptr self) {
  auto& st = self->state;
  auto id = st.watch->begin_wait();
  self->delayed_send(me_of(self), st.cfg.preempt_wait, deadline_atom::value,
                     id);
  auto end = [=](const std::string& reason) {
    end_run(self, node_end{exit_codes::preempted, reason, {}});
  };
  return state_of(
    self,
    [=](hello_atom, const std::string&, const caf::actor&) {},
    [=](shutdown_atom,
        const std::string& reason) -> caf::result<caf::ok_atom> {
      self->state.log("the chief ended the run: " + reason);
      return confirm_end(self, reason, [=] { end(reason); });
    },
    [=](preempt_atom, const std::string& why) {
      self->state.log(why + " again; the chief is ending the run already");
    },
    [=](lost_atom, const node_loss& loss) {
      if (loss.kind == node_loss::chief_node) {
        self->state.log("the chief's node went down (" + loss.reason
                        + ") after the preemption; ending now");
        end("preempted; the chief went down (" + loss.reason + ")");
        return;
      }
      // The worker stops with the chief at the end of the run; the
      // chief's word follows.
      self->state.log(loss.name + " went away (" + loss.reason + ")");
    },
    [=](deadline_atom, uint64_t wait) {
      auto& st = self->state;
      if (wait != id)
        return;
      st.log("no word from the chief (" + st.cfg.chief + " at "
             + st.cfg.chief_address + ") within "
             + std::to_string(st.cfg.preempt_wait.count())
             + " ms after the preemption; ending without it");
      end("preempted; no word from the chief");
    });
}

} // namespace

supervisor_actor::behavior_type supervisor(self_ptr self,
                                           supervisor_config cfg) {
  auto& st = self->state;
  st.watch.emplace(cfg.chief, cfg.peers);
  st.cfg = std::move(cfg);
  self->attach_functor([stop = st.to_stop] { stop_connectors(*stop); });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto why = self->system().render(dm.reason);
    if (auto loss = self->state.watch->went_down(dm.source, why))
      self->send(me_of(self), lost_atom::value, std::move(*loss));
  });
  return connecting(self);
}

} // namespace syncfac
