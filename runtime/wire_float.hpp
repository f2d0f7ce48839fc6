#pragma once

// Floating-point scalars in messages cross the wire as their bit pattern.
// CAF 0.17's binary serializer encodes float and double with pack754,
// which loops forever on ±Inf (the sending node's network thread spins and
// the message never leaves) and turns NaN into a finite number (a diverged
// loss would arrive as 1.0 and pass every check). Tensors are raw blocks
// already; a scalar field is wrapped: f(..., wire(x.loss), ...). Other
// inspectors (to_string) see the value itself.

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/deserializer.hpp>
#include <caf/serializer.hpp>

namespace syncfac {

template <class T>
struct wire_float {
  static_assert(std::is_floating_point<T>::value && sizeof(T) <= 8);
  T& value;
};

template <class T>
wire_float<T> wire(T& x) {
  return {x};
}

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, wire_float<T>& x) {
  using bits_type = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  bits_type bits = 0;
  if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
    auto result = f(bits);
    std::memcpy(&x.value, &bits, sizeof(T));
    return result;
  } else if constexpr (std::is_base_of<caf::serializer, Inspector>::value) {
    std::memcpy(&bits, &x.value, sizeof(T));
    return f(bits);
  } else {
    return f(x.value);
  }
}

/// A map of named doubles (metrics), each value as its bit pattern.
struct wire_float_map {
  std::map<std::string, double>& values;
};

inline wire_float_map wire(std::map<std::string, double>& xs) {
  return {xs};
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_float_map& x) {
  std::vector<std::string> keys;
  std::vector<uint64_t> bits;
  if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
    auto result = f(keys, bits);
    if (!result && keys.size() == bits.size()) {
      x.values.clear();
      for (size_t i = 0; i < keys.size(); ++i) {
        double v;
        std::memcpy(&v, &bits[i], sizeof v);
        x.values.emplace(std::move(keys[i]), v);
      }
    }
    return result;
  } else if constexpr (std::is_base_of<caf::serializer, Inspector>::value) {
    for (const auto& [k, v] : x.values) {
      keys.push_back(k);
      uint64_t b;
      std::memcpy(&b, &v, sizeof b);
      bits.push_back(b);
    }
    return f(keys, bits);
  } else {
    return f(x.values);
  }
}

} // namespace syncfac
