#pragma once

// IDX files (the MNIST container): a big-endian header 00 00 <type> <ndim>,
// ndim uint32 dimensions, then the elements row-major. Only unsigned bytes
// (type 0x08) are supported: that is all (Fashion-)MNIST uses, and keeping
// the raw bytes keeps a 60000-image set at 47 MB instead of 188 MB of floats.
// Files may be gzip-compressed; compression is recognised by its magic bytes,
// not by the file name.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac {

/// The IDX element type code of unsigned bytes.
constexpr uint8_t idx_ubyte = 0x08;

/// The most elements an IDX array may have: 2^31 - 1 (2 GiB of bytes).
constexpr int64_t max_idx_elements = (int64_t{1} << 31) - 1;

struct idx_array {
  /// Dimensions, outermost first; 1 to 4 of them, each >= 1.
  std::vector<int64_t> dims;
  /// Element type code (always idx_ubyte for arrays read by read_idx).
  uint8_t type = idx_ubyte;
  /// The elements, row-major; exactly element_count() bytes.
  std::vector<uint8_t> data;

  /// Product of dims (1 for no dims).
  int64_t element_count() const noexcept;
};

/// Reads an IDX file, plain or gzip-compressed. Every malformation (bad
/// magic, unsupported type, zero or oversized dims, truncated or trailing
/// data, corrupt gzip stream) is ec::bad_data and an open or read failure is
/// ec::io_error; the context starts with the path.
caf::expected<idx_array> read_idx(const std::string& path);

/// Writes `x` to `path` (replacing it), gzip-compressed if `gzip`. An array
/// that read_idx would refuse is ec::invalid_argument; failing to write is
/// ec::io_error.
caf::error write_idx(const std::string& path, const idx_array& x, bool gzip);

} // namespace syncfac
