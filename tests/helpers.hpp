#pragma once

// Small helpers shared by the test suites.

#include <string>

#include <caf/expected.hpp>

#include "runtime/error.hpp"

namespace syncfac::test {

/// The rendered error of `x`, or "ok". Boost evaluates a check's message
/// even when the check passes, and reading error() of an expected that
/// holds a value is undefined in CAF 0.17.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{"ok"} : render(x.error());
}

} // namespace syncfac::test
