#pragma once

// A runtime error on its way to Python: the module's translator raises it
// as the syncfac exception class of its code, with render(err) as the
// message (python/module.cpp, docs/python.md "Errors").

#include <stdexcept>
#include <utility>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/base/error.hpp"

namespace syncfac::python {

struct failure : std::runtime_error {
  explicit failure(caf::error e)
    : std::runtime_error(render(e)), err(std::move(e)) {
  }

  caf::error err;
};

/// `err` thrown as a failure.
[[noreturn]] inline void raise(const caf::error& err) {
  throw failure{err};
}

/// The value of `x`, or its error thrown as a failure.
template <class T>
T checked(caf::expected<T> x) {
  if (!x)
    throw failure{x.error()};
  return std::move(*x);
}

/// `err` thrown as a failure, if it is one.
inline void check(const caf::error& err) {
  if (err)
    throw failure{err};
}

} // namespace syncfac::python
