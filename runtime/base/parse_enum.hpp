#pragma once

// Enumerations read from flags and files by their names: one rule for all
// of them, so that every refusal says the same thing (what was asked for,
// the text, every name that would do).

#include <initializer_list>
#include <string>

#include <caf/expected.hpp>

#include "runtime/base/error.hpp"

namespace syncfac {

/// The value of `values` whose to_string() is `str`; else
/// ec::invalid_argument "unknown <what> '<str>' (expected a, b or c)".
template <class Enum>
caf::expected<Enum> parse_enum(const std::string& str,
                               std::initializer_list<Enum> values,
                               const std::string& what) {
  for (auto x : values)
    if (str == to_string(x))
      return x;
  std::string names;
  size_t i = 0;
  for (auto x : values) {
    if (i > 0)
      names += i + 1 == values.size() ? " or " : ", ";
    names += to_string(x);
    ++i;
  }
  return make_error(ec::invalid_argument,
                    "unknown " + what + " '" + str + "' (expected " + names
                      + ")");
}

} // namespace syncfac
