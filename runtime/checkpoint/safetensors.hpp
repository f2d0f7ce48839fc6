#pragma once

// The safetensors file format (https://github.com/huggingface/safetensors),
// written and read exactly, so that checkpoints open with standard tools:
//
//   8 bytes        N, the header length, unsigned little-endian
//   N bytes        the header: a JSON object, padded with spaces so that
//                  8 + N is a multiple of 8
//                    {"__metadata__": {"key": "value", ...},
//                     "name": {"dtype": "F32", "shape": [2, 3],
//                              "data_offsets": [begin, end]}, ...}
//   the rest       the data section: every tensor's values, little-endian,
//                  row-major, at [begin, end) relative to the section start,
//                  contiguous, without gaps or overlaps, filling the rest of
//                  the file exactly
//
// syncfac writes F32 tensors only, in the order of the parameter_set, and
// the "__metadata__" entry first. Reading validates everything (see
// docs/checkpoints.md) and refuses a bad file with ec::bad_data naming the
// file and the problem; it never allocates more than the file's size
// justifies.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/named_tensor.hpp"

namespace syncfac {

/// String-to-string metadata of a safetensors file ("__metadata__").
using tensor_metadata = std::map<std::string, std::string>;

/// The largest header accepted (the reference implementation's limit).
constexpr uint64_t safetensors_max_header = 100'000'000;

/// The largest rank (and the longest JSON array) accepted in a header.
constexpr size_t safetensors_max_rank = 64;

/// CRC-32C (Castagnoli, as in iSCSI and ext4) of `size` bytes, continuing
/// from `crc` (0 to start).
uint32_t crc32c(uint32_t crc, const void* data, size_t size) noexcept;

/// CRC-32C of the data section that encode_safetensors writes for `xs`:
/// each tensor's values as little-endian float32, in order.
uint32_t data_crc32c(const parameter_set& xs) noexcept;

/// "crc32c:0123abcd".
std::string format_crc32c(uint32_t crc);

/// The padded header (without the 8-byte length) for `tensors` and
/// `metadata`. Refuses (ec::invalid_argument) duplicate or reserved
/// ("__metadata__") names and strings that are not valid UTF-8.
caf::expected<std::string> safetensors_header(const parameter_set& tensors,
                                              const tensor_metadata& metadata);

/// Where encoded bytes go: returns an error to stop.
using byte_sink = std::function<caf::error(const void* data, size_t size)>;

/// Streams the whole file into `sink`.
caf::error write_safetensors(const byte_sink& sink,
                             const parameter_set& tensors,
                             const tensor_metadata& metadata);

/// The whole file as bytes.
caf::expected<std::string> encode_safetensors(const parameter_set& tensors,
                                              const tensor_metadata& metadata);

/// Writes `path` (created or truncated, not atomically: see
/// checkpoint_store for atomic writes). Errors name the file and errno.
caf::error write_safetensors_file(const std::string& path,
                                  const parameter_set& tensors,
                                  const tensor_metadata& metadata);

struct safetensors_read_options {
  /// Refuse NaN and Inf values (ec::bad_data naming the tensor).
  bool require_finite = true;
};

/// What a safetensors file holds.
struct safetensors_contents {
  /// The tensors in the order of their data offsets (for files syncfac
  /// wrote: the order they were written in).
  parameter_set tensors;
  tensor_metadata metadata;
  /// The header length N and the size of the data section, in bytes.
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
  /// CRC-32C of the data section as read.
  uint32_t data_crc32c = 0;
};

/// Decodes a file held in memory; `origin` names it in errors.
caf::expected<safetensors_contents>
decode_safetensors(const void* data, size_t size, const std::string& origin,
                   safetensors_read_options options = {});

/// Reads and validates `path` (ec::io_error when it cannot be opened or
/// read, ec::bad_data when its contents are wrong).
caf::expected<safetensors_contents>
read_safetensors_file(const std::string& path,
                      safetensors_read_options options = {});

} // namespace syncfac
