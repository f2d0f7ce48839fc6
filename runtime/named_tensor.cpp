#include "runtime/named_tensor.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/base/error.hpp"

namespace syncfac {

caf::error check_matches(const parameter_set& expected,
                         const parameter_set& given, const std::string& what) {
  if (given.size() != expected.size())
    return make_error(ec::shape_mismatch,
                      what + ": expected " + std::to_string(expected.size())
                        + " tensors, got " + std::to_string(given.size()));
  for (size_t i = 0; i < given.size(); ++i) {
    const auto& want = expected[i];
    const auto& got = given[i];
    if (got.name != want.name)
      return make_error(ec::unknown_name, what + ": entry " + std::to_string(i)
                                            + " is '" + got.name
                                            + "', expected '" + want.name
                                            + "'");
    if (got.value.shape() != want.value.shape())
      return make_error(ec::shape_mismatch,
                        what + ": '" + got.name + "' has shape "
                          + got.value.shape_string() + ", expected "
                          + want.value.shape_string());
    if (!got.value.all_finite())
      return make_error(ec::non_finite,
                        what + ": '" + got.name + "' holds NaN or Inf");
  }
  return caf::none;
}

int64_t value_count(const parameter_set& xs) {
  int64_t n = 0;
  for (const auto& x : xs)
    n += x.value.size();
  return n;
}

std::string parameter_digest(parameter_set xs) {
  std::sort(xs.begin(), xs.end(),
            [](const named_tensor& a, const named_tensor& b) {
              return a.name < b.name;
            });
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* p, size_t n) {
    auto bytes = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= bytes[i];
      h *= 1099511628211ull;
    }
  };
  for (const auto& x : xs) {
    mix(x.name.data(), x.name.size() + 1);
    mix(x.value.data(), static_cast<size_t>(x.value.size()) * sizeof(float));
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(h));
  return buf;
}

} // namespace syncfac
