#pragma once

// The counts of a configuration that have a least value (batch sizes,
// replicas, steps between events): one rule for every validate(), so that
// every refusal says the same thing (the count's name, the least it may
// be, what it was given).

#include <cstdint>
#include <initializer_list>
#include <string>

namespace syncfac {

/// A count of a configuration and the least value it may take.
struct least_count {
  const char* name;
  int64_t value;
  int64_t least;
};

/// What is wrong with the first of `counts` below its least: "<name> must
/// be at least <least>, got <value>" ("<name> must not be negative, got
/// <value>" where the least is 0); "" when none is.
inline std::string
first_below_least(std::initializer_list<least_count> counts) {
  for (const auto& c : counts) {
    if (c.value >= c.least)
      continue;
    auto bound = c.least == 0 ? std::string{" must not be negative"}
                              : " must be at least " + std::to_string(c.least);
    return c.name + bound + ", got " + std::to_string(c.value);
  }
  return {};
}

} // namespace syncfac
