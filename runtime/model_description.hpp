#pragma once

// A model as data: layers on an input shape, with a loss; a chain by
// default, a graph where layers name their inputs (add, concat). The
// built-in models (--model convnet|mlp, the autoencoder) are
// descriptions too (builtin_description), a model file
// (runtime/model_file.hpp) or the C++ builder (runtime/model_builder.hpp)
// gives a user's own. model::make builds every model from one; each dense
// and conv2d layer is registered with K-FAC's layer collection on the way
// (docs/models.md).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "kernels/backend.hpp"
#include "runtime/inspect.hpp"
#include "runtime/wire_float.hpp"

namespace syncfac {

struct model_spec;

/// activation: relu, tanh or sigmoid on its own (act); it owns no
/// variables and is fused into the dense, conv2d or add layer right before
/// it, which must have none of its own.
/// embedding_bag: the first layer only; its input holds per example a bag
/// of row indices (float values that are integers, -1 for padding), its
/// output the sum or mean of those rows of its table [vocabulary, units].
/// add: the elementwise sum of two or more inputs of one shape (a residual
/// connection), then its activation; concat: its inputs side by side
/// along the last axis (channels, or features), the other axes equal.
enum class layer_type : uint8_t {
  dense,
  conv2d,
  max_pool,
  flatten,
  activation,
  embedding_bag,
  add,
  concat,
  avg_pool,
  global_avg_pool,
  batch_norm,
  dropout,
};

/// What `inputs` names for the model's own input.
inline constexpr const char* model_input_name = "input";

enum class bag_combiner : uint8_t { mean, sum };

enum class loss_kind : uint8_t {
  /// Softmax over the last layer's outputs against integer labels.
  softmax_cross_entropy,
  /// One Bernoulli per output against the flattened input itself (the
  /// autoencoder's reconstruction; labels are ignored).
  sigmoid_cross_entropy,
};

const char* to_string(layer_type x) noexcept;
const char* to_string(loss_kind x) noexcept;
const char* to_string(bag_combiner x) noexcept;

/// One layer. Which fields mean something depends on the type:
/// dense: units, activation, init; conv2d: units (the filters), kernel,
/// stride, pad, activation, init; max_pool: kernel (the window), stride,
/// pad; flatten: none; activation: act; embedding_bag: units (the width),
/// vocabulary, combiner, init; add: inputs, activation; concat: inputs;
/// avg_pool: kernel (the window), stride, pad; global_avg_pool: none;
/// batch_norm: momentum, epsilon, activation; dropout: rate.
/// An empty name is derived (layer_names).
///
/// `inputs` names the layers whose outputs a layer takes: earlier layers
/// by name, or "input" for the model's input. Empty: the layer before it
/// (the model's input for the first), so a chain needs none; add and
/// concat need two or more, every other layer one at most. A layer that
/// an activation layer follows gives its activated output (the two are
/// one layer, fused).
struct layer_desc {
  layer_type type = layer_type::dense;
  std::string name;
  int64_t units = 0;
  int64_t kernel = 0;
  int64_t stride = 1;
  padding pad = padding::valid;
  activation act = activation::identity;
  /// seeds, glorot, he or sparse; empty: the model's init.
  std::string init;
  int64_t vocabulary = 0;
  bag_combiner combiner = bag_combiner::mean;
  std::vector<std::string> inputs;
  /// dropout: the share of inputs zeroed while training, in [0, 1).
  double rate = 0.5;
  /// batch_norm: the moving averages keep this share of their value per
  /// step (Keras's momentum; PyTorch's is 1 - this), in [0, 1).
  double momentum = 0.99;
  /// batch_norm: added to the variance before its square root, > 0.
  double epsilon = 1e-3;

  /// add and concat: the layers that take several inputs.
  bool merges() const noexcept {
    return type == layer_type::add || type == layer_type::concat;
  }

  friend bool operator==(const layer_desc& x, const layer_desc& y) {
    return x.type == y.type && x.name == y.name && x.units == y.units
           && x.kernel == y.kernel && x.stride == y.stride && x.pad == y.pad
           && x.act == y.act && x.init == y.init
           && x.vocabulary == y.vocabulary && x.combiner == y.combiner
           && x.inputs == y.inputs && x.rate == y.rate
           && x.momentum == y.momentum && x.epsilon == y.epsilon;
  }
};

SYNCFAC_INSPECT(layer_desc, x.type, x.name, x.units, x.kernel, x.stride, x.pad,
                x.act, x.init, x.vocabulary, x.combiner, x.inputs,
                wire(x.rate), wire(x.momentum), wire(x.epsilon))

struct model_description {
  /// For summaries and messages ("seeds_convnet").
  std::string name;
  /// One example's shape: [H, W, C], [H, W] (C = 1) or [D] (1 x 1 x D).
  std::vector<int64_t> input_shape;
  /// seeds, glorot, he or sparse for every layer without its own; empty:
  /// the program's --init.
  std::string init;
  std::vector<layer_desc> layers;
  loss_kind loss = loss_kind::softmax_cross_entropy;

  friend bool operator==(const model_description& x,
                         const model_description& y) {
    return x.name == y.name && x.input_shape == y.input_shape
           && x.init == y.init && x.layers == y.layers && x.loss == y.loss;
  }

  friend bool operator!=(const model_description& x,
                         const model_description& y) {
    return !(x == y);
  }

  /// [H, W, C] of input_shape (padded with ones in front).
  std::vector<int64_t> image_shape() const;

  /// The description as JSON, in the model file's format with every
  /// field spelled out and every name derived: what a model file that
  /// builds the same model holds (parse_model_description reads it back).
  std::string to_json() const;
};

SYNCFAC_INSPECT(model_description, x.name, x.input_shape, x.init, x.layers,
                x.loss)

/// The variable-name prefix of every layer: its own name, or the type and
/// its position among the layers other than flatten ("conv0", "pool1",
/// "fc4"; a flatten layer is "flatten", an activation layer its
/// activation), as the seeds name theirs.
std::vector<std::string> layer_names(const model_description& desc);

/// "layer 3 (dense 'fc3')": how messages name layer i of desc.
std::string layer_label(const model_description& desc, size_t index);

/// layer_label with the layer_names of `desc` computed once by the caller
/// (a loop over the layers stays linear).
std::string layer_label(const model_description& desc,
                        const std::vector<std::string>& names, size_t index);

/// Checks what needs no shapes: input shape, fields per layer type, init
/// names, unique names made of letters, digits, '_', '-' and '.', inputs
/// that name earlier layers (resolve_inputs). Errors are ec::invalid_config
/// and begin with `source` ("model file 'x.json'").
caf::error check_fields(const model_description& desc,
                        const std::string& source);

/// Per layer of desc, the layers whose outputs it takes, by index into
/// desc.layers (-1: the model's input); an activation layer's entry is
/// empty, and a layer that an activation layer follows stands for both
/// (the activation is fused into it). Refused, naming the layer and the
/// input: an input that names no layer, names the layer itself or a later
/// one (a cycle), an activation layer with inputs, add or concat with
/// fewer than two, another layer with more than one, and a layer (not the
/// last) whose output no layer takes. `names` is layer_names(desc).
caf::expected<std::vector<std::vector<int>>>
resolve_inputs(const model_description& desc,
             const std::vector<std::string>& names,
             const std::string& source);

/// The description of a built-in model (spec.arch convnet, mlp or
/// autoencoder; spec.description itself for model_arch::described).
model_description builtin_description(const model_spec& spec);

} // namespace syncfac
