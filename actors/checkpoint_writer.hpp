#pragma once

// The chief's checkpoint writer: turns a consistent checkpoint_contents
// into one safetensors file of the checkpoint directory (atomic, checksum,
// the newest few kept: runtime/checkpoint). Detached, because writing and
// fsyncing tens of megabytes blocks; the chief's sync loop goes on
// meanwhile and only the end of the run waits for the last write.

#include <cstddef>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/actors.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"

namespace syncfac {

struct checkpoint_writer_config {
  std::string directory;
  size_t keep_last = 3;
  /// Recorded in every checkpoint; a restore checks it.
  run_identity run;

  /// ec::invalid_config unless the directory is named and keep_last >= 1.
  caf::error validate() const;
};

/// Validates `cfg` and spawns the writer (detached).
caf::expected<checkpointer_actor>
spawn_checkpoint_writer(caf::actor_system& sys, checkpoint_writer_config cfg);

} // namespace syncfac
