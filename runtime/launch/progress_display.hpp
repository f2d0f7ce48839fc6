#pragma once

// The launcher's progress line: what its terminal shows of the chief's
// progress records (runtime/progress_record.hpp), e.g.
//
//   [chief:0] global_step 120/500 (24%) | 85.3 steps/s | ETA 4 s
//
// The rate is measured over the records of the last `window` seconds on the
// launcher's clock, so a chief that slows down or was restarted shows its
// rate now; a step going back (a rollback, a chief restarted from a
// checkpoint) starts the measurement anew. Pure logic: the launcher draws
// the text (runtime/launch/launcher.cpp).

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "runtime/progress_record.hpp"

namespace syncfac {

class progress_display {
public:
  using clock_type = std::chrono::steady_clock;

  /// `label` names the chief's task ("chief:0"); the rate is measured over
  /// the last `window`.
  explicit progress_display(std::string label,
                            std::chrono::milliseconds window
                            = std::chrono::seconds{10});

  /// A record arrived at `now`.
  void observe(const progress_record& r, clock_type::time_point now);

  /// Whether a record arrived yet.
  bool any() const noexcept {
    return !samples_.empty();
  }

  /// Steps per second over the window (0 until two records differ).
  double rate() const;

  /// Seconds to the end at rate(); negative when unknown.
  double eta_s() const;

  /// The line to draw (no '\n'); empty before the first record.
  std::string text() const;

private:
  std::string label_;
  std::chrono::milliseconds window_;
  progress_record last_;
  std::deque<std::pair<clock_type::time_point, int64_t>> samples_;
};

/// "4 s", "2 min 05 s", "3 h 07 min".
std::string format_duration(double seconds);

} // namespace syncfac
