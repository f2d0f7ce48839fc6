#pragma once

// The range a numeric flag's value must lie in, declared with the flag
// (actors/program_config's limit()) so that --help shows it and a value
// outside it is refused naming the flag from the one declaration:
// "--learning_rate -3: must be > 0". docs/observability.md "The command
// line".

#include <limits>
#include <string>

namespace syncfac {

struct flag_range {
  double min = -std::numeric_limits<double>::infinity();
  bool min_inclusive = true;
  double max = std::numeric_limits<double>::infinity();
  bool max_inclusive = true;

  /// How --help shows it: "> 0", ">= 1", "0 to 65535", ">= 0 and < 1".
  std::string text() const;

  /// Empty when `x` lies in the range, else what it must be ("must be >
  /// 0").
  std::string refusal(double x) const;
};

/// > 0 (a rate, a damping).
flag_range positive();

/// >= `x` (a count, a timeout; -1 where -1 means "the default").
flag_range at_least(double x);

/// `lo` to `hi`, both included (a port).
flag_range between(double lo, double hi);

/// >= 0 and < 1 (a decay, a momentum).
flag_range decay_fraction();

} // namespace syncfac
