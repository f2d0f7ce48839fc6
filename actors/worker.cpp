#include "actors/worker.hpp"

#include "actors/worker_parts.hpp"

// The worker's states are behaviours (docs/design.md, "Failure model"):
//
//   initialising --first pull--> ready --step or run--> running
//   running --token, one step asked for--> ready
//   running --stop token--> stopped
//   any state but stalled --a lost chief or shard (peer_wait > 0)--> stalled
//   stalled --peer_wait ran out--> fails, naming what it lost
//   any state --rebind--> running (initialising when the first pull never
//                         came), the binding before it ended
//
// A step or run request while initialising begins once the first pull is
// done. What a binding sent is answered only while it is in force
// (actors/worker_binding.hpp), so a step it abandoned cannot go on behind
// the new one.

namespace syncfac {

std::string worker_state::who() const {
  return "worker " + std::to_string(cfg.index);
}

worker_status worker_state::status() const {
  auto result = counters;
  result.worker = cfg.index;
  return result;
}

namespace worker_parts {

// -- the states ---------------------------------------------------------------

// Handlers every state has.

/// A rebind (run_atom, resume point, chief, shards, covariance actors).
auto rebinds(self_ptr self, bound_now now) {
  return [=](run_atom, const resume_point& rp, chief_actor& chief,
             std::vector<ps_actor>& shards,
             std::vector<covariance_actor>& covariance) {
    return rebind(self, now, rp, std::move(chief), std::move(shards),
                  std::move(covariance));
  };
}

/// The deadline of a stall since rebound (only the stalled state waits on
/// one).
auto ignores_deadlines() {
  return [](stall_atom, int64_t) {};
}

auto reports(self_ptr self) {
  return [=](status_atom) { return self->state.status(); };
}

/// No step in progress: a step or run request begins, then `then`.
behavior waiting_to_step(self_ptr self, then_begin then) {
  return {
    [=](step_atom) { return begin(self, step_mode::one_step, then); },
    [=](run_atom) { return begin(self, step_mode::until_stop, then); },
    [=](run_atom, const resume_point& rp) -> caf::result<worker_status> {
      if (self->state.asked)
        return make_error(ec::invalid_argument,
                          self->state.who() + ": already running a step");
      if (auto err = resume(self, rp))
        return err;
      return begin(self, step_mode::until_stop, then);
    },
    rebinds(self, bound_now::going_on),
    ignores_deadlines(),
    reports(self),
  };
}

/// Loading the model and pulling the variables for the first time (at
/// spawn, or after a rebind when the first pull never came): a request
/// is kept for the first pull's end to begin.
behavior initialising(self_ptr self) {
  return waiting_to_step(self, begins_at_first_pull);
}

/// Initialised, no step in progress (before the first request, between
/// the steps of step requests): a request begins at once.
behavior ready(self_ptr self) {
  return waiting_to_step(self, start_loop);
}

/// A step loop in progress on the binding in force.
behavior running(self_ptr self) {
  auto busy = [=]() -> caf::error {
    return make_error(ec::invalid_argument,
                      self->state.who() + ": already running a step");
  };
  return {
    [=](step_atom) -> caf::result<worker_status> {
      auto& st = self->state;
      if (st.cfg.role != worker_role::statistics)
        return busy();
      // The statistics role's own wake-up (delayed_anon_send: no one
      // reads the answer); one of an earlier binding is not this loop's.
      if (st.bound->wake_pending) {
        st.bound->wake_pending = false;
        statistics_step(self);
      }
      return st.status();
    },
    [=](run_atom) -> caf::result<worker_status> { return busy(); },
    [=](run_atom, const resume_point&) -> caf::result<worker_status> {
      return busy();
    },
    rebinds(self, bound_now::going_on),
    ignores_deadlines(),
    reports(self),
  };
}

/// Lost a peer (loss number `loss`, `reason`) at `since`: no binding is in
/// force; waits for a rebind until the deadline of this loss.
behavior stalled(self_ptr self, int64_t loss, std::string reason,
                 std::chrono::steady_clock::time_point since) {
  auto waiting = [=]() -> caf::error {
    return make_error(ec::peer_lost,
                      self->state.who() + ": waiting to be rebound after: "
                        + reason);
  };
  return {
    [=](step_atom) -> caf::result<worker_status> { return waiting(); },
    [=](run_atom) -> caf::result<worker_status> { return waiting(); },
    [=](run_atom, const resume_point&) -> caf::result<worker_status> {
      return waiting();
    },
    rebinds(self, bound_now::not_going_on),
    [=](stall_atom, int64_t deadline_of) {
      if (deadline_of == loss)
        give_up_waiting(self, reason, since);
    },
    reports(self),
  };
}

/// A stop token came: requests are answered with the counters; a rebind
/// (a run that goes on after all) starts the loop again.
behavior stopped(self_ptr self) {
  return {
    [=](step_atom) { return self->state.status(); },
    [=](run_atom) { return self->state.status(); },
    [=](run_atom, const resume_point& rp) -> caf::result<worker_status> {
      if (auto err = resume(self, rp))
        return err;
      return self->state.status();
    },
    rebinds(self, bound_now::not_going_on),
    ignores_deadlines(),
    reports(self),
  };
}


} // namespace worker_parts

using namespace worker_parts;


caf::error worker_config::validate() const {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config,
                      "worker " + std::to_string(index) + ": " + what);
  };
  if (num_workers < 1 || index < 0 || index >= num_workers)
    return bad("index must be in [0, " + std::to_string(num_workers) + ")");
  if (batch_size < 1)
    return bad("batch_size must be at least 1");
  if (!data)
    return bad("no training data");
  if (!device)
    return bad("no device actor");
  if (!chief)
    return bad("no chief");
  if (shards.empty())
    return bad("no PS shards");
  if (request_timeout.count() <= 0 || token_timeout.count() <= 0)
    return bad("timeouts must be positive");
  if (peer_wait.count() < 0)
    return bad("peer_wait must not be negative");
  if (role == worker_role::statistics && (!stats || covariance.empty()))
    return bad("the statistics role needs a stats request and covariance "
               "actors");
  if (stats && covariance.empty())
    return bad("statistics requested but no covariance actor to send them to");
  for (const auto& [layer, c] : covariance_of)
    if (c < 0 || static_cast<size_t>(c) >= covariance.size())
      return bad("layer '" + layer + "' is assigned to covariance actor "
                 + std::to_string(c) + " of "
                 + std::to_string(covariance.size()));
  if (poll_interval.count() <= 0)
    return bad("poll_interval must be positive");
  return model.validate();
}

worker_actor::behavior_type worker(self_ptr self, worker_config cfg) {
  end_program_on_exception(self, "worker");
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.batches = batcher{*st.cfg.data, st.cfg.batch_size, st.cfg.seed,
                       st.cfg.index, st.cfg.num_workers};
  st.bound = std::make_shared<worker_binding>(st.cfg.covariance.size());
  // A gradient worker of a model with an embedding_bag pulls the rows of
  // the table its next batch looks up; the statistics role pulls whole.
  if (!st.cfg.whole_pulls && st.cfg.role == worker_role::gradients)
    st.row_table = looked_up_table(st.cfg.model.description);
  // The statistics go to covariance actors, which take a factor with fewer
  // rows than columns as its rows: far less to compute, send, check and
  // fold than the matrix (the ConvNet's dense A: 16 x 785 against 785²).
  if (st.cfg.stats)
    st.cfg.stats->rows = true;
  // Linked: a worker that fails takes the run down with its reason instead
  // of leaving the chief to time out, and a failed chief stops the worker.
  // A statistics worker takes no tokens and outlives nothing: it is not
  // part of the sync step, and the driver stops it.
  if (st.cfg.role == worker_role::gradients)
    self->link_to(st.cfg.chief);
  // A chief whose process or node went away is, in a cluster, a peer to
  // wait for (lose_peer); any other failure of the chief stops the worker.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (!msg.reason || msg.reason == caf::exit_reason::normal)
      return;
    auto& st = self->state;
    if (msg.reason == caf::exit_reason::remote_link_unreachable
        && msg.source == st.cfg.chief.address()
        && st.cfg.peer_wait.count() > 0) {
      stall(self, st.who() + ": lost the chief (its link broke)");
      return;
    }
    if (msg.source != st.cfg.chief.address()
        && msg.reason == caf::exit_reason::remote_link_unreachable)
      return; // an earlier chief, since replaced
    fail(self, std::move(msg.reason));
  });
  // Like TF's local_step_init_op at session creation: the worker learns the
  // global step now, not at its first step, so a late first step is stale.
  initialise(self);
  return initialising(self);
}

caf::expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                         worker_config cfg) {
  if (auto err = cfg.validate())
    return err;
  auto shard = batcher::make(*cfg.data, cfg.batch_size, cfg.seed, cfg.index,
                             cfg.num_workers);
  if (!shard)
    return shard.error();
  return sys.spawn(worker, std::move(cfg));
}

} // namespace syncfac
