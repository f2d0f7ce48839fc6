// The worker initialising, resuming and rebinding.

#include "actors/worker_parts.hpp"

namespace syncfac::worker_parts {

// -- initialising, resuming, rebinding ----------------------------------------

/// Learns the model's variables and which shard holds each, and starts at
/// the shards' global step (TF's local_step_init_op); a step or run asked
/// for meanwhile begins once that is done.
void initialise(self_ptr self) {
  auto& st = self->state;
  self->become(initialising(self));
  auto on_pulled = [=](std::vector<shard_params> pulled) {
    auto& st = self->state;
    // absorb() refuses variables the model lacks; names stay readable
    // after it moved the values out.
    if (auto err = absorb(self, pulled))
      return fail(self, std::move(err));
    std::vector<size_t> shard_of(st.params.size(), st.cfg.shards.size());
    for (size_t s = 0; s < pulled.size(); ++s)
      for (auto& v : pulled[s].values)
        shard_of[st.slot_of[v.name]] = s;
    for (size_t i = 0; i < st.params.size(); ++i)
      if (shard_of[i] == st.cfg.shards.size())
        return fail(self, make_error(ec::unknown_name,
                                     st.who() + ": no PS shard holds '"
                                       + st.params[i].name + "'"));
    st.shard_of = std::move(shard_of);
    // A resume point that came first (a restored run) wins over a pull
    // answered before the restore reached the shards.
    auto pulled_step = pulled.empty() ? 0 : pulled.front().global_step;
    st.params_step = pulled_step;
    st.counters.local_step = std::max(st.counters.local_step, pulled_step);
    if (st.asked)
      start_loop(self);
    else
      self->become(ready(self));
  };
  auto on_model = [=](model_info& info) {
    auto& st = self->state;
    st.params = std::move(info.initial);
    st.slot_of.clear();
    for (size_t i = 0; i < st.params.size(); ++i)
      st.slot_of[st.params[i].name] = i;
    pull_all(self, st.cfg.request_timeout,
             bound<std::vector<shard_params>>(self, on_pulled),
             bound<size_t, caf::error>(self, [=](size_t s, caf::error err) {
               lose_peer(self, "first pull from ps:" + std::to_string(s),
                         std::move(err));
             }));
  };
  self->request(st.cfg.device, st.cfg.request_timeout, load_model_atom::value,
                st.cfg.model, st.cfg.seed)
    .then(bound<model_info&>(self, on_model),
          bound<caf::error&>(self, [=](caf::error& err) {
            fail(self, request_failed(self, "model load", std::move(err)));
          }));
}

/// Takes a resume point's data position (when it has one) and run
/// incarnation; refuses a negative step.
caf::error take_resume_point(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (rp.global_step < 0)
    return make_error(ec::invalid_argument,
                      st.who() + ": resume at negative step "
                        + std::to_string(rp.global_step));
  if (rp.has_data_order)
    if (auto err = st.batches->restore(rp.data_order))
      return with_context(err, st.who() + ": data order to resume from");
  st.incarnation = rp.incarnation;
  return caf::none;
}

/// Starts from a restored checkpoint: its step (values pulled at an
/// earlier one are out of date, so the first step pulls again) and its
/// data position.
caf::error resume(self_ptr self, const resume_point& rp) {
  auto& st = self->state;
  if (auto err = take_resume_point(self, rp))
    return err;
  st.counters.local_step = std::max(st.counters.local_step, rp.global_step);
  return caf::none;
}

void begins_at_first_pull(self_ptr) {
  // initialise()'s end starts the loop of the caller it finds.
}

/// Takes a step or run request: its caller and how far it asked to go.
caf::result<worker_status> begin(self_ptr self, step_mode mode,
                                 then_begin then) {
  auto& st = self->state;
  if (st.asked)
    return make_error(ec::invalid_argument,
                      st.who() + ": already running a step");
  // The statistics role runs until stopped (the driver's exit), not step
  // by step.
  st.mode = st.cfg.role == worker_role::statistics ? step_mode::until_stop
                                                   : mode;
  st.promise = self->make_response_promise<worker_status>();
  st.asked = true;
  then(self);
  return st.promise;
}

/// Goes on with another chief and shards after a fault, from `rp`: the
/// step abandoned, local_step set to the resume point's (lower after a
/// rollback to a checkpoint) and, when it has one, the data position.
caf::result<worker_status> rebind(self_ptr self, bound_now now,
                                  const resume_point& rp, chief_actor chief,
                                  std::vector<ps_actor> shards,
                                  std::vector<covariance_actor> covariance) {
  auto& st = self->state;
  if (!chief || shards.size() != st.cfg.shards.size()
      || std::any_of(shards.begin(), shards.end(),
                     [](const ps_actor& s) { return !s; }))
    return make_error(ec::invalid_argument,
                      st.who() + ": rebinding needs a chief and "
                        + std::to_string(st.cfg.shards.size())
                        + " PS shard(s), got "
                        + std::to_string(shards.size()));
  if (!covariance.empty() && !st.cfg.covariance.empty()
      && covariance.size() != st.cfg.covariance.size())
    return make_error(ec::invalid_argument,
                      st.who() + ": rebinding with "
                        + std::to_string(covariance.size())
                        + " covariance actors, the worker sends to "
                        + std::to_string(st.cfg.covariance.size()));
  // Bound to this incarnation of the run already and going on (the
  // chief's driver rebound it; its node's rejoin comes second): giving the
  // step up now would waste a token it may be waiting for, and without
  // backups the steps would wait for it forever.
  if (now == bound_now::going_on && st.counters.rebinds > 0
      && rp.incarnation == st.incarnation && st.cfg.chief == chief)
    return st.status();
  // The abandoned step's update was not applied when the run goes on at
  // that very step with the shards' state kept (a restarted chief, a lost
  // K-FAC role): its batch is taken again, so that no batch is skipped.
  // Its gradient may be in the shards' sums already; the same batch at
  // the same parameters gives the same gradient, so with one worker the
  // average is unchanged and the run stays bit for bit an undisturbed
  // one (docs/design.md §6). A rollback brings a data position instead.
  if (!rp.has_data_order && rp.global_step == st.counters.local_step && st.step_data
      && st.cfg.role == worker_role::gradients)
    if (auto err = st.batches->restore(*st.step_data))
      return with_context(err, st.who() + ": data position of the "
                                          "abandoned step");
  if (auto err = take_resume_point(self, rp))
    return err;
  // A new binding: whatever the old one has in flight is answered to
  // nothing (worker_binding.hpp).
  st.bound = std::make_shared<worker_binding>(st.cfg.covariance.size());
  // The device's tables are sent whole with the next step: simpler than
  // knowing which rows the abandoned binding's requests carried.
  st.device_tables_current = false;
  st.rows_for_device.clear();
  if (st.cfg.role == worker_role::gradients && st.cfg.chief != chief) {
    self->unlink_from(st.cfg.chief);
    self->link_to(chief);
  }
  st.cfg.chief = std::move(chief);
  st.cfg.shards = std::move(shards);
  if (!covariance.empty() && !st.cfg.covariance.empty())
    st.cfg.covariance = std::move(covariance);
  ++st.counters.rebinds;
  // Whoever started the abandoned run (a chief that may be gone) hears
  // how far it went; the new run's caller gets the next answer.
  if (st.promise.pending())
    st.promise.deliver(st.status());
  st.asked = false;
  st.counters.local_step = rp.global_step;
  st.stats_step = rp.global_step - 1;
  st.params_step.reset();
  // The first pull never came (the loss was a shard's, before it): the
  // new binding initialises again.
  if (!st.initialised()) {
    initialise(self);
    return begin(self, step_mode::until_stop, begins_at_first_pull);
  }
  return begin(self, step_mode::until_stop, start_loop);
}

} // namespace syncfac::worker_parts
