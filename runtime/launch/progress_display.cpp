#include "runtime/launch/progress_display.hpp"

#include <cmath>
#include <cstdio>

namespace syncfac {

progress_display::progress_display(std::string label,
                                   std::chrono::milliseconds window)
  : label_(std::move(label)), window_(window) {
}

void progress_display::observe(const progress_record& r,
                               clock_type::time_point now) {
  if (!samples_.empty() && r.global_step < samples_.back().second)
    samples_.clear(); // rolled back or restarted: measure anew
  last_ = r;
  samples_.emplace_back(now, r.global_step);
  // Keep two samples at least, so that a slow chief still has a rate.
  while (samples_.size() > 2 && now - samples_.front().first > window_)
    samples_.pop_front();
}

double progress_display::rate() const {
  if (samples_.size() < 2)
    return 0;
  auto steps = samples_.back().second - samples_.front().second;
  auto secs = std::chrono::duration<double>(samples_.back().first
                                            - samples_.front().first)
                .count();
  return steps > 0 && secs > 0 ? static_cast<double>(steps) / secs : 0.0;
}

double progress_display::eta_s() const {
  auto r = rate();
  if (r <= 0)
    return -1;
  auto left = last_.total_steps - last_.global_step;
  return left > 0 ? static_cast<double>(left) / r : 0.0;
}

std::string progress_display::text() const {
  if (samples_.empty())
    return {};
  std::string out = "[" + label_ + "] global_step "
                    + std::to_string(last_.global_step);
  if (last_.total_steps > 0) {
    out += "/" + std::to_string(last_.total_steps);
    auto pct = static_cast<int>(100.0 * static_cast<double>(last_.global_step)
                                / static_cast<double>(last_.total_steps));
    out += " (" + std::to_string(pct) + "%)";
  }
  char buf[64];
  auto r = rate();
  if (r > 0) {
    std::snprintf(buf, sizeof(buf), "%.1f", r);
    out += std::string{" | "} + buf + " steps/s";
  } else {
    out += " | measuring steps/s";
  }
  auto eta = eta_s();
  out += " | ETA " + (eta < 0 ? std::string{"?"} : format_duration(eta));
  return out;
}

std::string format_duration(double seconds) {
  auto s = static_cast<long long>(std::llround(seconds < 0 ? 0 : seconds));
  char buf[64];
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%lld s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", s / 3600,
                  (s % 3600) / 60);
  return buf;
}

} // namespace syncfac
