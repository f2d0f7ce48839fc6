#pragma once

// The chief's account of the updates of a run (docs/design.md §6, "The
// account of updates"): every update every PS shard acknowledged is
// either in the parameters at the end or was rolled back to a checkpoint,
// and a rolled-back step is applied again (redone) before the run ends.
// Pure bookkeeping, kept by the chief and reported in the run's summary
// (faults.updates_*), so that a fault test can check the balance from
// outside the processes.

#include <algorithm>
#include <cstdint>
#include <string>

namespace syncfac {

struct update_account {
  /// Updates already in the parameters the chief started from: the
  /// restored checkpoint's step, or the step the shards kept for a
  /// restarted chief (the previous chief's applies are not seen here).
  int64_t inherited = 0;
  /// Rounds every shard acknowledged (each moves global_step on by one).
  int64_t applied = 0;
  /// Acknowledged updates thrown away by rollbacks to a checkpoint.
  int64_t rolled_back = 0;
  /// Acknowledged rounds of a step that had been applied before and
  /// rolled back: the work a rollback made the run do again.
  int64_t redone = 0;
  /// The highest step an acknowledged update (or the start) reached.
  int64_t high_water = 0;

  /// The chief starts with parameters at `step`.
  void start_at(int64_t step) {
    inherited = step;
    high_water = step;
  }

  /// Every shard acknowledged the round that moved the run to `new_step`.
  void apply(int64_t new_step) {
    ++applied;
    if (new_step <= high_water)
      ++redone;
    else
      high_water = new_step;
  }

  /// The run goes back from `from` to the checkpoint of step `to`.
  void roll_back(int64_t from, int64_t to) {
    rolled_back += std::max<int64_t>(0, from - to);
  }

  /// The updates in the parameters now.
  int64_t in_parameters() const { return inherited + applied - rolled_back; }

  /// Empty when the account balances at `global_step`, else why not.
  std::string imbalance(int64_t global_step) const {
    if (in_parameters() == global_step)
      return {};
    return "the account of updates does not balance at global step "
           + std::to_string(global_step) + ": inherited "
           + std::to_string(inherited) + " + applied "
           + std::to_string(applied) + " - rolled back "
           + std::to_string(rolled_back) + " = "
           + std::to_string(in_parameters());
  }
};

} // namespace syncfac
