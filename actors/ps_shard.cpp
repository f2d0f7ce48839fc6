#include "actors/ps_shard.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <variant>

#include <caf/event_based_actor.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/ps_shard_parts.hpp"
#include "actors/role_snapshots.hpp"
#include "actors/spawn_validated.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

using namespace ps_shard_parts;

namespace {

using self_ptr = ps_actor::stateful_pointer<ps_shard_state>;

/// Answers the pending norm request once every gradient it waits for is
/// in.
void finish_pending_norm(ps_shard_state& st) {
  if (!st.pending_norm || !all_ready(st, st.pending_norm->n))
    return;
  auto pending = std::move(*st.pending_norm);
  st.pending_norm.reset();
  st.counters.sent.add();
  deliver(pending.promise, norm_of_round(st, pending.n));
}

/// Answers the pending apply once the last gradient it waits for is in.
void finish_pending(ps_shard_state& st) {
  finish_pending_norm(st);
  if (!st.pending || !all_ready(st, st.pending->n))
    return;
  auto pending = std::move(*st.pending);
  st.pending.reset();
  auto result = complete(st, pending.n, pending.scale);
  st.counters.sent.add();
  deliver(pending.promise, std::move(result));
  release_due_pulls(st);
}

/// Sets the timer for the earliest waiting pull's deadline, unless one is
/// set already (it sets the next when it fires).
void schedule_expiry(self_ptr self) {
  auto& st = self->state;
  auto next = st.waiting_pulls.next_deadline();
  if (st.expiry_set || !next)
    return;
  st.expiry_set = true;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    *next - pull_waitlist::clock_type::now());
  self->delayed_send(self, std::max(left, std::chrono::milliseconds{1}),
                     expire_atom::value);
}

} // namespace

// -- state --------------------------------------------------------------------

ps_shard_state::~ps_shard_state() {
  abandon_pending(*this, ec::peer_down, "the shard stopped");
  for (auto& p : waiting_pulls.take_all())
    p.promise.deliver(make_error(ec::peer_down,
                                 shard_name(index) + ": stopped while a pull "
                                   "waited for step "
                                   + std::to_string(p.step)));
}

std::optional<size_t>
ps_shard_state::kfac_layer(const std::string& name) const {
  auto i = std::find_if(kfac.begin(), kfac.end(),
                        [&](const shard_kfac_layer& l) {
                          return l.info.name == name;
                        });
  if (i == kfac.end())
    return std::nullopt;
  return static_cast<size_t>(i - kfac.begin());
}

// -- behaviour ----------------------------------------------------------------

namespace {

/// The chief's apply of step `step` over n gradients, every average times
/// `scale`: at once when every gradient is in, else once the last comes.
caf::result<applied> begin_apply(self_ptr self,
                                 int64_t step, int64_t n, float scale) {
  auto& st = self->state;
  if (auto err = check_apply(st, step, n)) {
    st.counters.sent.add();
    return err;
  }
  if (all_ready(st, n)) {
    st.counters.sent.add();
    auto result = complete(st, n, scale);
    release_due_pulls(st);
    return result;
  }
  st.pending = pending_apply{self->make_response_promise<applied>(), n, step,
                             scale};
  return st.pending->promise;
}

/// A pull for `step` (checked row requests, or none: every variable
/// whole): answered at once when the shard is there, else held until it
/// is or `wait_ms` ran out.
caf::result<shard_params> pull_at(self_ptr self, int64_t step,
                                  int64_t wait_ms,
                                  std::vector<row_request> rows) {
  auto& st = self->state;
  if (wait_ms < 0)
    return make_error(ec::invalid_argument,
                      shard_name(st.index)
                        + ": a pull's wait must be >= 0 ms, got "
                        + std::to_string(wait_ms));
  if (st.counters.global_step >= step) {
    auto values = current_values(st, rows);
    if (!values)
      return std::move(values.error());
    return std::move(*values);
  }
  ++st.counters.pulls_waited;
  // Before the promise: making it takes the sender out of the message.
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto rp = self->make_response_promise<shard_params>();
  st.waiting_pulls.add(waiting_pull{
    rp, step, std::move(sender),
    pull_waitlist::clock_type::now() + std::chrono::milliseconds{wait_ms},
    std::move(rows)});
  schedule_expiry(self);
  return rp;
}

ps_actor::behavior_type ps_shard(self_ptr self, ps_shard_config cfg) {
  end_program_on_exception(self, "PS shard");
  if (auto err = init_state(self->state, std::move(cfg))) {
    // Only reachable when spawned around spawn_ps_shard, which validates.
    self->quit(std::move(err));
    return ps_actor::behavior_type::make_empty_behavior();
  }
  return {
    [=](push_atom, gradient_push& part) -> caf::result<push_ack> {
      auto& st = self->state;
      auto whole = st.assembler->add(std::move(part));
      if (!whole) {
        ++st.counters.refused_pushes;
        return prefixed(shard_name(st.index), whole.error());
      }
      // A part taken, the rest of the push still to come.
      st.counters.sent.add(); // the answer, whichever of the ones below
      if (!*whole)
        return push_ack{true, st.counters.global_step};
      // The step the push was judged against, even when it completes a
      // pending apply below and moves the shard on.
      auto step = st.counters.global_step;
      auto fresh = take_push(st, **whole);
      if (!fresh)
        return std::move(fresh.error());
      if (*fresh) {
        ++st.counters.accepted_pushes;
        ++st.round_pushes;
        finish_pending(st);
      } else {
        ++st.counters.stale_pushes;
      }
      return push_ack{*fresh, step};
    },
    [=](pull_atom) -> shard_params { return current_values(self->state); },
    [=](pull_atom, int64_t step,
        int64_t wait_ms) -> caf::result<shard_params> {
      return pull_at(self, step, wait_ms, {});
    },
    [=](pull_atom, int64_t step, int64_t wait_ms,
        std::vector<row_request>& rows) -> caf::result<shard_params> {
      if (auto err = check_row_requests(self->state, rows))
        return err;
      return pull_at(self, step, wait_ms, std::move(rows));
    },
    [=](pull_atom, cancel_atom) {
      auto& st = self->state;
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      for (auto& p : st.waiting_pulls.take_from(sender))
        if (p.rows.empty())
          answer_without_values(st, p);
        else
          answer_with_rows(st, p);
    },
    [=](expire_atom) {
      auto& st = self->state;
      st.expiry_set = false;
      for (auto& p :
           st.waiting_pulls.take_expired(pull_waitlist::clock_type::now()))
        answer_without_values(st, p);
      schedule_expiry(self);
    },
    [=](pull_atom, average_atom) -> shard_params {
      auto& st = self->state;
      st.counters.sent.add(value_count(st.averages)
                  * static_cast<int64_t>(sizeof(float)));
      return {st.index, st.counters.global_step, st.averages};
    },
    [=](apply_atom, int64_t step, int64_t n) -> caf::result<applied> {
      return begin_apply(self, step, n, 1.0f);
    },
    [=](apply_atom, int64_t step, int64_t n,
        gradient_scale scale) -> caf::result<applied> {
      auto f = scale.factor;
      if (!(f > 0.0f && f <= 1.0f)) {
        self->state.counters.sent.add();
        return make_error(ec::invalid_argument,
                          shard_name(self->state.index)
                            + ": apply: a clip factor must be in (0, 1], "
                              "got "
                            + std::to_string(f));
      }
      return begin_apply(self, step, n, f);
    },
    [=](norm_atom, int64_t step, int64_t n) -> caf::result<norm_part> {
      auto& st = self->state;
      if (auto err = check_apply(st, step, n, "norm")) {
        st.counters.sent.add();
        return err;
      }
      if (all_ready(st, n)) {
        st.counters.sent.add();
        return norm_of_round(st, n);
      }
      st.pending_norm = norm_request{
        self->make_response_promise<norm_part>(), n, step};
      return st.pending_norm->promise;
    },
    [=](set_step_atom, int64_t step) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (step < 0)
        return make_error(ec::invalid_argument,
                          shard_name(st.index)
                            + ": set_step needs a step >= 0, got "
                            + std::to_string(step));
      // The chief (re)started and re-synchronises: whoever asked for the
      // pending apply no longer waits for it.
      abandon_pending(st, ec::invalid_argument,
                      "the global step was set to " + std::to_string(step));
      set_global_step(st, step);
      st.counters.sent.add();
      release_due_pulls(st);
      return caf::ok_atom::value;
    },
    [=](inverse_atom, const inverse_set& set) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = install_inverses(st, set)) {
        ++st.counters.refused_inverses;
        return err;
      }
      return caf::ok_atom::value;
    },
    [=](checkpoint_atom) -> shard_snapshot {
      return take_snapshot(self->state);
    },
    [=](restore_atom, shard_snapshot& snap) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      auto step = snap.global_step;
      if (auto err = restore_snapshot(st, std::move(snap)))
        return err;
      abandon_pending(st, ec::invalid_argument,
                      "the shard was restored to step " + std::to_string(step));
      release_due_pulls(st);
      return caf::ok_atom::value;
    },
    [=](status_atom) -> shard_status {
      return make_status(self->state);
    },
  };
}

} // namespace

caf::expected<ps_actor> spawn_ps_shard(caf::actor_system& sys,
                                       ps_shard_config cfg) {
  return spawn_validated(sys, ps_shard, std::move(cfg));
}

} // namespace syncfac
