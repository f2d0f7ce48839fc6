#pragma once

// A one-line progress display (steps/s, ETA) redrawn in place on a
// terminal; silent when the stream is not a terminal, so logs and CI output
// stay clean.

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace syncfac {

class progress_line {
public:
  /// Draws on `out` (stderr by default) only if it is a terminal and
  /// `enabled` is true.
  progress_line(int64_t total_steps, bool enabled, std::FILE* out = stderr);

  ~progress_line();

  /// Redraws at most a few times per second.
  void update(int64_t step);

  /// Erases the line, e.g. before a log line is printed.
  void clear();

private:
  using clock = std::chrono::steady_clock;

  int64_t total_;
  bool active_;
  std::FILE* out_;
  clock::time_point start_;
  clock::time_point last_draw_;
  bool drawn_ = false;
};

} // namespace syncfac
