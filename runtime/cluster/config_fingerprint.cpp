#include "runtime/cluster/config_fingerprint.hpp"

#include <cstdio>
#include <cstdlib>

namespace syncfac {

void config_fingerprint::add(const std::string& path, std::string value) {
  for (auto& f : fields)
    if (f.path == path) {
      f.value = std::move(value);
      return;
    }
  fields.push_back({path, std::move(value)});
}

std::optional<std::string>
config_fingerprint::value_of(const std::string& path) const {
  for (const auto& f : fields)
    if (f.path == path)
      return f.value;
  return std::nullopt;
}

namespace {

bool omits(const config_fingerprint& x, const std::string& path) {
  for (const auto& prefix : x.omitted)
    if (path.compare(0, prefix.size(), prefix) == 0)
      return true;
  return false;
}

} // namespace

std::optional<fingerprint_difference>
compare_fingerprints(const config_fingerprint& a,
                     const config_fingerprint& b) {
  for (const auto& f : a.fields) {
    auto other = b.value_of(f.path);
    if (other) {
      if (*other != f.value)
        return fingerprint_difference{f.path, f.value, *other};
    } else if (!omits(b, f.path)) {
      return fingerprint_difference{f.path, f.value, absent_value};
    }
  }
  for (const auto& f : b.fields)
    if (!a.value_of(f.path) && !omits(a, f.path))
      return fingerprint_difference{f.path, absent_value, f.value};
  return std::nullopt;
}

std::string describe_difference(const std::string& node,
                                const fingerprint_difference& d) {
  return node + " differs from the chief in " + d.path + ": " + d.first
         + " on " + node + ", " + d.second + " on the chief";
}

std::string fingerprint_value(float x) {
  // The fewest digits that read back as the same float: "0.01", not
  // "0.00999999978" (both name one value; the first is what was typed).
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x)
      break;
  }
  return buf;
}

std::string fingerprint_value(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i == 0 ? "" : ",") + std::to_string(dims[i]);
  return out + "]";
}

uint64_t fnv1a(const uint8_t* bytes, size_t n, uint64_t seed) {
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(x));
  return buf;
}

} // namespace syncfac
