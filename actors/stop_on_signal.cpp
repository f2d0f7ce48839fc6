#include "actors/stop_on_signal.hpp"

#include <caf/send.hpp>

#include "runtime/exit_codes.hpp"

namespace syncfac {

void stop_on_signal(sync_training_config& cfg, stop_signal_watcher& watcher) {
  auto* w = &watcher;
  cfg.on_chief = [w](const chief_actor& chief) {
    if (!chief) {
      w->on_stop({});
      return;
    }
    w->on_stop([chief](const std::string& signal) {
      caf::anon_send(chief, preempt_atom::value, signal);
    });
  };
  cfg.base.stop_requested = [w] { return w->received().value_or(""); };
}

std::string what_a_stop_loses(const std::string& checkpoint_dir, bool plain) {
  if (plain)
    return "--runtime plain keeps no checkpoints: every step of this run "
           "is lost (a restart begins at step 0); use the sync runtime "
           "with --checkpoint_dir to resume at the step in flight";
  if (checkpoint_dir.empty())
    return "no --checkpoint_dir: every step of this run is lost (a restart "
           "begins at global step 0); give --checkpoint_dir to resume at "
           "the step in flight";
  return "the step in flight is checkpointed into " + checkpoint_dir
         + "; restarted with the same flags the run resumes there";
}

std::string preempted_line(const training_summary& summary,
                           const std::string& checkpoint_dir, bool plain) {
  auto step = plain ? summary.steps : summary.global_step;
  return "preempted (" + summary.preempted + ") at "
         + (plain ? std::string{"step "} : std::string{"global step "})
         + std::to_string(step) + "; exit code "
         + std::to_string(exit_codes::preempted)
         + (plain || checkpoint_dir.empty()
              ? std::string{" (no --checkpoint_dir: nothing to resume)"}
              : " (restarted with the same flags it resumes there)");
}

} // namespace syncfac
