#pragma once

// NumPy's .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0): the
// magic "\x93NUMPY", a version, a little-endian header length, a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, 28,
// 28), } padded with spaces and a newline, then the elements in C order.
// Read: little-endian (or byte-sized) integers of 1, 2, 4 and 8 bytes,
// float32 and float64, C order; everything else is refused by name. See
// docs/models.md, "Data", for what training takes from these arrays.

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <cstring>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace syncfac {

enum class npy_kind : uint8_t { signed_int, unsigned_int, floating };

/// An array's elements where someone else keeps them: an npy_array read
/// from a file, or a NumPy array's buffer handed over by the Python module
/// (python/). The checks of a data split (dataset_from_arrays) read
/// either through it.
struct npy_view {
  npy_kind kind = npy_kind::unsigned_int;
  /// Bytes per element: 1, 2, 4 or 8.
  int64_t item_size = 1;
  /// The dtype as NumPy spells it ("<f4", "|u1"), for messages.
  std::string descr;
  std::vector<int64_t> shape;
  /// element_count() * item_size bytes, C order, little-endian.
  const uint8_t* data = nullptr;

  int64_t element_count() const noexcept;

  /// Element i as a double / as an integer (any kind), i < element_count().
  double as_double(int64_t i) const noexcept;
  int64_t as_integer(int64_t i) const noexcept;
};

struct npy_array {
  npy_kind kind = npy_kind::unsigned_int;
  /// Bytes per element: 1, 2, 4 or 8.
  int64_t item_size = 1;
  /// The descr as the file spells it ("<f4", "|u1"), for messages.
  std::string descr;
  std::vector<int64_t> shape;
  /// The elements, C order, little-endian: element_count() * item_size.
  std::vector<uint8_t> data;

  int64_t element_count() const noexcept;

  /// Element i as a double / as an integer (any kind), i < element_count().
  double as_double(int64_t i) const noexcept;
  int64_t as_integer(int64_t i) const noexcept;

  /// The array as a view of its own elements (valid while it lives).
  npy_view view() const;
};

/// The most elements an array may have (2^31 - 1), as for IDX files.
constexpr int64_t max_npy_elements = (int64_t{1} << 31) - 1;

/// Parses a whole .npy file held in memory. `name` begins every message
/// ("'data.npz' array 'x_train'"). Every malformation (magic, version,
/// header syntax, unsupported dtype, Fortran order, negative or oversized
/// shape, truncated or trailing data) is ec::bad_data.
caf::expected<npy_array> parse_npy(const uint8_t* bytes, size_t size,
                                   const std::string& name);

/// The .npy file of `x` (version 1.0), as numpy.save writes it.
std::vector<uint8_t> write_npy(const npy_array& x);

/// An array of `values` (int32_t, int64_t, uint8_t or float) with `shape`
/// (its element count values.size()): what a data generator writes.
template <class T>
npy_array npy_of(const std::vector<T>& values, std::vector<int64_t> shape) {
  static_assert(std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>
                || std::is_same_v<T, uint8_t> || std::is_same_v<T, float>);
  npy_array x;
  x.kind = std::is_same_v<T, float>     ? npy_kind::floating
           : std::is_same_v<T, uint8_t> ? npy_kind::unsigned_int
                                        : npy_kind::signed_int;
  x.item_size = sizeof(T);
  x.descr = std::is_same_v<T, float>     ? "<f4"
            : std::is_same_v<T, uint8_t> ? "|u1"
            : sizeof(T) == 4             ? "<i4"
                                         : "<i8";
  x.shape = std::move(shape);
  x.data.resize(values.size() * sizeof(T));
  std::memcpy(x.data.data(), values.data(), x.data.size());
  return x;
}

} // namespace syncfac
