#pragma once

// Shared helpers of the data_* suites: scratch directories and raw file
// fixtures (the corrupt ones cannot come from write_idx).

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/data/idx.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"
#include "tests/temp_dir.hpp"

namespace syncfac::test {

using bytes = std::vector<uint8_t>;

inline void write_bytes(const std::string& path, const bytes& data) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size()));
  if (!out)
    throw std::runtime_error("cannot write fixture " + path);
}

inline bytes read_bytes(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return bytes{std::istreambuf_iterator<char>{in},
               std::istreambuf_iterator<char>{}};
}

/// gzip-compresses arbitrary bytes (also malformed IDX content).
inline bytes gzip_bytes(const bytes& data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY)
      != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  bytes out(deflateBound(&zs, static_cast<uLong>(data.size())));
  zs.next_in = const_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  auto rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END)
    throw std::runtime_error("deflate failed");
  return out;
}

/// An IDX header: 00 00 type ndim, then big-endian uint32 dims.
inline bytes idx_header(const std::vector<uint32_t>& dims,
                        uint8_t type = idx_ubyte) {
  bytes result{0, 0, type, static_cast<uint8_t>(dims.size())};
  // Byte by byte: GCC 12 takes an insert of a 4-byte list for an
  // out-of-bounds copy (-Warray-bounds) once inlined.
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      result.push_back(static_cast<uint8_t>(d >> shift));
  return result;
}

inline bytes concat(bytes x, const bytes& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

/// `n` bytes of a fixed pattern that is not constant (so truncations show).
inline bytes pattern(size_t n, uint8_t salt = 0) {
  bytes result(n);
  for (size_t i = 0; i < n; ++i)
    result[i] = static_cast<uint8_t>(i * 7 + salt);
  return result;
}

inline bool has_code(const caf::error& err, ec code) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(code);
}

inline bool mentions(const caf::error& err, const std::string& what) {
  return render(err).find(what) != std::string::npos;
}

} // namespace syncfac::test
