// Backend names and factories, plus the parts of the CPU backend that are
// not kernels.

#include <stdexcept>

#include <Eigen/Core>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "runtime/error.hpp"

namespace syncfac {

const char* to_string(activation x) noexcept {
  switch (x) {
    case activation::identity: return "identity";
    case activation::relu: return "relu";
    case activation::tanh: return "tanh";
    case activation::sigmoid: return "sigmoid";
  }
  return "unknown_activation";
}

caf::expected<activation> parse_activation(const std::string& str) {
  if (str == "linear")
    return activation::identity;
  for (auto x : {activation::identity, activation::relu, activation::tanh,
                 activation::sigmoid})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown activation '" + str
                      + "' (expected identity, linear, relu, tanh or "
                        "sigmoid)");
}

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

} // namespace cpu

std::unique_ptr<backend> make_cpu_backend(int threads) {
  if (threads < 1)
    throw std::invalid_argument("make_cpu_backend: threads must be >= 1, got "
                                + std::to_string(threads));
  return std::make_unique<cpu::cpu_backend>(threads);
}

std::vector<std::string> available_backends() {
  // A CUDA backend registers here once it exists.
  return {"cpu"};
}

namespace {

std::string available_list() {
  std::string result;
  for (const auto& name : available_backends())
    result += (result.empty() ? "" : ", ") + name;
  return result;
}

} // namespace

caf::expected<std::unique_ptr<backend>> make_backend(const std::string& name,
                                                     int threads) {
  if (threads < 1)
    return make_error(ec::invalid_argument,
                      "backend '" + name + "': threads must be >= 1, got "
                        + std::to_string(threads));
  if (name == "cpu")
    return make_cpu_backend(threads);
  if (name == "cuda" || name.rfind("cuda:", 0) == 0)
    return make_error(ec::unavailable, "backend '" + name
                                         + "' is not built in (available: "
                                         + available_list() + ")");
  return make_error(ec::unknown_name, "unknown backend '" + name
                                        + "' (available: " + available_list()
                                        + ")");
}

} // namespace syncfac
