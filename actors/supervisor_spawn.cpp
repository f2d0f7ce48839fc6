// spawn_supervisor (actors/supervisor.hpp): a node supervisor's
// configuration checked before it is spawned, each fault named by its
// field, so that the actor itself only ever runs on a sound one.

#include "actors/supervisor.hpp"

#include "runtime/base/error.hpp"

namespace syncfac {

caf::expected<supervisor_actor> spawn_supervisor(caf::actor_system& sys,
                                                 supervisor_config cfg) {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "supervisor: " + what);
  };
  if (cfg.me.empty() || cfg.chief.empty())
    return bad("needs its own task (me) and the chief's (chief)");
  if (cfg.max_wait.count() <= 0)
    return bad("max_wait " + std::to_string(cfg.max_wait.count())
               + " ms must be positive");
  if (cfg.request_timeout.count() <= 0)
    return bad("request_timeout " + std::to_string(cfg.request_timeout.count())
               + " ms must be positive");
  if (cfg.failure_grace.count() < 0 || cfg.connect_attempt.count() <= 0
      || cfg.preempt_wait.count() <= 0 || cfg.member_finish.count() <= 0)
    return bad("failure_grace must not be negative, connect_attempt, "
               "preempt_wait and member_finish must be positive");
  if ((cfg.reconnects_to_chief || !cfg.peers.empty()) && !cfg.connector)
    return bad("connects again to peers but has no connector");
  for (const auto& p : cfg.peers)
    if (p == cfg.chief || p == cfg.me)
      return bad("peer " + p + " is the chief or this node itself");
  return sys.spawn(supervisor, std::move(cfg));
}

} // namespace syncfac
