#include "runtime/model_spec.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/parse_enum.hpp"

namespace syncfac {

const char* to_string(model_arch x) noexcept {
  switch (x) {
    case model_arch::convnet: return "convnet";
    case model_arch::mlp: return "mlp";
    case model_arch::autoencoder: return "autoencoder";
    case model_arch::described: return "described";
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
  return parse_enum(
    str, {model_arch::convnet, model_arch::mlp, model_arch::autoencoder},
    "model");
}

caf::expected<init_scheme> parse_init_scheme(const std::string& str) {
  return parse_enum(str,
                    {init_scheme::seeds, init_scheme::glorot, init_scheme::he,
                     init_scheme::sparse},
                    "init");
}

model_spec autoencoder_spec() {
  model_spec spec;
  spec.arch = model_arch::autoencoder;
  spec.init = init_scheme::sparse;
  spec.hidden = {1000, 500, 250, 30};
  spec.hidden_activation = activation::sigmoid;
  return spec;
}

model_spec described_spec(model_description desc) {
  model_spec spec;
  spec.arch = model_arch::described;
  auto image = desc.image_shape();
  if (image.size() == 3) {
    spec.height = image[0];
    spec.width = image[1];
    spec.channels = image[2];
  }
  spec.num_classes = 0;
  for (auto it = desc.layers.rbegin(); it != desc.layers.rend(); ++it)
    if (it->type == layer_type::dense || it->type == layer_type::conv2d) {
      spec.num_classes = it->units;
      break;
    }
  spec.hidden.clear();
  spec.description = std::move(desc);
  return spec;
}

bool model_spec::reconstructs() const noexcept {
  if (arch == model_arch::described)
    return description.loss == loss_kind::sigmoid_cross_entropy;
  return arch == model_arch::autoencoder;
}

caf::error model_spec::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_config, "model: " + what);
  };
  if (height < 1 || width < 1 || channels < 1)
    return bad("input " + std::to_string(height) + "x" + std::to_string(width)
               + "x" + std::to_string(channels) + " must be positive");
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    return bad("--label_smoothing must be in [0, 1), got "
               + std::to_string(label_smoothing));
  if (label_smoothing > 0 && reconstructs())
    return bad("--label_smoothing applies to softmax cross-entropy; this "
               "model's loss reconstructs its input (sigmoid "
               "cross-entropy)");
  if (arch == model_arch::described)
    return check_fields(description, "model '" + description.name + "'");
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
