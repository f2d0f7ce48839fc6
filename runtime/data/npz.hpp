#pragma once

// NumPy's .npz files: a zip archive with one .npy member per array
// (numpy.savez writes them stored, numpy.savez_compressed deflated). Both
// are read: stored members as they are, deflated ones through zlib; each
// member's CRC-32 is checked. Not read: zip64 archives (over 4 GiB),
// encrypted members and other compression methods, each refused by name.

#include <cstdint>
#include <map>
#include <string>

#include <caf/expected.hpp>

#include "runtime/data/npy.hpp"

namespace syncfac {

/// The arrays of a .npz file by name (the member name without ".npy").
/// ec::io_error if `path` cannot be read; ec::bad_data naming the file and
/// the member for every malformation.
caf::expected<std::map<std::string, npy_array>>
read_npz(const std::string& path);

/// Parses an archive held in memory; `name` begins every message.
caf::expected<std::map<std::string, npy_array>>
parse_npz(const uint8_t* bytes, size_t size, const std::string& name);

/// A .npz archive of `arrays`, stored (numpy.savez's layout).
std::vector<uint8_t> write_npz(const std::map<std::string, npy_array>& arrays);

} // namespace syncfac
