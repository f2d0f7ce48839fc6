#pragma once

// A run in one process stopped by a scheduler's signal as a cluster node
// is (docs/distributed.md, "Preemption"): the first stop signal of a
// stop_signal_watcher reaches the sync runtime's chief, which ends the run
// after the global step in flight and checkpoints it (also with
// --checkpoint_every 0) where a checkpoint directory is set; the plain
// loop stops after its step in flight. The program then exits with
// exit_codes::preempted. Every in-process trainer (examples/example_main.hpp)
// and a program of its own on the installed package use this.

#include <string>

#include "actors/sync_trainer.hpp"
#include "runtime/stop_signals.hpp"

namespace syncfac {

/// Hands `watcher`'s first signal to the run of `cfg`: to its chief (sync
/// runtime) and to the plain loop (cfg.base). `watcher` must outlive the
/// run; the chief hears of it only while it exists.
void stop_on_signal(sync_training_config& cfg, stop_signal_watcher& watcher);

/// What a stop loses, said with the first signal: nothing but the
/// steps after the checkpoint with a checkpoint directory, else every
/// step (`plain`: the plain loop, which keeps no checkpoints).
std::string what_a_stop_loses(const std::string& checkpoint_dir, bool plain);

/// The line a preempted run ends with: where it stopped, the exit code,
/// and whether a restart with the same flags resumes there.
std::string preempted_line(const training_summary& summary,
                           const std::string& checkpoint_dir, bool plain);

} // namespace syncfac
