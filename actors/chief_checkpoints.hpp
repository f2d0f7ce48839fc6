#pragma once

// What the chief keeps for its checkpoints, as plain data with methods (no
// actor in here; actors/chief_checkpoints.cpp asks the roles and the
// writer): the gradient workers' data positions, the checkpoint whose
// snapshots are being taken, and the count of those begun and settled.
//
// One checkpoint's snapshots at a time: they are taken between a step's
// apply and its tokens, so they are consistent; the file is written with
// the workers' data positions once every gradient worker reported the
// step's, or after the grace (chief_config::checkpoint_grace).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/checkpoint/checkpoint_contents.hpp"

namespace syncfac {

struct chief_config;

/// Per gradient worker, its latest data positions, newest last (what its
/// token requests reported).
class worker_positions {
public:
  explicit worker_positions(size_t workers = 0) : by_worker_(workers) {
  }

  void record(worker_position p);

  /// Every worker has reported the position after the batch of step
  /// `step - 1` (a checkpoint of `step` needs them all).
  bool complete_for(int64_t step) const;

  /// Each worker's newest position not past step `step - 1`.
  std::vector<worker_position> for_checkpoint_of(int64_t step) const;

  /// The newest position of `worker` (none before its first report).
  const worker_position* newest(int32_t worker) const;

  /// After a rollback to `step`: every worker's positions are forgotten
  /// but its position in the checkpoint rolled back to, when it has one.
  void roll_back(int64_t step, const std::vector<resume_point>& points);

private:
  std::vector<std::deque<worker_position>> by_worker_;
};

/// A checkpoint on its way to the writer.
struct pending_checkpoint {
  int64_t step = 0;
  checkpoint_contents contents;
  bool snapshots_in = false;
  bool grace_over = false;
};

/// The chief's checkpoints of one run.
struct chief_checkpoints {
  /// The checkpoint whose snapshots are being taken or that waits for the
  /// workers' positions (one at a time); the answers to its snapshot
  /// requests hold it weakly, so those of one dropped reach nothing.
  std::shared_ptr<pending_checkpoint> pending;
  /// Checkpoints begun but not yet written or failed.
  int64_t in_flight = 0;
  int64_t written = 0;
  std::string last_path;
  std::vector<std::string> errors;
  /// The step of the newest checkpoint begun (-1: none).
  int64_t newest_step = -1;
  /// What the state waiting for the checkpoints in flight does once none
  /// is (the run's end delivers its summary, a pause fails the run
  /// request); once, and only when set.
  std::function<void()> when_settled;

  /// Whether global step `step` is checkpointed (a writer, a step moved
  /// since the start, the last step or a multiple of checkpoint_every).
  static bool due(const chief_config& cfg, int64_t step);

  /// Begins the checkpoint of `step`: the one pending.
  std::shared_ptr<pending_checkpoint> begin(int64_t step);

  /// Whether the pending checkpoint can go to the writer with `positions`
  /// now: its snapshots are in, and the positions or its grace are.
  bool ready_to_write(const worker_positions& positions) const;

  /// Counts a checkpoint written or failed; whether none is in flight any
  /// more.
  bool settle(const caf::expected<checkpoint_written>& res);

  /// The `when_settled` to call now (none left behind), if any is due.
  std::function<void()> take_when_settled();
};

} // namespace syncfac
