#pragma once

// Named tensors: a model's parameters or gradients, in a fixed order that
// every replica of the same model agrees on.

#include <string>
#include <vector>

#include <caf/error.hpp>

#include "kernels/tensor.hpp"
#include "runtime/inspect.hpp"

namespace syncfac {

struct named_tensor {
  std::string name;
  tensor value;
};

SYNCFAC_INSPECT(named_tensor, x.name, x.value)

using parameter_set = std::vector<named_tensor>;

/// Checks that `given` has exactly the names and shapes of `expected`, in
/// order, with finite values; the error names `what` and the first
/// offending entry.
caf::error check_matches(const parameter_set& expected,
                         const parameter_set& given, const std::string& what);

/// Total number of values.
int64_t value_count(const parameter_set& xs);

/// A 64-bit FNV-1a digest of names and values, independent of the order
/// of `xs` (16 hex digits): equal digests mean bit-identical parameters,
/// e.g. of the same run in one process and across processes.
std::string parameter_digest(parameter_set xs);

} // namespace syncfac
