#include "kernels/backend_factory.hpp"

#include <cctype>
#include <iostream>
#include <mutex>

#include "runtime/base/error.hpp"

#ifdef SYNCFAC_HAVE_CUDA
#  include "kernels/cuda/cuda_backend.hpp"
#endif

namespace syncfac {

namespace {

bool all_digits(const std::string& str) {
  if (str.empty() || str.size() > 4)
    return false;
  for (auto c : str)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

caf::expected<std::shared_ptr<backend>> make_gpu(int index) {
#ifdef SYNCFAC_HAVE_CUDA
  auto result = cuda::make_cuda_backend(index);
  if (!result)
    return result.error();
  return std::shared_ptr<backend>{std::move(*result)};
#else
  return make_error(ec::unavailable,
                    "device gpu:" + std::to_string(index)
                      + " is not available: this build has no CUDA backend "
                        "(configure with a CUDA compiler, see docs/cuda.md)");
#endif
}

} // namespace

caf::expected<device_spec> parse_device(const std::string& device) {
  if (device == "cpu")
    return device_spec{device_spec::cpu, 0};
  if (device == "auto")
    return device_spec{device_spec::automatic, 0};
  if (device == "gpu" || device == "cuda")
    return device_spec{device_spec::gpu, 0};
  for (std::string prefix : {"gpu:", "cuda:"})
    if (device.rfind(prefix, 0) == 0) {
      auto rest = device.substr(prefix.size());
      if (all_digits(rest))
        return device_spec{device_spec::gpu, std::stoi(rest)};
    }
  return make_error(ec::unknown_name,
                    "unknown device '" + device
                      + "' (expected cpu, gpu:N or auto)");
}

bool cuda_built() noexcept {
#ifdef SYNCFAC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int gpu_count() noexcept {
#ifdef SYNCFAC_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

caf::expected<std::shared_ptr<backend>>
make_device_backend(const std::string& device, int threads) {
  if (threads < 1)
    return make_error(ec::invalid_argument,
                      "device '" + device + "': threads must be >= 1, got "
                        + std::to_string(threads));
  auto spec = parse_device(device);
  if (!spec)
    return spec.error();
  switch (spec->kind) {
    case device_spec::cpu:
      return std::shared_ptr<backend>{make_cpu_backend(threads)};
    case device_spec::gpu:
      return make_gpu(spec->index);
    case device_spec::automatic:
      break;
  }
  // auto: the first GPU if there is one, said once per process.
  static std::once_flag logged;
  auto count = gpu_count();
  if (count > 0) {
    auto result = make_gpu(0);
    if (result) {
      std::call_once(logged, [&] {
        std::clog << "device auto: using gpu:0 ("
#ifdef SYNCFAC_HAVE_CUDA
                  << cuda::device_description(0) << ", "
#endif
                  << count << " GPU" << (count == 1 ? "" : "s")
                  << " present)" << std::endl;
      });
      return result;
    }
    std::call_once(logged, [&] {
      std::clog << "device auto: gpu:0 failed (" << render(result.error())
                << "), using cpu with " << threads << " threads"
                << std::endl;
    });
  } else {
    std::call_once(logged, [&] {
      std::clog << "device auto: "
                << (cuda_built() ? "no CUDA device found"
                                 : "this build has no CUDA backend")
                << ", using cpu with " << threads << " threads" << std::endl;
    });
  }
  return std::shared_ptr<backend>{make_cpu_backend(threads)};
}

std::string tower_device(const std::string& device, int k) {
  auto spec = parse_device(device);
  if (!spec || spec->kind == device_spec::cpu || k < 0)
    return device;
  auto count = gpu_count();
  if (count == 0)
    return device; // auto stays auto (cpu), gpu:N stays an error
  return "gpu:" + std::to_string((spec->index + k) % count);
}

} // namespace syncfac
