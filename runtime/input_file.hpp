#pragma once

// The files a user names on the command line (--model_file, --cluster,
// --config-file, --data): only a regular file is read, and only up to a
// size its kind can sensibly have, so that a device (/dev/zero), a FIFO or
// a directory given by mistake is refused by name at once instead of being
// read for gigabytes (docs/robustness.md, "Sizes before allocation").

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac {

/// The largest model description and cluster file read: real ones are a
/// few KB; a few hundred thousand layers still fit.
inline constexpr uint64_t max_description_bytes = uint64_t{16} << 20;

/// The largest --config-file read.
inline constexpr uint64_t max_flag_file_bytes = uint64_t{1} << 20;

/// What `path` is when it is not a regular file ("a directory", "a
/// character device", "a FIFO", "a socket", "a block device"); empty for a
/// regular file. Symbolic links are followed.
std::string non_regular_kind(const std::string& path);

/// The size of the regular file at `path`, or why it cannot be an input:
/// ec::io_error when it is missing or unreadable, ec::invalid_config when
/// it is not a regular file or is larger than `max_bytes`. Every message
/// begins with `label` ("model file 'x.json'").
caf::expected<uint64_t> input_file_size(const std::string& path,
                                        const std::string& label,
                                        uint64_t max_bytes);

/// The whole of the regular file at `path`, checked as input_file_size
/// does (and again while reading, should it grow meanwhile).
caf::expected<std::string> read_input_file(const std::string& path,
                                           const std::string& label,
                                           uint64_t max_bytes);

} // namespace syncfac
