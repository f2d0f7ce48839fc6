// The chief's checkpoints (actors/chief_checkpoints.hpp): the snapshots of
// every PS shard and covariance actor for one step, the workers' data
// positions, the writer's answer.

#include "actors/chief_checkpoints.hpp"

#include <utility>

#include "actors/chief_parts.hpp"
#include "actors/gather.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

// -- worker_positions ---------------------------------------------------------

void worker_positions::record(worker_position p) {
  auto& q = by_worker_[static_cast<size_t>(p.worker)];
  q.push_back(std::move(p));
  while (q.size() > 4)
    q.pop_front();
}

bool worker_positions::complete_for(int64_t step) const {
  for (const auto& q : by_worker_)
    if (q.empty() || q.back().local_step < step - 1)
      return false;
  return true;
}

std::vector<worker_position>
worker_positions::for_checkpoint_of(int64_t step) const {
  std::vector<worker_position> out;
  for (const auto& q : by_worker_) {
    const worker_position* best = nullptr;
    for (const auto& p : q)
      if (p.local_step <= step - 1)
        best = &p;
    if (best)
      out.push_back(*best);
  }
  return out;
}

const worker_position* worker_positions::newest(int32_t worker) const {
  const auto& q = by_worker_[static_cast<size_t>(worker)];
  return q.empty() ? nullptr : &q.back();
}

void worker_positions::roll_back(int64_t step,
                                 const std::vector<resume_point>& points) {
  for (auto& q : by_worker_)
    q.clear();
  for (size_t i = 0; i < points.size() && i < by_worker_.size(); ++i)
    if (points[i].has_data_order)
      by_worker_[i].push_back(worker_position{static_cast<int32_t>(i), step,
                                              points[i].data_order});
}

// -- chief_checkpoints --------------------------------------------------------

bool chief_checkpoints::due(const chief_config& cfg, int64_t step) {
  if (!cfg.checkpointer || step == cfg.start_step)
    return false;
  return step == cfg.steps
         || (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0);
}

std::shared_ptr<pending_checkpoint> chief_checkpoints::begin(int64_t step) {
  pending = std::make_shared<pending_checkpoint>();
  pending->step = step;
  pending->contents.global_step = step;
  newest_step = step;
  ++in_flight;
  return pending;
}

bool chief_checkpoints::ready_to_write(
  const worker_positions& positions) const {
  return pending && pending->snapshots_in
         && (pending->grace_over || positions.complete_for(pending->step));
}

bool chief_checkpoints::settle(const caf::expected<checkpoint_written>& res) {
  if (res) {
    ++written;
    last_path = res->path;
  } else {
    errors.push_back(render(res.error()));
  }
  return --in_flight == 0;
}

std::function<void()> chief_checkpoints::take_when_settled() {
  if (in_flight > 0)
    return nullptr;
  return std::exchange(when_settled, nullptr);
}

// -- the chief's side ---------------------------------------------------------

namespace chief_parts {

namespace {

void checkpoint_done(self_ptr self, caf::expected<checkpoint_written> res) {
  auto& st = self->state;
  st.checkpoints.settle(res);
  if (st.cfg.on_checkpoint)
    st.cfg.on_checkpoint(res);
  if (auto then = st.checkpoints.take_when_settled())
    then();
}

void try_write_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (!st.checkpoints.ready_to_write(st.positions))
    return;
  auto contents = std::move(st.checkpoints.pending->contents);
  st.checkpoints.pending.reset();
  auto step = contents.global_step;
  contents.data_order = st.positions.for_checkpoint_of(step);
  self->request(st.cfg.checkpointer, st.cfg.step_timeout,
                checkpoint_atom::value, std::move(contents))
    .then([=](checkpoint_written& w) { checkpoint_done(self, std::move(w)); },
          [=](caf::error& err) {
            checkpoint_done(self, with_context(err, "checkpoint of step "
                                                      + std::to_string(step)));
          });
}

/// A continuation of the pending checkpoint `p`: runs `f(xs...)` while it
/// is the one pending, nothing once it is written or dropped.
template <class... Ts, class F>
auto while_pending(const std::shared_ptr<pending_checkpoint>& p, F f) {
  return [w = std::weak_ptr<pending_checkpoint>{p}, f = std::move(f)](
           Ts... xs) {
    if (auto p = w.lock())
      f(*p, std::forward<Ts>(xs)...);
  };
}

} // namespace

void begin_checkpoint(self_ptr self) {
  auto& st = self->state;
  auto step = st.global_step;
  if (auto& earlier = st.checkpoints.pending) {
    // The previous one still waits: write it with the positions known.
    earlier->grace_over = true;
    try_write_checkpoint(self);
    if (st.checkpoints.pending) {
      st.checkpoints.errors.push_back(
        "checkpoint of step " + std::to_string(step)
        + " skipped: the snapshots of step "
        + std::to_string(st.checkpoints.pending->step)
        + " were still being taken");
      return;
    }
  }
  auto pending = st.checkpoints.begin(step);
  // Dropped already (a role's loss) is counted then.
  auto failed = [=](pending_checkpoint&, std::string who, caf::error err) {
    self->state.checkpoints.pending.reset();
    checkpoint_done(self, make_error(ec::peer_down,
                                     "checkpoint of step "
                                       + std::to_string(step) + ": snapshot of "
                                       + who + ": " + render(err)));
  };
  gather<shard_snapshot>(
    self, st.cfg.shards, st.cfg.request_timeout,
    while_pending<std::vector<shard_snapshot>>(
      pending,
      [=](pending_checkpoint& p, std::vector<shard_snapshot> shards) {
        p.contents.shards = std::move(shards);
        auto& st = self->state;
        gather<covariance_snapshot>(
          self, st.cfg.covariance, st.cfg.request_timeout,
          while_pending<std::vector<covariance_snapshot>>(
            st.checkpoints.pending,
            [=](pending_checkpoint& p, std::vector<covariance_snapshot> covs) {
              p.contents.covariance = std::move(covs);
              p.snapshots_in = true;
              try_write_checkpoint(self);
            }),
          while_pending<size_t, caf::error>(
            st.checkpoints.pending,
            [=](pending_checkpoint& p, size_t i, caf::error err) {
              failed(p, "covariance actor " + std::to_string(i),
                     std::move(err));
            }),
          checkpoint_atom::value);
      }),
    while_pending<size_t, caf::error>(
      pending,
      [=](pending_checkpoint& p, size_t i, caf::error err) {
        failed(p, shard_role(i), std::move(err));
      }),
    checkpoint_atom::value);
  self->delayed_send(caf::actor_cast<chief_actor>(self),
                     st.cfg.checkpoint_grace, checkpoint_atom::value, step);
}

void record_position(self_ptr self, const worker_report& rep) {
  self->state.positions.record(
    worker_position{rep.worker, rep.local_step, rep.data});
  try_write_checkpoint(self);
}

void checkpoint_grace_over(self_ptr self, int64_t step) {
  auto& pending = self->state.checkpoints.pending;
  if (pending && pending->step == step) {
    pending->grace_over = true;
    try_write_checkpoint(self);
  }
}

bool abandon_checkpoint(self_ptr self, const std::string& task) {
  auto& st = self->state;
  if (!st.checkpoints.pending)
    return false;
  auto step = st.checkpoints.pending->step;
  st.checkpoints.pending.reset();
  checkpoint_done(self, make_error(ec::peer_lost,
                                   "checkpoint of step " + std::to_string(step)
                                     + ": " + task
                                     + " was lost before its snapshot"));
  return true;
}

void when_checkpoints_settled(self_ptr self, std::function<void()> then) {
  auto& st = self->state;
  if (st.checkpoints.in_flight == 0)
    return then();
  st.checkpoints.when_settled = std::move(then);
}

} // namespace chief_parts

} // namespace syncfac
