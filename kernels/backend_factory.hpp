#pragma once

// Choosing the compute device of a device actor: "cpu", "gpu:N" (also
// "gpu" for gpu:0, and the older spellings "cuda" / "cuda:N") or "auto"
// (the first GPU when this build has the CUDA backend and a GPU is present,
// else the CPU; the choice is logged once per process). Plain C++: no CUDA
// header, callable in every build.

#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "kernels/backend.hpp"

namespace syncfac {

struct device_spec {
  enum kind_t { cpu, gpu, automatic };
  kind_t kind = cpu;
  /// The GPU index of kind gpu.
  int index = 0;
};

/// Parses a --device value; anything else is ec::unknown_name naming
/// the value and the accepted forms.
caf::expected<device_spec> parse_device(const std::string& device);

/// Whether this build contains the CUDA backend.
bool cuda_built() noexcept;

/// CUDA devices present (0 without the CUDA backend or without a GPU).
int gpu_count() noexcept;

/// The backend of `device` with `threads` (>= 1) CPU threads where it runs
/// on the CPU. "gpu:N" without the CUDA backend, or with fewer than N + 1
/// GPUs, is ec::unavailable naming the device and why.
caf::expected<std::shared_ptr<backend>>
make_device_backend(const std::string& device, int threads);

/// The device of the k-th tower (k >= 0) of a run configured with `device`:
/// with GPUs, "gpu", "gpu:N" and "auto" place tower k on gpu:(N + k) mod
/// the GPU count, so towers spread over gpu:0..count-1; anything else is
/// returned unchanged (make_device_backend reports it).
std::string tower_device(const std::string& device, int k);

} // namespace syncfac
