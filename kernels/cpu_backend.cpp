// The CPU backend's factory and the parts of it that are not kernels (the
// activation names every backend shares: kernels/activation_names.cpp).

#include <algorithm>
#include <stdexcept>

#include <Eigen/Core>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

caf::error backend::reshape_copy(const tensor& x, const tensor_shape& shape,
                                 tensor& y) {
  if (element_count(shape) != x.size())
    return make_error(ec::shape_mismatch,
                      "reshape_copy: tensor " + x.shape_string()
                        + " cannot take shape " + to_string(shape));
  if (&x != &y)
    y = x;
  y.reshape(shape);
  return caf::none;
}

namespace cpu {

cpu_backend::cpu_backend(int threads) : threads_(threads) {
  // Eigen's lazily initialised cache sizes must exist before two backends
  // (two actors) run products concurrently.
  Eigen::initParallel();
}

std::string cpu_backend::name() const {
  return "cpu";
}

int cpu_backend::threads() const {
  return threads_;
}

void cpu_backend::run_host_parts(int64_t parts, int64_t elements,
                                 const std::function<void(int64_t)>& f) {
  auto team = std::clamp<int64_t>(elements / min_elements_per_part, 1,
                                  threads_);
  parallel_for(static_cast<int>(team), parts, [&](int64_t i, int) { f(i); });
}

} // namespace cpu

std::unique_ptr<backend> make_cpu_backend(int threads) {
  if (threads < 1)
    throw std::invalid_argument("make_cpu_backend: threads must be >= 1, got "
                                + std::to_string(threads));
  return std::make_unique<cpu::cpu_backend>(threads);
}

} // namespace syncfac
