#include "runtime/model_spec.hpp"

#include "runtime/base/error.hpp"

namespace syncfac {

const char* to_string(model_arch x) noexcept {
  switch (x) {
    case model_arch::convnet: return "convnet";
    case model_arch::mlp: return "mlp";
    case model_arch::autoencoder: return "autoencoder";
  }
  return "?";
}

const char* to_string(init_scheme x) noexcept {
  switch (x) {
    case init_scheme::seeds: return "seeds";
    case init_scheme::glorot: return "glorot";
    case init_scheme::he: return "he";
    case init_scheme::sparse: return "sparse";
  }
  return "?";
}

caf::expected<model_arch> parse_model_arch(const std::string& str) {
  for (auto x : {model_arch::convnet, model_arch::mlp,
                 model_arch::autoencoder})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown model '" + str
                      + "' (expected convnet, mlp or autoencoder)");
}

caf::expected<init_scheme> parse_init_scheme(const std::string& str) {
  for (auto x : {init_scheme::seeds, init_scheme::glorot, init_scheme::he,
                 init_scheme::sparse})
    if (str == to_string(x))
      return x;
  return make_error(ec::invalid_argument,
                    "unknown init '" + str
                      + "' (expected seeds, glorot, he or sparse)");
}

model_spec autoencoder_spec() {
  model_spec spec;
  spec.arch = model_arch::autoencoder;
  spec.init = init_scheme::sparse;
  spec.hidden = {1000, 500, 250, 30};
  spec.hidden_activation = activation::sigmoid;
  return spec;
}

caf::error model_spec::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "model: " + what);
  };
  if (height < 1 || width < 1 || channels < 1)
    return bad("input " + std::to_string(height) + "x" + std::to_string(width)
               + "x" + std::to_string(channels) + " must be positive");
  if (num_classes < 2)
    return bad("num_classes must be at least 2, got "
               + std::to_string(num_classes));
  if (arch == model_arch::autoencoder && hidden.empty())
    return bad("the autoencoder needs at least one hidden width (its code "
               "layer)");
  if (arch == model_arch::mlp || arch == model_arch::autoencoder) {
    for (auto h : hidden)
      if (h < 1)
        return bad("hidden layer width " + std::to_string(h)
                   + " must be positive");
  }
  return caf::none;
}

} // namespace syncfac
