#pragma once

// One run per process for syncfac.train, syncfac.node and syncfac.launch
// (docs/python.md): the CPU kernels' instruction set, glibc's memory
// settings and the CPU share are the process's, and the launcher's signal
// pipe is too, so a second run from another thread is refused by name
// rather than sharing them without knowing it.

#include <string>

namespace syncfac::python {

/// Holds the process's run slot while it lives.
class run_slot {
public:
  /// Takes the slot, or throws python::failure (ec::unavailable) saying
  /// that `who` ("syncfac.train") cannot run while another run does.
  explicit run_slot(const std::string& who);
  ~run_slot();

  run_slot(const run_slot&) = delete;
  run_slot& operator=(const run_slot&) = delete;
};

/// Whether a run of this process holds the slot.
bool run_in_progress() noexcept;

} // namespace syncfac::python
