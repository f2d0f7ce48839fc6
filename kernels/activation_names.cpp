// The activation names every backend shares, apart from any kernel: a
// model description's reader (runtime/model_file) needs them alone.

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"

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

} // namespace syncfac
