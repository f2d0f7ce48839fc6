#pragma once

// A model replica: layers plus the parameters and gradients they bind to.
// It runs on whatever backend its caller (a device actor) hands it.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "runtime/eval_result.hpp"
#include "runtime/kfac/layer_collection.hpp"
#include "runtime/layers.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/named_tensor.hpp"

namespace syncfac {

class model {
public:
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  /// Builds the model of `spec` with parameters initialised from `seed`.
  static caf::expected<std::unique_ptr<model>> make(const model_spec& spec,
                                                    uint64_t seed);

  /// The spec it was made from, num_classes taken from the last layer.
  const model_spec& spec() const noexcept {
    return spec_;
  }

  /// The layers it was built from (builtin_description for a built-in).
  const model_description& description() const noexcept {
    return description_;
  }

  const parameter_set& parameters() const noexcept {
    return params_;
  }

  parameter_set& parameters() noexcept {
    return params_;
  }

  /// Gradients of the mean loss of the last forward_backward batch.
  const parameter_set& gradients() const noexcept {
    return grads_;
  }

  /// Replaces the parameters (same names and shapes, finite values).
  caf::error set_parameters(const parameter_set& values);

  /// Forward and backward pass on one batch: fills gradients() and returns
  /// the batch's loss sum and correct count.
  caf::expected<eval_result> forward_backward(backend& dev,
                                              const tensor& images,
                                              const label_vector& labels);

  /// Forward pass only, for evaluation: batch_norm layers normalise by
  /// their moving statistics and dropout layers pass everything.
  caf::expected<eval_result> evaluate(backend& dev, const tensor& images,
                                      const label_vector& labels);

  /// Where the training passes from now on draw their dropout masks: the
  /// k-th pass after this call uses the same masks for the same seed on
  /// any machine. A device actor sets the seed of each batch
  /// (batch::noise_seed), so a batch's masks do not depend on how many
  /// passes the replica ran before (a resumed run ends on the same
  /// parameters); model::make starts at the model's seed.
  void set_noise_seed(uint64_t seed) noexcept;

  /// The training forward pass that backward() continues: keeps the
  /// activations.
  caf::expected<eval_result> forward(backend& dev, const tensor& images,
                                     const label_vector& labels);

  /// Backward pass of the last forward() against `targets` (the labels,
  /// or labels sampled from the model for the true Fisher): fills
  /// gradients() and the layers' pre-activation gradients. An autoencoder
  /// ignores the labels: its targets are the inputs of the last forward().
  /// Without parameter_grads only the pre-activation gradients (what
  /// kfac_layers() shows) are computed and gradients() keeps its values:
  /// K-FAC's statistics pass.
  caf::error backward(backend& dev, const label_vector& targets,
                      bool parameter_grads = true);

  /// Takes, instead of running forward() on them, the activations of the
  /// first n examples of the batch `source` last ran forward() on: source
  /// is another replica of this model's spec, and this model must hold the
  /// same parameters (set_parameters). Afterwards this model is as if its
  /// last forward() had run on those n examples (up to float rounding in
  /// kernels whose blocking depends on the batch size), ready for
  /// backward() or backward_sampled(). Copies activations, computes
  /// nothing; source is not changed.
  caf::error adopt_forward(const model& source, int64_t n);

  /// Backward pass of the last forward() against targets drawn from the
  /// model's predictive distribution (kfac_collection().distribution): the
  /// sampled (true) Fisher's gradients. Categorical: one label per example,
  /// as sample_targets(); Bernoulli: every output pixel, as
  /// sample_pixel_targets().
  caf::error backward_sampled(backend& dev, std::mt19937_64& rng,
                              bool parameter_grads = true);

  /// One label per example of the last forward(), drawn from the model's
  /// predictive distribution (softmax): the targets of the sampled Fisher.
  /// Empty for a model with a Bernoulli distribution.
  label_vector sample_targets(std::mt19937_64& rng) const;

  /// Bernoulli models (the autoencoder): per output of the last forward(),
  /// 1 with probability sigmoid(logit), else 0; [N, D]. Empty for a
  /// categorical model.
  tensor sample_pixel_targets(std::mt19937_64& rng) const;

  /// The predictive distribution's parameters from the last forward():
  /// softmax probabilities [N, K], or Bernoulli means sigmoid(logits)
  /// [N, D] (the autoencoder's reconstructions).
  const tensor& predictions() const noexcept {
    return probs_;
  }

  /// A variable whose gradient is sparse (an embedding table) and the
  /// rows the last backward touched (valid until the next one).
  struct sparse_rows_of {
    std::string variable;
    const std::vector<int64_t>* rows;
  };

  /// Every variable with sparse gradients (empty for most models): a
  /// worker pushes only their touched rows (docs/models.md).
  std::vector<sparse_rows_of> sparse_gradient_rows() const;

  /// Per layer with parameters, its input and pre-activation gradient from
  /// the last forward_backward (valid until the next call).
  std::vector<kfac_view> kfac_layers() const;

  /// K-FAC's view of the model: every layer with a weight and a bias, with
  /// its factor shapes, and the predictive distribution of the loss.
  const layer_collection& kfac_collection() const noexcept {
    return collection_;
  }

  /// One line per layer with its output shape and parameter count.
  std::string summary() const;

private:
  /// forward() (training) or evaluate().
  caf::expected<eval_result> run_forward(backend& dev, const tensor& images,
                                         const label_vector& labels,
                                         bool training);

  /// Tells every layer what the coming pass is for (pass_mode).
  void begin_pass(bool training);

  /// Turns the one-hot gradient dlogits_ into label smoothing's
  /// (spec().label_smoothing > 0, softmax cross-entropy).
  void smooth_labels(const label_vector& targets);

  model(model_spec spec, std::vector<layer_ptr> layers,
        std::vector<std::vector<int>> inputs,
        std::vector<tensor_shape> shapes);

  /// The tensor layer `layer` outputs (-1: the input of the last
  /// forward).
  const tensor* output_of(int layer) const;

  /// Every layer's forward, in order, each on its inputs' outputs.
  caf::error forward_layers(backend& dev);

  /// Adds grad to the output gradient of `layer`: the first share is
  /// swapped in (grad gets the old storage), a later one is kept aside
  /// (later_shares_) and must stay unchanged until the layer's backward.
  void add_gradient(int layer, tensor& grad);
  /// Adds to layer's gradient a share equal to owner's whole gradient
  /// (owner's only consumer delivered it): layer then refers to owner's
  /// until another share arrives (no copy either way).
  void share_gradient(int layer, int owner);
  /// Layer i's gradient as the shares whose sum it is, in arrival order.
  std::vector<const tensor*> gradient_shares(int layer) const;
  /// Writes the sum of layer's shares into its own gradient, if it has
  /// more than one.
  caf::error sum_gradient_shares(backend& dev, int layer);
  /// Layer i's gradient: its own, or the one it refers to.
  const tensor& gradient_of(int layer) const;

  caf::error check_batch(const tensor& images,
                         const label_vector& labels) const;

  bool bernoulli() const noexcept {
    return collection_.distribution == predictive_distribution::bernoulli;
  }

  /// The autoencoder's targets: the last forward()'s input, flattened (the
  /// output of its first layer).
  const tensor& flat_inputs() const noexcept {
    return layers_.front()->output();
  }

  /// Backward through the layers from dlogits_.
  caf::error backward_layers(backend& dev, bool parameter_grads);

  model_spec spec_;
  model_description description_;
  /// The layers in the description's order, which is one in which every
  /// layer comes after the layers it takes (resolve_inputs).
  std::vector<layer_ptr> layers_;
  /// inputs_[i]: the layers whose outputs layer i takes (-1: the model's
  /// input); consumers_[i]: how many inputs name layer i; shapes_[i]: its
  /// output's shape for a batch of one.
  std::vector<std::vector<int>> inputs_;
  std::vector<int> consumers_;
  std::vector<tensor_shape> shapes_;
  /// merges_[i]: layer i as a merge layer (add, concat), else null.
  std::vector<merge_layer*> merges_;
  layer_collection collection_;
  parameter_set params_;
  parameter_set grads_;
  /// through_pool_[i]: layer i and the max_pool after it run their
  /// backward fused (pool_takes_activation): the pool is all layer i's
  /// output feeds.
  std::vector<bool> through_pool_;
  /// grad_outputs_[i] = dL/d(output of layer i), summed over the layers
  /// that take it; has_grad_[i]: some share of it arrived in this pass.
  /// The last layer's is dlogits_. A layer whose input has other
  /// consumers writes its share to grad_scratch_[i] first, a merge layer
  /// to merge_grads_[i][k] per input; the first share is swapped into
  /// grad_outputs_, later ones wait in later_shares_. grad_alias_[i] >= 0:
  /// layer i's gradient so
  /// far is grad_outputs_ of that layer (an add's inputs all get one
  /// gradient: made once, not copied; share_gradient).
  std::vector<tensor> grad_outputs_;
  std::vector<bool> has_grad_;
  std::vector<int> grad_alias_;
  /// later_shares_[i]: the shares of layer i's gradient that arrived after
  /// the first, not added yet: each is another layer's gradient or a
  /// grad_scratch_ / merge_grads_ tensor, none written again in the pass.
  /// A consumer that reads the gradient sums them there, in one pass with
  /// its own work where it can (an add's activation gradient).
  std::vector<std::vector<const tensor*>> later_shares_;
  std::vector<tensor> grad_scratch_;
  std::vector<std::vector<tensor>> merge_grads_;
  tensor probs_;
  /// The input of the last forward() (the caller's batch), and the copy of
  /// the first examples an adopt_forward() takes.
  const tensor* input_ = nullptr;
  tensor adopted_input_;
  tensor dlogits_;
  tensor sampled_pixels_;
  /// set_noise_seed's seed and the training passes since.
  uint64_t noise_seed_ = 0;
  uint64_t training_passes_ = 0;
};

} // namespace syncfac
