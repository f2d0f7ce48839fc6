#pragma once

// The C++ way to describe a model (docs/models.md, "The C++ API"): the
// same description a model file holds, built in code and handed to the
// runtime as described_spec(desc) in local_training_config::model.
//
//   auto desc = model_builder{"tiny", {28, 28, 1}}
//                 .conv2d(8, 3)
//                 .relu()
//                 .max_pool(2)
//                 .flatten()
//                 .dense(10)
//                 .build();               // caf::expected<model_description>
//
// A layer may take earlier layers' outputs by name (conv2d_options::inputs,
// add, concat): with two same-padded conv2d layers named "a" (followed by
// relu()) and "b", `.add({"a", "b"}).relu()` is a residual block's end.
//
// build() checks what a model file gets checked: fields, names, inputs,
// shapes that fit, the loss against the last layer, naming the layer.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/model_description.hpp"

namespace syncfac {

/// The optional settings of a conv2d layer.
struct conv2d_options {
  int64_t stride = 1;
  padding pad = padding::valid;
  activation act = activation::identity;
  /// seeds, glorot, he or sparse; empty: the model's.
  std::string init;
  /// Empty: derived ("conv0").
  std::string name;
  /// The layer it takes, by name ("input": the model's); empty: the layer
  /// before it.
  std::vector<std::string> inputs;
};

/// The optional settings of a dense layer.
struct dense_options {
  activation act = activation::identity;
  std::string init;
  std::string name;
  /// As conv2d_options::inputs.
  std::vector<std::string> inputs;
};

/// The optional settings of a batch_norm layer (Keras's defaults).
struct batch_norm_options {
  double momentum = 0.99;
  double epsilon = 1e-3;
  activation act = activation::identity;
  std::string name;
  /// As conv2d_options::inputs.
  std::vector<std::string> inputs;
};

class model_builder {
public:
  model_builder(std::string name, std::vector<int64_t> input_shape);

  model_builder& conv2d(int64_t filters, int64_t kernel,
                        const conv2d_options& opts = {});
  model_builder& dense(int64_t units, const dense_options& opts = {});
  model_builder& dense(int64_t units, activation act);
  /// stride 0: the window (TF's and Keras's default). A name lets later
  /// layers take its output (empty: derived, "pool1").
  model_builder& max_pool(int64_t window, int64_t stride = 0,
                          padding pad = padding::valid,
                          std::string name = "");
  /// As max_pool, the window's mean (padding not counted).
  model_builder& avg_pool(int64_t window, int64_t stride = 0,
                          padding pad = padding::valid,
                          std::string name = "");
  /// [N, H, W, C] -> [N, C], each channel's mean over the image.
  model_builder& global_avg_pool(std::string name = "");
  /// Per-channel normalisation by the batch's statistics while training,
  /// by the moving ones at evaluation (docs/models.md).
  model_builder& batch_norm(const batch_norm_options& opts = {});
  /// Zeroes inputs with probability `rate` while training.
  model_builder& dropout(double rate, std::string name = "");
  model_builder& flatten();
  /// The sum of two or more earlier layers' outputs of one shape (a
  /// residual connection), then `act`.
  model_builder& add(std::vector<std::string> inputs,
                     activation act = activation::identity,
                     std::string name = "");
  /// Two or more earlier layers' outputs side by side along the last axis.
  model_builder& concat(std::vector<std::string> inputs,
                        std::string name = "");
  /// The first layer only: bags of indices into a [vocabulary, width]
  /// table, combined by mean or sum; its gradient is sparse.
  model_builder& embedding_bag(int64_t vocabulary, int64_t width,
                               bag_combiner combiner = bag_combiner::mean,
                               std::string name = "");
  model_builder& relu();
  model_builder& tanh();
  model_builder& sigmoid();
  /// The init of every layer without its own (empty: the program's).
  model_builder& init(std::string scheme);
  /// softmax_cross_entropy unless set.
  model_builder& loss(loss_kind kind);

  /// The description so far, unchecked.
  const model_description& description() const noexcept {
    return desc_;
  }

  /// The checked description: ec::invalid_config or ec::shape_mismatch
  /// naming the layer index otherwise.
  caf::expected<model_description> build() const;

private:
  /// A new last layer of `type`, named `name` (empty: the default name)
  /// and taking `inputs` (empty: the layer before); the caller sets the
  /// fields of its type.
  layer_desc& append(layer_type type, std::string name = "",
                     std::vector<std::string> inputs = {});

  model_description desc_;
};

} // namespace syncfac
