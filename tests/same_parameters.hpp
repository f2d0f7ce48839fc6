#pragma once

// Whether two parameter sets are the same: for the test suites
// (tests/helpers.hpp) and the fuzz targets alike, so free of Boost.Test.

#include <cstddef>

#include "runtime/named_tensor.hpp"

namespace syncfac::test {

/// Same names, shapes and values, in order.
inline bool same(const parameter_set& xs, const parameter_set& ys) {
  if (xs.size() != ys.size())
    return false;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].name != ys[i].name || xs[i].value != ys[i].value)
      return false;
  return true;
}

} // namespace syncfac::test
