#pragma once

// Helpers of the checkpoint suites: whole-file reads and writes, error
// checks (scratch directories: tests/temp_dir.hpp; why() and same():
// tests/helpers.hpp).

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include <stdlib.h>

#include <caf/expected.hpp>

#include "runtime/base/error.hpp"
#include "runtime/named_tensor.hpp"
#include "tests/helpers.hpp"
#include "tests/temp_dir.hpp"

namespace syncfac::test {

inline std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw std::runtime_error("cannot read " + path);
  return std::string{std::istreambuf_iterator<char>{in}, {}};
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

inline bool is_code(const caf::error& err, ec code) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(code);
}

inline bool says(const caf::error& err, const std::string& what) {
  return render(err).find(what) != std::string::npos;
}

/// A small model-like set: a matrix, a vector, a scalar, an empty tensor.
inline parameter_set sample_tensors(float salt = 0.0f) {
  parameter_set xs;
  xs.push_back({"conv1/weights", tensor{{2, 3}, {1, -2, 3.5f, 0, 1e-30f, 7}}});
  xs.push_back({"conv1/biases", tensor{{3}, {0.25f, -0.5f, 1e20f}}});
  xs.push_back({"global_scale", tensor{tensor_shape{}, {42.0f}}});
  xs.push_back({"empty", tensor{tensor_shape{4, 0, 2}}});
  for (auto& x : xs)
    for (auto& v : x.value.values())
      v += salt;
  return xs;
}

} // namespace syncfac::test
