// The worker failing, stalling on a lost peer, and giving the wait up.

#include "actors/worker_parts.hpp"

namespace syncfac::worker_parts {

void fail(self_ptr self, caf::error err) {
  auto& st = self->state;
  if (st.promise.pending())
    st.promise.deliver(err);
  self->quit(std::move(err));
}

/// Wraps a failed request into an error naming the worker and the request.
caf::error request_failed(self_ptr self, const std::string& what,
                          caf::error err) {
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout, self->state.who() + ": no answer to "
                                     + what + " in time");
  return make_error(ec::peer_down, self->state.who() + ": " + what
                                     + " failed: " + render(err));
}

/// The chief or a shard did not answer (a broken connection, a dead or
/// frozen process): in a cluster the worker abandons its step (the binding
/// ends) and waits, bounded by peer_wait, for a chief to rebind it;
/// otherwise it fails. An error the peer answered with (a refused push, a
/// failed run) is no loss. Without a binding in force the worker is
/// stalled already: the first loss is the one it waits on.
void stall(self_ptr self, std::string reason) {
  auto& st = self->state;
  if (!st.bound)
    return;
  st.bound.reset();
  auto loss = ++st.counters.peers_lost;
  // The deadline names its loss: one of an earlier stall, since rebound,
  // finds a later stalled behaviour waiting on another.
  self->delayed_send(self, st.cfg.peer_wait, stall_atom::value, loss);
  // The actor system's clock (a test's clock on the test scheduler).
  self->become(stalled(self, loss, std::move(reason), self->clock().now()));
}

void lose_peer(self_ptr self, const std::string& what, caf::error err) {
  if (self->state.cfg.peer_wait.count() == 0
      || err.category() != caf::atom("system"))
    return fail(self, request_failed(self, what, std::move(err)));
  stall(self, render(request_failed(self, what, std::move(err))));
}

/// The rebinding did not come within peer_wait of the loss.
void give_up_waiting(self_ptr self, const std::string& reason,
                     std::chrono::steady_clock::time_point since) {
  auto waited = std::chrono::duration_cast<std::chrono::seconds>(
    self->clock().now() - since);
  fail(self, make_error(ec::timeout,
                        self->state.who() + ": no chief rebound it within "
                          + std::to_string(waited.count())
                          + " s (--max_wait_ms) after: " + reason));
}

} // namespace syncfac::worker_parts
