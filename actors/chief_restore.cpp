// The chief supervisor's restores from a checkpoint and the workers' start
// and rebind (actors/chief_supervisor_parts.hpp): requests, each bounded
// by the request timeout and naming the role an error is about.

#include "actors/chief_supervisor_parts.hpp"
#include "actors/role_names.hpp"

namespace syncfac::chief_supervision {

namespace {

/// Asks `target` for its snapshot (which names its variables or layers),
/// fills that from the checkpoint and sends it back to restore; then
/// `next` (an error names `who`). Nothing more once the chain is not
/// `wanted` (its attempt was given up).
template <class Snapshot, class Handle>
void restore_one(self_ptr self, const Handle& target,
                 std::shared_ptr<const restored_run> run,
                 const std::string& who, still_wanted wanted,
                 std::function<void(caf::error)> next) {
  auto timeout = self->state.cfg.request_timeout;
  self->request(target, timeout, checkpoint_atom::value)
    .then(
      [=](Snapshot& snap) {
        if (!wanted())
          return;
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

/// Restores shard `i` and those after it from `run`, counting the
/// variables they took; then `next`.
void restore_shards_from(self_ptr self, size_t i,
                         std::shared_ptr<const restored_run> run,
                         std::shared_ptr<size_t> restored, still_wanted wanted,
                         std::function<void(caf::error)> next) {
  auto& st = self->state;
  if (i == st.roles.shards.size())
    return next(check_all_restored(*run, *restored));
  auto shard = st.roles.shards[i];
  auto who = shard_role(i);
  restore_one<shard_snapshot>(
    self, shard, run, who, wanted, [=](caf::error err) {
      if (err || !wanted())
        return next(std::move(err));
      self->request(shard, self->state.cfg.request_timeout, pull_atom::value)
        .then(
          [=](shard_params& p) {
            *restored += p.values.size();
            restore_shards_from(self, i + 1, run, restored, wanted, next);
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

} // namespace

void restore_covariance(self_ptr self, std::vector<size_t> which,
                        std::shared_ptr<const restored_run> run,
                        still_wanted wanted,
                        std::function<void(caf::error)> next) {
  if (which.empty() || !run)
    return next(caf::none);
  auto c = which.front();
  which.erase(which.begin());
  auto who = "covariance:" + std::to_string(c);
  restore_one<covariance_snapshot>(
    self, self->state.roles.covariance[c], run, who, wanted,
    [=](caf::error err) {
      if (err || !wanted())
        return next(std::move(err));
      restore_covariance(self, which, run, wanted, next);
    });
}

void restore_shards(self_ptr self, std::shared_ptr<const restored_run> run,
                    still_wanted wanted, std::function<void(caf::error)> next) {
  restore_shards_from(self, 0, std::move(run), std::make_shared<size_t>(0),
                      std::move(wanted), std::move(next));
}

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

} // namespace syncfac::chief_supervision
