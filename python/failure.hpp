#pragma once

// A runtime error on its way to Python: the module's translator raises it
// as the syncfac exception class of its code, with render(err) as the
// message (python/module.cpp, docs/python.md "Errors").

#include <stdexcept>

#include <caf/error.hpp>

#include "runtime/base/error.hpp"

namespace syncfac::python {

struct failure : std::runtime_error {
  explicit failure(caf::error e)
    : std::runtime_error(render(e)), err(std::move(e)) {
  }

  caf::error err;
};

} // namespace syncfac::python
