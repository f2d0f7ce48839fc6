#include "runtime/flag_range.hpp"

#include <cmath>
#include <cstdio>

namespace syncfac {

namespace {

/// 0.001 as "0.001", 65535 and 16777216 as themselves.
std::string number_text(double x) {
  char buf[32];
  if (x == std::floor(x) && std::abs(x) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else
    std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

} // namespace

std::string flag_range::text() const {
  bool low = std::isfinite(min);
  bool high = std::isfinite(max);
  auto lower = (min_inclusive ? ">= " : "> ") + number_text(min);
  auto upper = (max_inclusive ? "<= " : "< ") + number_text(max);
  if (low && high) {
    if (min_inclusive && max_inclusive)
      return number_text(min) + " to " + number_text(max);
    return lower + " and " + upper;
  }
  if (low)
    return lower;
  if (high)
    return upper;
  return "any number";
}

std::string flag_range::refusal(double x) const {
  bool below = min_inclusive ? x < min : x <= min;
  bool above = max_inclusive ? x > max : x >= max;
  if (std::isnan(x) || below || above)
    return "must be " + text();
  return {};
}

flag_range positive() {
  flag_range r;
  r.min = 0;
  r.min_inclusive = false;
  return r;
}

flag_range at_least(double x) {
  flag_range r;
  r.min = x;
  return r;
}

flag_range between(double lo, double hi) {
  flag_range r;
  r.min = lo;
  r.max = hi;
  return r;
}

flag_range decay_fraction() {
  flag_range r;
  r.min = 0;
  r.max = 1;
  r.max_inclusive = false;
  return r;
}

} // namespace syncfac
