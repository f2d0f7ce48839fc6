#pragma once

// What the files of the chief's supervisor share, and no other file uses:
//
//   actors/chief_supervisor.cpp  connecting, awaiting, starting, the
//                                handlers every state shares, the end
//   actors/chief_restore.cpp     restores from a checkpoint, the workers'
//                                start and rebind
//   actors/chief_recovery.cpp    running, pausing, and the recovery plan's
//                                commands carried out (recovering,
//                                ending_preempted)

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actors/chief_supervisor.hpp"
#include "actors/with_defaults.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::chief_supervision {

using self_ptr
  = chief_supervisor_actor::stateful_pointer<chief_supervisor_state>;
using behavior = chief_supervisor_actor::behavior_type;

inline chief_supervisor_actor me_of(self_ptr self) {
  return caf::actor_cast<chief_supervisor_actor>(self);
}

inline std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

// -- chief_supervisor.cpp -----------------------------------------------------

/// Answers the driver and stops.
void end_run(self_ptr self, caf::error err, sync_summary summary = {});

/// Watches `task`'s node `n` (with the information it answered).
void watch_node(self_ptr self, const std::string& task, const caf::actor& n,
                std::optional<node_info> info = std::nullopt);

/// Monitors the roles whose loss pauses the steps.
void watch_roles(self_ptr self);

/// `role` is lost: its host's node information is forgotten (the host's
/// answer once it is back counts, not the old one's).
void forget_host_of(self_ptr self, const std::string& role);

/// A node said hello: it is asked for its roles.
void heard(self_ptr self, const std::string& task, const caf::actor& n);

/// How a fatal refusal ends the run: at once (no steps run, or they are
/// paused), or after the global step in flight, whose checkpoint the
/// chief writes as for a preemption, so that no step trained is lost.
enum class refusal_end { at_once, after_the_step };

/// The node refused `peer`'s hello for its configuration.
void refused(self_ptr self, const std::string& peer, const std::string& why,
             bool fatal, refusal_end how = refusal_end::at_once);

/// `peer` said it cannot join the run, and exits.
void cannot_join(self_ptr self, const std::string& peer,
                 const std::string& why, bool fatal,
                 refusal_end how = refusal_end::at_once);

// -- chief_restore.cpp --------------------------------------------------------

/// Whether the chain of restores of an attempt is still wanted.
using still_wanted = std::function<bool()>;

/// Restores the covariance actors `which` (indices into the roles) one
/// after the other from `run`, then `next`.
void restore_covariance(self_ptr self, std::vector<size_t> which,
                        std::shared_ptr<const restored_run> run,
                        still_wanted wanted,
                        std::function<void(caf::error)> next);

/// Restores every shard from `run`, checking that every variable of it
/// found one; then `next`.
void restore_shards(self_ptr self, std::shared_ptr<const restored_run> run,
                    still_wanted wanted, std::function<void(caf::error)> next);

/// Rebinds every worker to the chief and the shards now, each at its
/// resume point (`step`: from there, keeping its data position).
void rebind_workers(self_ptr self, int64_t incarnation, int64_t step);

/// The workers' start (or rebind, when the shards kept the run).
void start_workers(self_ptr self);

// -- chief_recovery.cpp -------------------------------------------------------

/// The recovery plan of the run, made once it starts.
recovery_layout layout_of(const chief_supervisor_state& st);

/// Sends the chief's run request and watches the roles: the steps run.
behavior running(self_ptr self);

/// Hands `in` to the plan and carries out its commands (and those of the
/// events they answer at once, in order).
void feed(self_ptr self, recovery_input in);

// -- the handlers every state shares ------------------------------------------

/// How a state treats a message it does not name itself: the run is
/// handed over once; a node's hello has its roles asked for (a worker
/// that restarted, a task that connected again after a freeze); a task
/// refused at connect, or that cannot join, is kept and logged (before
/// the run is handed over, the handover ends it; while it runs, a task
/// that did not come back is a loss of its own); a preemption goes to the
/// recovery plan once the run is under way; and the node's own shutdown,
/// a loss before the run, a probe or deadline of another state and a
/// worker's answer to its start are over.
template <class... Own>
behavior state_of(self_ptr self, Own... own) {
  return with_defaults<behavior>(
    std::make_tuple(
      [](run_atom, chief_run&) -> caf::result<chief_run_end> {
        return make_error(ec::invalid_argument,
                          "chief supervisor: the run is supervised already");
      },
      [=](hello_atom, const std::string& peer, const caf::actor& n) {
        heard(self, peer, n);
      },
      [=](hello_atom, const std::string& peer, const std::string& why) {
        refused(self, peer, why, false);
      },
      [=](refuse_atom, const std::string& peer, const std::string& why) {
        cannot_join(self, peer, why, false);
      },
      [=](refuse_atom) -> std::string {
        for (const auto& kvp : self->state.refusals)
          if (kvp.second.own)
            return kvp.second.text;
        return {};
      },
      [](shutdown_atom, const std::string&) {},
      [=](preempt_atom, const std::string& why) {
        if (self->state.plan)
          feed(self, recovery_event::preempted{why});
      },
      [](lost_atom, const node_loss&) {},
      [](probe_atom, uint64_t) {},
      [](deadline_atom, uint64_t) {},
      [](const worker_status&) {}),
    std::move(own)...);
}

} // namespace syncfac::chief_supervision
