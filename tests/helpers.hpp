#pragma once

// Small helpers shared by the test suites.

#include <chrono>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac::test {

/// The rendered error of `x`, or "ok". Boost evaluates a check's message
/// even when the check passes, and reading error() of an expected that
/// holds a value is undefined in CAF 0.17.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{"ok"} : render(x.error());
}

/// Same names, shapes and values, in order.
inline bool same(const parameter_set& xs, const parameter_set& ys) {
  if (xs.size() != ys.size())
    return false;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].name != ys[i].name || xs[i].value != ys[i].value)
      return false;
  return true;
}

/// The answer of `dest` to a request (10 s at most), or the error it
/// produced.
template <class T, class Handle, class... Ts>
caf::expected<T> ask(caf::scoped_actor& self, const Handle& dest,
                     Ts&&... xs) {
  caf::expected<T> result{caf::error{}};
  self->request(dest, std::chrono::seconds{10}, std::forward<Ts>(xs)...)
    .receive([&](T& x) { result = std::move(x); },
             [&](caf::error& err) { result = std::move(err); });
  return result;
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
