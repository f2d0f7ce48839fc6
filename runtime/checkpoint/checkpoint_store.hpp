#pragma once

// A directory of checkpoints, one safetensors file per saved step:
//
//   <directory>/ckpt-<global_step>.safetensors
//
// save() writes atomically (a temporary ".ckpt-<step>.safetensors.tmp" in
// the same directory, fsync, rename, fsync of the directory), records
// "global_step" and a "checksum" (CRC-32C of the data section) in
// "__metadata__", and keeps the newest `keep_last` files. load_latest()
// returns the newest checkpoint that reads and verifies, skipping corrupt
// or truncated ones with a warning naming each. See docs/checkpoints.md.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/named_tensor.hpp"

namespace syncfac {

/// Metadata keys the store owns.
constexpr const char* checkpoint_step_key = "global_step";
constexpr const char* checkpoint_checksum_key = "checksum";

/// One checkpoint as read back.
struct checkpoint {
  int64_t global_step = 0;
  std::string path;
  parameter_set tensors;
  /// Everything in "__metadata__", global_step and checksum included.
  tensor_metadata metadata;
};

/// What save() did.
struct checkpoint_save_result {
  std::string path;
  /// Bytes written (the file's size).
  uint64_t bytes = 0;
  /// Older (or superseded) checkpoints and stray temporary files removed.
  std::vector<std::string> removed;
  /// Old checkpoints that could not be removed (the save itself worked).
  std::vector<std::string> warnings;
};

/// What load_latest() found.
struct checkpoint_load_result {
  /// The newest checkpoint that verified; none when the directory holds no
  /// checkpoint at all.
  std::optional<checkpoint> latest;
  /// One line per file skipped (corrupt, truncated, failed checksum) or
  /// cleaned up (stray temporary file), naming the file and the reason.
  std::vector<std::string> warnings;
};

class checkpoint_store {
public:
  /// A store in `directory` keeping the newest `keep_last` (>= 1)
  /// checkpoints. Nothing is touched until save() or load_latest().
  explicit checkpoint_store(std::string directory, size_t keep_last = 3);

  const std::string& directory() const noexcept {
    return directory_;
  }

  size_t keep_last() const noexcept {
    return keep_last_;
  }

  /// "<directory>/ckpt-<step>.safetensors".
  std::string path_of(int64_t step) const;

  /// Writes the checkpoint of `step` atomically, creating the directory if
  /// needed. `metadata` may hold anything except "checksum"; a
  /// "global_step" in it must equal `step`. Values must be finite
  /// (ec::non_finite naming the tensor). On a write error (ec::io_error
  /// naming the file and errno, e.g. a full disk) the temporary file is
  /// removed and the existing checkpoints are untouched. After a
  /// successful save the newest keep_last checkpoints remain; any with a
  /// step above `step` (a timeline that was rolled back) are removed too,
  /// so that `step` is the latest.
  caf::expected<checkpoint_save_result>
  save(int64_t step, const parameter_set& tensors,
       tensor_metadata metadata = {}) const;

  /// The steps of the checkpoint files present, ascending (not verified).
  /// ec::io_error when the directory exists but cannot be listed; empty
  /// when it does not exist.
  caf::expected<std::vector<int64_t>> list_steps() const;

  /// Reads and verifies the checkpoint of `step` (ec::bad_data naming the
  /// file for any corruption or a checksum mismatch).
  caf::expected<checkpoint> load(int64_t step) const;

  /// The newest checkpoint that reads and verifies; removes stray
  /// temporary files. An error when the directory cannot be listed
  /// (ec::io_error), or when checkpoints exist but none verifies
  /// (ec::bad_data, listing why each was refused).
  caf::expected<checkpoint_load_result> load_latest() const;

private:
  // Removes stray temporary files; returns their paths.
  std::vector<std::string> remove_temporaries() const;

  std::string directory_;
  size_t keep_last_;
};

/// Reads and verifies one checkpoint file: the format, the checksum, and
/// that "global_step" is present (and equals `expected_step` if >= 0).
caf::expected<checkpoint> read_checkpoint_file(const std::string& path,
                                               int64_t expected_step = -1);

/// A variable name and shape a model expects.
using expected_variable = std::pair<std::string, tensor_shape>;

/// Checks that `ckpt` holds every expected variable with the expected
/// shape and, unless `allow_extra`, nothing else. The error names the
/// first variable that differs (ec::unknown_name for a missing or extra
/// one, ec::shape_mismatch for a different shape) and the file.
caf::error validate_compatible(const std::vector<expected_variable>& expected,
                               const checkpoint& ckpt,
                               bool allow_extra = false);

/// The same with the names and shapes of `expected`.
caf::error validate_compatible(const parameter_set& expected,
                               const checkpoint& ckpt,
                               bool allow_extra = false);

} // namespace syncfac
