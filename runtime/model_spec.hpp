#pragma once

// What model to build: the seeds' ConvNet or MLP, the autoencoder, or a
// described one (runtime/model_description.hpp), and how to initialise it.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "runtime/inspect.hpp"
#include "runtime/model_description.hpp"

namespace syncfac {

enum class model_arch : uint8_t {
  /// conv 5x5x16 SAME + relu, max-pool 3x3/2 SAME, conv 5x5x16 SAME + relu,
  /// max-pool 3x3/2 SAME, dense -> classes (TF kfac/examples/convnet.py).
  convnet,
  /// Dense layers with `hidden` units and `hidden_activation`, then a dense
  /// layer to the classes (TF kfac/examples/mlp.py uses tanh).
  mlp,
  /// Deep autoencoder (Hinton & Salakhutdinov 2006; Martens 2010; K-FAC,
  /// Martens & Grosse 2015): dense encoder layers with the `hidden` widths
  /// (classically 1000-500-250-30), the last of them the linear code layer,
  /// the other ones with `hidden_activation`; then the mirror decoder
  /// (250-500-1000) with `hidden_activation` and a dense output layer with
  /// one logit per input pixel. The loss is the sigmoid cross-entropy of
  /// the logits against the input itself (the labels are ignored): the
  /// output is sigmoid(logit), a Bernoulli mean per pixel.
  autoencoder,
  /// The model of `description` (a model file or the C++ builder).
  described,
};

enum class init_scheme : uint8_t {
  /// As the seeds: conv kernels N(0, 0.01^2), dense weights N(0, 1).
  seeds,
  /// Glorot/Xavier uniform for every weight.
  glorot,
  /// He normal, N(0, 2 / fan_in), for every weight.
  he,
  /// Martens (2010)'s sparse init: each unit gets min(15, fan_in) nonzero
  /// incoming weights drawn from N(0, 1), the others stay 0 (so unit
  /// outputs neither saturate nor vanish whatever the layer width).
  sparse,
};

const char* to_string(model_arch x) noexcept;
const char* to_string(init_scheme x) noexcept;
caf::expected<model_arch> parse_model_arch(const std::string& str);
caf::expected<init_scheme> parse_init_scheme(const std::string& str);

struct model_spec {
  model_arch arch = model_arch::convnet;
  init_scheme init = init_scheme::seeds;
  int64_t height = 28;
  int64_t width = 28;
  int64_t channels = 1;
  int64_t num_classes = 10;
  /// Hidden layer widths: the MLP's, or the autoencoder's encoder down to
  /// its code layer (autoencoder_spec() has the classic ones).
  std::vector<int64_t> hidden = {128, 64, 32};
  activation hidden_activation = activation::tanh;
  /// The layers of a described model (the built-in ones have theirs from
  /// builtin_description).
  model_description description;
  /// Label smoothing of the training loss (softmax cross-entropy only):
  /// the target is (1 - e) of the one-hot label plus e / K on every class.
  /// Training gradients only; the reported losses stay the plain
  /// cross-entropy, comparable with evaluations and unsmoothed runs.
  float label_smoothing = 0.0f;

  /// Whether the loss reconstructs the input (sigmoid cross-entropy, the
  /// autoencoder) instead of classifying it.
  bool reconstructs() const noexcept;

  caf::error validate() const;
};

/// The classic deep autoencoder of the K-FAC paper's MNIST benchmark:
/// 784-1000-500-250-30-250-500-1000-784 with sigmoid hidden units, a linear
/// code layer, and the sparse init.
model_spec autoencoder_spec();

/// The spec of a described model: the input from the description, the
/// classes from its last layer (0 until model::make has chained the
/// shapes: model::spec() has them).
model_spec described_spec(model_description desc);

SYNCFAC_INSPECT(model_spec, x.arch, x.init, x.height, x.width, x.channels,
                x.num_classes, x.hidden, x.hidden_activation, x.description,
                x.label_smoothing)

} // namespace syncfac
