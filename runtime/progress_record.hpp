#pragma once

// The chief's progress as a typed record for whoever started it: one line
// of JSON per global step the chief completes,
//
//   {"record": "progress", "global_step": 120, "total_steps": 500,
//    "wall_s": 3.25, "checkpoint_step": 100}
//
// and one more after each checkpoint it writes, so that the launcher can
// say where a requeued run really resumes (docs/distributed.md,
// "Preemption").
//
// written to the file descriptor that SYNCFAC_PROGRESS_FD names (the local
// launcher passes the write end of a pipe there, runtime/launch). The
// launcher's --kill hooks and its progress line read these records instead
// of the chief's log text (docs/cluster.md, "The chief's progress record").
// A record is shorter than PIPE_BUF, so a write is all or nothing; the
// writer never blocks the chief: a record the reader has no room for is
// dropped (the next one says more).

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac {

/// The variable naming the descriptor a chief writes its records to.
inline constexpr const char* progress_fd_variable = "SYNCFAC_PROGRESS_FD";

struct progress_record {
  /// The global step the chief has completed.
  int64_t global_step = 0;
  /// The run's length in global steps.
  int64_t total_steps = 0;
  /// Seconds since the run started, on the chief's clock.
  double wall_s = 0;
  /// The global step of the newest checkpoint a restart with the same
  /// flags resumes from: written or restored by this run; -1: none (a
  /// restart begins at global step 0). A record without the field (an
  /// older chief) reads as -1.
  int64_t checkpoint_step = -1;

  /// The record as one line of JSON, with its '\n'.
  std::string to_line() const;

  /// Parses one line (without or with its '\n'); an ec::bad_message error
  /// names what is wrong and quotes the line.
  static caf::expected<progress_record> parse(const std::string& line);
};

bool operator==(const progress_record& x, const progress_record& y);

/// Writes records to a descriptor without ever blocking.
class progress_record_writer {
public:
  /// Writes nowhere.
  progress_record_writer() = default;

  /// Writes to `fd` (set non-blocking here); the writer owns it.
  explicit progress_record_writer(int fd);

  ~progress_record_writer();

  progress_record_writer(progress_record_writer&& other) noexcept;
  progress_record_writer& operator=(progress_record_writer&& other) noexcept;
  progress_record_writer(const progress_record_writer&) = delete;
  progress_record_writer& operator=(const progress_record_writer&) = delete;

  /// From SYNCFAC_PROGRESS_FD: writes nowhere when it is unset or empty; an
  /// ec::invalid_config error naming the variable and its value when it is
  /// not a number >= 3 or not an open descriptor one can write to.
  static caf::expected<progress_record_writer> from_environment();

  /// Whether records go anywhere.
  bool active() const noexcept {
    return fd_ >= 0;
  }

  /// Writes `r` if the reader has room; a reader gone (EPIPE) stops the
  /// writer, a full pipe drops this record.
  void write(const progress_record& r);

private:
  int fd_ = -1;
};

} // namespace syncfac
