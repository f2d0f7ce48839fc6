#pragma once

// The configuration every node of a cluster must share, as a record of
// named fields ("model.variables[3].shape" -> "[5,5,32,64]"), and the
// field-by-field comparison the chief runs at the hello handshake. A record
// rather than a hash: a refusal names the field and both values, so the
// operator sees at once which flag differs (docs/distributed.md, "One
// configuration across every node").

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/inspect.hpp"

namespace syncfac {

struct fingerprint_field {
  /// Dotted path, e.g. "optimizer.kfac.damping".
  std::string path;
  /// The value as text (floats in their shortest exact form).
  std::string value;
};

SYNCFAC_INSPECT(fingerprint_field, x.path, x.value)

struct config_fingerprint {
  /// In the order they were added; paths are unique.
  std::vector<fingerprint_field> fields;
  /// Path prefixes this node cannot know (a PS shard loads no data set:
  /// "data."); fields under them are compared only where both have them.
  std::vector<std::string> omitted;

  bool empty() const noexcept {
    return fields.empty();
  }

  /// Appends a field (or replaces the value of one with that path).
  void add(const std::string& path, std::string value);

  /// The value of `path`, if present.
  std::optional<std::string> value_of(const std::string& path) const;
};

SYNCFAC_INSPECT(config_fingerprint, x.fields, x.omitted)

/// The value a record shows for a field it does not have.
inline constexpr const char* absent_value = "(absent)";

/// The first field two records disagree on.
struct fingerprint_difference {
  std::string path;
  /// The value in the first record / the second (absent_value if missing).
  std::string first;
  std::string second;
};

/// The first field (in `a`'s order, then `b`'s extra fields) whose value
/// differs, or that only one record has while the other does not omit it;
/// nothing when the records agree.
std::optional<fingerprint_difference>
compare_fingerprints(const config_fingerprint& a, const config_fingerprint& b);

/// "worker:1 differs from the chief in model.arch: mlp on worker:1,
/// convnet on the chief", where `d` compared the node's record (first) with
/// the chief's (second).
std::string describe_difference(const std::string& node,
                                const fingerprint_difference& d);

// -- value formatting, so that every node writes a value the same way -------

/// The shortest decimal form that reads back as `x` ("0.01", "1e-08").
std::string fingerprint_value(float x);

/// "[5,5,32,64]".
std::string fingerprint_value(const std::vector<int64_t>& dims);

/// FNV-1a (64 bits) over `n` bytes, continuing from `seed` (the offset
/// basis by default): a cheap digest, no defence against a chosen input.
uint64_t fnv1a(const uint8_t* bytes, size_t n,
               uint64_t seed = 0xcbf29ce484222325ULL);

/// `x` as 16 lowercase hex digits.
std::string hex64(uint64_t x);

} // namespace syncfac
