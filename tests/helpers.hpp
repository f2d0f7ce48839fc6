#pragma once

// Small helpers shared by the test suites.

#include <ostream>
#include <string>
#include <type_traits>

#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "runtime/error.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac::test {

/// The rendered error of `x`, or "ok". Boost evaluates a check's message
/// even when the check passes, and reading error() of an expected that
/// holds a value is undefined in CAF 0.17.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{"ok"} : render(x.error());
}

} // namespace syncfac::test

// How Boost.Test prints values of our types in failed checks (found by ADL).
namespace caf {

inline std::ostream& boost_test_print_type(std::ostream& out,
                                           const error& err) {
  return out << syncfac::render(err);
}

template <class T>
std::ostream& boost_test_print_type(std::ostream& out, const expected<T>& x) {
  return out << (x ? std::string{"expected value"}
                   : "error: " + syncfac::render(x.error()));
}

} // namespace caf

namespace syncfac {

inline std::ostream& operator<<(std::ostream& out, ec x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, optimizer_kind x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, model_arch x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, init_scheme x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, activation x) {
  return out << to_string(x);
}

} // namespace syncfac
