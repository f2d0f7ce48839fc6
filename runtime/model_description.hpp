#pragma once

// A model as data: a sequential stack of layers on an input shape, with a
// loss. The built-in models (--model convnet|mlp, the autoencoder) are
// descriptions too (builtin_description), a model file
// (runtime/model_file.hpp) or the C++ builder (runtime/model_builder.hpp)
// gives a user's own. model::make builds every model from one; each dense
// and conv2d layer is registered with K-FAC's layer collection on the way
// (docs/models.md).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>

#include "kernels/backend.hpp"

namespace syncfac {

struct model_spec;

/// activation: relu, tanh or sigmoid on its own (act); it owns no
/// variables and is fused into the dense or conv2d layer right before it,
/// which must have none of its own.
/// embedding_bag: the first layer only; its input holds per example a bag
/// of row indices (float values that are integers, -1 for padding), its
/// output the sum or mean of those rows of its table [vocabulary, units].
enum class layer_type : uint8_t {
  dense,
  conv2d,
  max_pool,
  flatten,
  activation,
  embedding_bag,
};

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
/// vocabulary, combiner, init. An empty name is derived (layer_names).
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

  friend bool operator==(const layer_desc& x, const layer_desc& y) {
    return x.type == y.type && x.name == y.name && x.units == y.units
           && x.kernel == y.kernel && x.stride == y.stride && x.pad == y.pad
           && x.act == y.act && x.init == y.init
           && x.vocabulary == y.vocabulary && x.combiner == y.combiner;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_desc& x) {
  return f(caf::meta::type_name("layer_desc"), x.type, x.name, x.units,
           x.kernel, x.stride, x.pad, x.act, x.init, x.vocabulary,
           x.combiner);
}

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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_description& x) {
  return f(caf::meta::type_name("model_description"), x.name, x.input_shape,
           x.init, x.layers, x.loss);
}

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
/// names, unique names made of letters, digits, '_', '-' and '.'. Errors
/// are ec::invalid_config and begin with `source` ("model file 'x.json'").
caf::error check_fields(const model_description& desc,
                        const std::string& source);

/// The description of a built-in model (spec.arch convnet, mlp or
/// autoencoder; spec.description itself for model_arch::described).
model_description builtin_description(const model_spec& spec);

} // namespace syncfac
