#include "evaluator_member.hpp"

#include <algorithm>
#include <iostream>
#include <utility>

#include <caf/send.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/node.hpp"
#include "actors/preemption.hpp"
#include "actors/with_defaults.hpp"
#include "runtime/base/error.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/json.hpp"

using namespace syncfac;

namespace evaluator_role {

namespace {

using self_ptr = evaluator_actor::stateful_pointer<evaluator_state>;
using behavior = evaluator_actor::behavior_type;

/// Evaluations in a row that may fail before the evaluator gives up.
constexpr int max_failures = 3;

behavior waiting(self_ptr self);
behavior working(self_ptr self);
behavior peers_lost(self_ptr self);
behavior preempted(self_ptr self);
behavior finishing(self_ptr self);

evaluator_actor me_of(self_ptr self) {
  return caf::actor_cast<evaluator_actor>(self);
}

void say(self_ptr self, const std::string& line) {
  std::cout << self->state.cfg.me << ": " << line << std::endl;
}

/// To the chief's metrics sink, the log and --metrics.
void report(self_ptr self, const metrics_record& rec) {
  auto& st = self->state;
  st.last = rec.step;
  if (st.cfg.last_reported)
    st.cfg.last_reported->store(rec.step);
  // One-way: the chief never makes the evaluator wait, nor the reverse.
  caf::anon_send(st.cfg.sink, metrics_atom::value, rec);
  std::cout << to_log_line(rec) << std::endl;
  if (st.cfg.metrics && st.cfg.metrics->is_open()) {
    *st.cfg.metrics << record_json(rec) << '\n';
    st.cfg.metrics->flush();
  }
}

/// A new round: answers to the one before reach nothing.
void new_round(self_ptr self) {
  self->state.round = std::make_shared<const int>(0);
}

/// Asks every shard for its global step, each request bounded by
/// poll_timeout (short: a request in flight when a peer's connection
/// breaks may go unanswered with CAF 0.17), and calls `k` with the lowest,
/// or the first error, naming the shard; not when the round is over.
template <class K>
void poll_step(self_ptr self, K k) {
  struct answers {
    int64_t step = -1;
    size_t left = 0;
    bool failed = false;
  };
  auto& st = self->state;
  auto acc = std::make_shared<answers>();
  acc->left = st.cfg.shards.size();
  std::weak_ptr<const int> round = st.round;
  for (size_t s = 0; s < st.cfg.shards.size(); ++s)
    self->request(st.cfg.shards[s], st.cfg.poll_timeout, status_atom::value)
      .then(
        [=](shard_status& ss) mutable {
          if (acc->failed || !round.lock())
            return;
          acc->step = acc->step < 0 ? ss.global_step
                                    : std::min(acc->step, ss.global_step);
          if (--acc->left == 0)
            k(caf::expected<int64_t>{acc->step});
        },
        [=](caf::error& err) mutable {
          if (acc->failed || !round.lock())
            return;
          acc->failed = true;
          k(caf::expected<int64_t>{
            with_context(err, "ps:" + std::to_string(s))});
        });
}

/// Evaluates the shards' variables now and reports (marked final when
/// `final`); `k` gets true, false when the shards were mid-update
/// (ec::unavailable), or the error; not when the round is over.
template <class K>
void evaluate(self_ptr self, bool final, K k) {
  auto& st = self->state;
  std::weak_ptr<const int> round = st.round;
  // The role works through the whole held-out set: the time of one
  // request per slice.
  self->request(st.cfg.role, st.cfg.request_timeout * 4, eval_atom::value,
                st.cfg.shards)
    .then(
      [=](metrics_record& rec) mutable {
        if (!round.lock())
          return;
        if (final)
          rec.fields["final"] = 1;
        report(self, rec);
        k(caf::expected<bool>{true});
      },
      [=](caf::error& err) mutable {
        if (!round.lock())
          return;
        if (err.category() == error_category
            && err.code() == static_cast<uint8_t>(ec::unavailable))
          return k(caf::expected<bool>{false});
        k(caf::expected<bool>{std::move(err)});
      });
}

/// Evaluates the checkpoints of checkpoint_dir after the last one
/// reported, in step order, one at a time; one that does not read (corrupt,
/// or removed as too old meanwhile) is said and skipped. `k` gets the error
/// that ends it, or none; not when the round is over.
template <class K>
void evaluate_checkpoints(self_ptr self, bool final, K k) {
  auto& st = self->state;
  checkpoint_store store{st.cfg.checkpoint_dir};
  auto steps = store.list_steps();
  if (!steps)
    return k(steps.error());
  auto next = std::find_if(steps->begin(), steps->end(),
                           [&](int64_t step) { return step > st.last; });
  if (next == steps->end())
    return k(caf::error{});
  auto step = *next;
  bool last_one = final && step == steps->back();
  auto ckpt = store.load(step);
  if (!ckpt) {
    say(self, "checkpoint of step " + std::to_string(step)
                + " skipped: " + render(ckpt.error()));
    st.last = step;
    return evaluate_checkpoints(self, final, std::move(k));
  }
  std::weak_ptr<const int> round = st.round;
  auto path = ckpt->path;
  self->request(st.cfg.role, st.cfg.request_timeout * 4, eval_atom::value,
                step, checkpoint_variables(*ckpt))
    .then(
      [=](metrics_record& rec) mutable {
        if (!round.lock())
          return;
        rec.fields["checkpoint"] = 1;
        if (last_one)
          rec.fields["final"] = 1;
        report(self, rec);
        evaluate_checkpoints(self, final, std::move(k));
      },
      [=](caf::error& err) mutable {
        if (round.lock())
          k(with_context(err, path));
      });
}

/// Passes the stop signal on to the node's supervisor, which tells the
/// chief (it ends the run after the global step in flight) and bounds the
/// wait for its word.
void pass_on(self_ptr self, std::string signal) {
  caf::anon_send(self->state.cfg.supervisor, preempt_atom::value,
                 std::move(signal));
  self->become(preempted(self));
}

/// A round is over, or cut short: a stop signal that came meanwhile is
/// passed on; else the next poll, once no peer is missing.
void rest(self_ptr self) {
  auto& st = self->state;
  st.round.reset();
  if (!st.stop.empty())
    return pass_on(self, st.stop);
  if (!st.missing.empty())
    return self->become(peers_lost(self));
  self->become(waiting(self));
}

/// The shards' step, and an evaluation once K global steps passed since
/// the last one.
void poll_round(self_ptr self) {
  poll_step(self, [=](caf::expected<int64_t> step) {
    auto& st = self->state;
    if (!step) {
      // A shard that does not answer may be restarting: its node going
      // down reaches this role as a loss; else the next poll asks again.
      say(self, "a shard did not answer (" + render(step.error()) + ")");
      return rest(self);
    }
    if (*step < st.last) {
      say(self, "the global step went back from " + std::to_string(st.last)
                  + " to " + std::to_string(*step) + " (a shard restarted)");
      st.last = -1;
    }
    auto every = st.cfg.eval_every_steps;
    auto due = (std::max<int64_t>(st.last, 0) / every + 1) * every;
    if (*step < due)
      return rest(self);
    auto at = *step;
    evaluate(self, false, [=](caf::expected<bool> done) {
      auto& st = self->state;
      if (!done) {
        // A shard that went away mid-evaluation: its loss comes as a
        // message. Anything that keeps failing ends the evaluator.
        say(self, "evaluation at step " + std::to_string(at)
                    + " failed: " + render(done.error()));
        if (++st.failures >= max_failures)
          return self->quit(with_context(done.error(),
                                         std::to_string(max_failures)
                                           + " evaluations in a row "
                                             "failed"));
      } else if (*done) {
        st.failures = 0;
      }
      rest(self);
    });
  });
}

/// One round: new checkpoints, or the shards' step.
void start_round(self_ptr self) {
  new_round(self);
  self->become(working(self));
  if (self->state.cfg.checkpoint_dir.empty())
    return poll_round(self);
  evaluate_checkpoints(self, false, [=](caf::error err) {
    if (err)
      return self->quit(std::move(err));
    rest(self);
  });
}

/// `task` is connected again: its roles' new handles.
void back(self_ptr self, const std::string& task, const node_info& info) {
  auto& st = self->state;
  if (task == st.cfg.chief) {
    if (auto sink = role_of<metrics_actor>(info, "metrics"))
      st.cfg.sink = *sink;
    else
      say(self, render(sink.error()));
  } else if (auto t = task_id::parse(task);
             t && t->job == "ps" && t->index >= 0
             && static_cast<size_t>(t->index) < st.cfg.shards.size()) {
    if (auto shard = role_of<ps_actor>(info, task))
      st.cfg.shards[static_cast<size_t>(t->index)] = *shard;
    else
      say(self, render(shard.error()));
  }
  st.missing.erase(task);
  say(self, task + " is back");
}

/// The chief ended the run: the final evaluation, unless the run was
/// preempted (its grace period is short) or the last report is of the
/// last step already; answered once it is done, so that the chief keeps
/// the shards up meanwhile.
caf::result<caf::ok_atom> finish(self_ptr self, const std::string& reason) {
  new_round(self);
  self->become(finishing(self));
  if (is_preempted_run(reason))
    return caf::ok_atom::value;
  auto rp = self->make_response_promise<caf::ok_atom>();
  auto answer = [rp](caf::error err) mutable {
    if (err)
      rp.deliver(std::move(err));
    else
      rp.deliver(caf::ok_atom::value);
  };
  if (!self->state.cfg.checkpoint_dir.empty()) {
    // The chief wrote its last checkpoint before it ended the run.
    evaluate_checkpoints(self, true, answer);
    return rp;
  }
  poll_step(self, [=](caf::expected<int64_t> step) mutable {
    if (!step)
      return answer(with_context(step.error(), "final evaluation"));
    if (*step == self->state.last)
      return answer(caf::error{});
    evaluate(self, true, [=](caf::expected<bool> done) mutable {
      if (!done)
        return answer(with_context(done.error(), "final evaluation"));
      if (!*done)
        return answer(make_error(ec::internal,
                                 "final evaluation: the shards are at "
                                 "different steps after the run"));
      answer(caf::error{});
    });
  });
  return rp;
}

/// How a state treats a message it does not name itself: a lost peer cuts
/// the round short and is awaited; a peer back has its handles taken; the
/// end of the run is finished; a stop signal is passed on; a timer of
/// another state is over.
template <class... Own>
behavior state_of(self_ptr self, Own... own) {
  return with_defaults<behavior>(
    std::make_tuple(
      [=](lost_atom, const std::string& task, const std::string& why) {
        say(self, "the node of " + task + " went down (" + why + ")");
        self->state.missing.insert(task);
        rest(self);
      },
      [=](connect_atom, const std::string& task, const node_info& info) {
        back(self, task, info);
      },
      [=](shutdown_atom,
          const std::string& reason) -> caf::result<caf::ok_atom> {
        return finish(self, reason);
      },
      [](step_atom, uint64_t) {}, [](deadline_atom, uint64_t) {},
      [=](preempt_atom, const std::string& signal) { pass_on(self, signal); }),
    std::move(own)...);
}

/// The next poll is a timer message away.
behavior waiting(self_ptr self) {
  auto& st = self->state;
  auto tick = ++st.tick;
  self->delayed_send(me_of(self), st.cfg.poll, step_atom::value, tick);
  return state_of(self, [=](step_atom, uint64_t n) {
    if (n == self->state.tick)
      start_round(self);
  });
}

/// A poll or an evaluation is in flight.
behavior working(self_ptr self) {
  return state_of(self, [=](preempt_atom, const std::string& signal) {
    // After the evaluation in flight.
    self->state.stop = signal;
  });
}

/// A peer's node is down: the supervisor connects to it again, bounded by
/// max_wait; this waits as long, and a little more for the answer.
behavior peers_lost(self_ptr self) {
  auto& st = self->state;
  auto id = ++st.wait;
  auto bound = st.cfg.max_wait + st.cfg.request_timeout;
  self->delayed_send(me_of(self), bound, deadline_atom::value, id);
  return state_of(
    self,
    [=](connect_atom, const std::string& task, const node_info& info) {
      back(self, task, info);
      if (self->state.missing.empty())
        rest(self);
    },
    [=](deadline_atom, uint64_t n) {
      auto& st = self->state;
      if (n != st.wait)
        return;
      std::string who;
      for (const auto& t : st.missing)
        who += (who.empty() ? "" : ", ") + t;
      self->quit(make_error(ec::timeout,
                            st.cfg.me + ": " + who + " not back within "
                              + std::to_string(bound.count())
                              + " ms (--max_wait_ms)"));
    });
}

/// The stop signal was passed on: no more evaluations; the chief's word
/// is awaited (the supervisor bounds that, and ends the member without it).
behavior preempted(self_ptr self) {
  return state_of(
    self,
    [=](lost_atom, const std::string& task, const std::string& why) {
      say(self, "the node of " + task + " went down (" + why + ")");
      self->state.missing.insert(task);
    },
    [=](preempt_atom, const std::string& signal) {
      say(self, signal + " again; the chief is ending the run already");
    });
}

/// The chief ended the run: the final evaluation is in flight.
behavior finishing(self_ptr self) {
  return state_of(
    self,
    [=](lost_atom, const std::string& task, const std::string& why) {
      say(self, "the node of " + task + " went down (" + why + ")");
    },
    [](shutdown_atom, const std::string&) -> caf::result<caf::ok_atom> {
      return caf::ok_atom::value;
    },
    [=](preempt_atom, const std::string& signal) {
      say(self, signal + ": the run is ending already");
    });
}

} // namespace

std::string record_json(const metrics_record& rec) {
  json_object obj;
  obj.add("source", rec.source).add("step", rec.step);
  for (const auto& kvp : rec.fields)
    obj.add(kvp.first, kvp.second);
  return obj.str();
}

evaluator_actor::behavior_type
evaluator(evaluator_actor::stateful_pointer<evaluator_state> self,
          evaluator_config cfg) {
  self->state.cfg = std::move(cfg);
  return waiting(self);
}

} // namespace evaluator_role
