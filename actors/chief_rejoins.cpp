// A gradient worker task that (re)started, or whose node reached the chief
// again, asks where it rejoins (actors/chief.hpp). While the steps run the
// answer is the step now; while they cannot go on (a lost role is being
// brought back) the request is held and answered where they go on from,
// so that the node asks once and waits, bounded by its own max wait,
// instead of asking again on a timer.

#include "actors/chief_parts.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

std::string worker_name(int32_t worker) {
  return "worker " + std::to_string(worker);
}

} // namespace

void held_rejoins::hold(int32_t worker,
                        caf::typed_response_promise<resume_point> promise,
                        std::string why) {
  auto i = by_worker.find(worker);
  if (i != by_worker.end()) {
    i->second.promise.deliver(make_error(
      ec::unavailable, "chief: " + worker_name(worker)
                         + " asked again where it rejoins; this earlier "
                           "request is dropped"));
    by_worker.erase(i);
  }
  by_worker.emplace(worker, held{std::move(promise), std::move(why)});
}

void held_rejoins::fail_all(const std::string& end) {
  for (auto& [worker, h] : by_worker)
    h.promise.deliver(make_error(ec::unavailable,
                                 "chief: " + worker_name(worker)
                                   + " cannot rejoin: its request waited "
                                     "while "
                                   + h.why + ", and " + end));
  by_worker.clear();
}

namespace chief_parts {

namespace {

caf::error check_worker(self_ptr self, int32_t worker) {
  const auto& st = self->state;
  if (worker < 0 || worker >= st.cfg.worker_replicas)
    return make_error(ec::invalid_argument,
                      "chief: no gradient worker " + std::to_string(worker)
                        + " (the run has "
                        + std::to_string(st.cfg.worker_replicas) + ")");
  return caf::none;
}

/// Where `worker` resumes now: the step, the incarnation and its newest
/// data position.
resume_point resume_here(self_ptr self, int32_t worker) {
  auto& st = self->state;
  // Counted here; a worker rebound by a rollback instead counts with its
  // first report after its loss (take_report).
  auto& rec = st.workers[static_cast<size_t>(worker)];
  if (rec.losses > rec.rejoins)
    ++rec.rejoins;
  resume_point rp;
  rp.global_step = st.global_step;
  rp.incarnation = st.incarnation;
  if (const auto* p = st.positions.newest(worker)) {
    rp.has_data_order = true;
    rp.data_order = p->data;
  }
  note(self, "chief: " + worker_name(worker) + " rejoins at global step "
               + std::to_string(st.global_step));
  return rp;
}

} // namespace

caf::result<resume_point> rejoin(self_ptr self, int32_t worker) {
  if (auto err = check_worker(self, worker))
    return err;
  return resume_here(self, worker);
}

caf::result<resume_point> hold_rejoin(self_ptr self, int32_t worker,
                                      std::string why) {
  if (auto err = check_worker(self, worker))
    return err;
  auto promise = self->make_response_promise<resume_point>();
  note(self, "chief: " + worker_name(worker) + " asks where it rejoins while "
               + why + "; answered when the steps go on");
  self->state.rejoins.hold(worker, promise, std::move(why));
  return promise;
}

void answer_held_rejoins(self_ptr self) {
  auto held = std::move(self->state.rejoins.by_worker);
  self->state.rejoins.by_worker.clear();
  for (auto& [worker, h] : held)
    h.promise.deliver(resume_here(self, worker));
}

void fail_held_rejoins(self_ptr self, const std::string& why) {
  self->state.rejoins.fail_all(why);
}

} // namespace chief_parts

} // namespace syncfac
