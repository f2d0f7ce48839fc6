#include "runtime/model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>

#include "runtime/base/error.hpp"
#include "runtime/model_footprint.hpp"

namespace syncfac {

namespace {

/// The K-FAC entry of a layer with a weight and a bias (make_parameters
/// order: weight, then bias [out]); `out` is its output shape.
std::optional<kfac_layer> kfac_entry(const layer& l, const tensor_shape& out) {
  auto params = l.make_parameters();
  if (params.size() != 2 || params[1].value.shape().size() != 1)
    return std::nullopt;
  const auto& w = params[0];
  const auto& b = params[1];
  kfac_layer result;
  result.name = l.name();
  result.weight_name = w.name;
  result.bias_name = b.name;
  result.g_dim = b.value.shape()[0];
  result.a_dim = w.value.size() / result.g_dim + 1;
  if (w.value.shape().size() == 4 && out.size() == 4) {
    result.kind = layer_kind::conv2d;
    result.locations = out[1] * out[2];
  }
  return result;
}


/// The layer `desc` on an input of `input` (the previous layer's output),
/// or why it does not chain: the layer and both shapes named.
caf::expected<layer_ptr> make_layer(layer_desc desc,
                                    const std::string& name,
                                    const tensor_shape& input,
                                    const std::string& label) {
  auto shown = input;
  shown[0] = -1; // the batch dimension
  auto mismatch = [&](const std::string& wanted) {
    return make_error(ec::shape_mismatch,
                      label + ": input " + to_string(shown)
                        + " does not chain: " + wanted);
  };
  switch (desc.type) {
    case layer_type::dense:
      if (input.size() != 2)
        return mismatch("dense takes [-1, features] (put a flatten layer "
                        "before it)");
      return make_dense_layer(name, input[1], desc.units, desc.act);
    case layer_type::conv2d:
      if (input.size() != 4)
        return mismatch("conv2d takes [-1, height, width, channels]");
      return make_conv2d_layer(name, desc.kernel, input[3], desc.units,
                               desc.stride, desc.pad, desc.act);
    case layer_type::max_pool:
      if (input.size() != 4)
        return mismatch("max_pool takes [-1, height, width, channels]");
      return make_max_pool_layer(name, desc.kernel, desc.stride, desc.pad);
    case layer_type::flatten:
      return make_flatten_layer(name);
    case layer_type::embedding_bag:
      return make_embedding_bag_layer(name, desc.vocabulary, desc.units,
                                      desc.combiner == bag_combiner::mean);
    case layer_type::avg_pool:
      if (input.size() != 4)
        return mismatch("avg_pool takes [-1, height, width, channels]");
      return make_avg_pool_layer(name, desc.kernel, desc.stride, desc.pad);
    case layer_type::global_avg_pool:
      if (input.size() != 4)
        return mismatch("global_avg_pool takes [-1, height, width, "
                        "channels]");
      return make_global_avg_pool_layer(name);
    case layer_type::batch_norm:
      if (input.size() < 2)
        return mismatch("batch_norm takes [-1, ..., channels]");
      return make_batch_norm_layer(name, input.back(), desc.momentum,
                                   desc.epsilon, desc.act);
    case layer_type::dropout: return make_dropout_layer(name, desc.rate);
    case layer_type::add: return make_add_layer(name, desc.act);
    case layer_type::concat: return make_concat_layer(name);
    case layer_type::activation: break; // fused by model::make
  }
  return make_error(ec::invalid_config, label + ": unknown layer type");
}

/// Fan-in and fan-out of a weight: [in, out] or [kh, kw, in_c, out_c].
std::pair<double, double> fans(const tensor_shape& shape) {
  if (shape.size() == 4) {
    double field = static_cast<double>(shape[0] * shape[1]);
    return {field * static_cast<double>(shape[2]),
            field * static_cast<double>(shape[3])};
  }
  return {static_cast<double>(shape[0]), static_cast<double>(shape[1])};
}

void initialise(named_tensor& param, init_scheme scheme, std::mt19937_64& rng) {
  auto& value = param.value;
  if (value.rank() == 1) {
    value.fill(0.0f); // biases start at zero in every scheme
    return;
  }
  const std::string table_suffix = "/embeddings";
  if (param.name.size() > table_suffix.size()
      && param.name.compare(param.name.size() - table_suffix.size(),
                            table_suffix.size(), table_suffix)
           == 0) {
    // An embedding table's fan-in is one row, whatever the vocabulary:
    // N(0, 1 / width) in every scheme keeps a mean of rows near unit scale.
    std::normal_distribution<float> dist(
      0.0f, static_cast<float>(1.0 / std::sqrt(value.dim(1))));
    for (int64_t i = 0; i < value.size(); ++i)
      value[i] = dist(rng);
    return;
  }
  auto [fan_in, fan_out] = fans(value.shape());
  auto fill_normal = [&](double stddev) {
    std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
    for (int64_t i = 0; i < value.size(); ++i)
      value[i] = dist(rng);
  };
  switch (scheme) {
    case init_scheme::seeds:
      fill_normal(value.rank() == 4 ? 0.01 : 1.0);
      break;
    case init_scheme::glorot: {
      auto limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
      std::uniform_real_distribution<float> dist(-limit, limit);
      for (int64_t i = 0; i < value.size(); ++i)
        value[i] = dist(rng);
      break;
    }
    case init_scheme::he:
      fill_normal(std::sqrt(2.0 / fan_in));
      break;
    case init_scheme::sparse: {
      // The weight viewed as [fan_in, units] (row-major [in, out] and
      // [kh, kw, in_c, out_c] both are): per unit (column), a partial
      // Fisher-Yates shuffle picks the nonzero rows.
      constexpr int64_t nonzero = 15;
      auto rows = static_cast<int64_t>(fan_in);
      auto units = value.size() / rows;
      auto picks = std::min(nonzero, rows);
      value.fill(0.0f);
      std::vector<int64_t> order(static_cast<size_t>(rows));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (int64_t j = 0; j < units; ++j) {
        for (int64_t r = 0; r < rows; ++r)
          order[static_cast<size_t>(r)] = r;
        for (int64_t k = 0; k < picks; ++k) {
          std::uniform_int_distribution<int64_t> pick(k, rows - 1);
          std::swap(order[static_cast<size_t>(k)],
                    order[static_cast<size_t>(pick(rng))]);
          value[order[static_cast<size_t>(k)] * units + j] = dist(rng);
        }
      }
      break;
    }
  }
}

} // namespace

model::model(model_spec spec, std::vector<layer_ptr> layers,
             std::vector<std::vector<int>> inputs,
             std::vector<tensor_shape> shapes)
  : spec_(std::move(spec)),
    layers_(std::move(layers)),
    inputs_(std::move(inputs)),
    shapes_(std::move(shapes)) {
  for (auto& l : layers_)
    for (auto& p : l->make_parameters())
      params_.push_back(std::move(p));
  for (auto& p : params_)
    grads_.push_back(named_tensor{p.name, tensor{p.value.shape()}});
  // Bind only now: the vectors no longer reallocate.
  size_t offset = 0;
  for (auto& l : layers_) {
    auto n = l->make_parameters().size();
    if (n > 0)
      l->bind(&params_[offset], &grads_[offset]);
    offset += n;
  }
  const auto count = layers_.size();
  consumers_.assign(count, 0);
  for (const auto& xs : inputs_)
    for (auto j : xs)
      if (j >= 0)
        ++consumers_[static_cast<size_t>(j)];
  merges_.resize(count);
  merge_grads_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    merges_[i] = dynamic_cast<merge_layer*>(layers_[i].get());
    if (merges_[i] != nullptr)
      merge_grads_[i].resize(inputs_[i].size());
  }
  grad_outputs_.resize(count);
  grad_scratch_.resize(count);
  has_grad_.assign(count, false);
  // A conv2d and the max_pool right after it run fused (forward, and
  // backward where the device fuses the pool's activation) when the pool
  // is all the conv's output feeds.
  through_pool_.assign(count, false);
  for (size_t i = 0; i + 1 < count; ++i)
    through_pool_[i] = pool_takes_activation(*layers_[i], *layers_[i + 1])
                       && inputs_[i + 1] == std::vector<int>{static_cast<int>(i)}
                       && consumers_[i] == 1;
}

caf::expected<std::unique_ptr<model>> model::make(const model_spec& spec,
                                                  uint64_t seed) {
  if (auto err = spec.validate())
    return err;
  auto desc = builtin_description(spec);
  auto source = "model '" + desc.name + "'";
  if (auto err = check_fields(desc, source))
    return err;
  // Sizes before allocation (docs/robustness.md): whoever builds the
  // model (a device actor, the PS, a model file's check), a size that
  // overflows or does not fit this machine is refused by name here
  // rather than ending in std::bad_alloc.
  if (auto err = check_model_buildable(desc, source))
    return err;
  // Build and shape-check the whole stack once, so a bad spec fails here;
  // every layer with a weight and a bias (dense, conv2d) joins K-FAC's
  // layer collection on the way.
  auto names = layer_names(desc);
  auto desc_inputs = resolve_inputs(desc, names, source);
  if (!desc_inputs)
    return desc_inputs.error();
  std::vector<layer_ptr> layers;
  // Per parameter its init scheme; none: the layer's own starting values.
  std::vector<std::optional<init_scheme>> inits;
  layer_collection collection;
  if (spec.reconstructs())
    collection.distribution = predictive_distribution::bernoulli;
  auto image = desc.image_shape();
  tensor_shape input{1, image[0], image[1], image[2]};
  // Per layer of desc, the index of the built layer that gives its output
  // (an activation layer's is the layer it is fused into); the built
  // layers' inputs and output shapes.
  std::vector<int> built_of(desc.layers.size(), -1);
  std::vector<std::vector<int>> inputs;
  std::vector<tensor_shape> shapes;
  auto shape_of = [&](int built) -> const tensor_shape& {
    return built < 0 ? input : shapes[static_cast<size_t>(built)];
  };
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    auto d = desc.layers[i];
    auto label = source + ": " + layer_label(desc, names, i);
    if (d.type == layer_type::activation)
      return make_error(ec::invalid_config,
                        label + ": an activation layer must directly follow "
                                "a dense, conv2d, add or batch_norm layer "
                                "without an activation of its own (it is "
                                "fused into it)");
    // An activation layer right after a dense, conv2d, add or batch_norm
    // layer without one is that layer's activation: the kernels fuse them,
    // and K-FAC sees the pre-activation of the layer with parameters.
    auto next = i + 1 < desc.layers.size() ? &desc.layers[i + 1] : nullptr;
    bool fuse = next != nullptr && next->type == layer_type::activation
                && (d.type == layer_type::dense
                    || d.type == layer_type::conv2d
                    || d.type == layer_type::add
                    || d.type == layer_type::batch_norm)
                && d.act == activation::identity;
    if (fuse)
      d.act = next->act;
    std::vector<int> from;
    std::vector<tensor_shape> in_shapes;
    for (auto j : (*desc_inputs)[i]) {
      from.push_back(j < 0 ? -1 : built_of[static_cast<size_t>(j)]);
      in_shapes.push_back(shape_of(from.back()));
    }
    auto l = make_layer(d, names[i], in_shapes.front(), label);
    if (!l)
      return l.error();
    auto merge = dynamic_cast<merge_layer*>(l->get());
    auto out_shape = merge != nullptr ? merge->merged_shape(in_shapes)
                                      : (*l)->output_shape(in_shapes.front());
    if (!out_shape)
      return with_context(out_shape.error(), label);
    if (auto entry = kfac_entry(**l, *out_shape))
      collection.layers.push_back(std::move(*entry));
    auto init = !d.init.empty() ? d.init : desc.init;
    auto scheme = init.empty() ? caf::expected<init_scheme>{spec.init}
                               : parse_init_scheme(init);
    if (!scheme)
      return scheme.error();
    auto as_made = (*l)->parameters_start_as_made();
    for (size_t k = 0; k < (*l)->make_parameters().size(); ++k)
      inits.push_back(as_made ? std::nullopt
                              : std::optional<init_scheme>{*scheme});
    built_of[i] = static_cast<int>(layers.size());
    layers.push_back(std::move(*l));
    inputs.push_back(std::move(from));
    shapes.push_back(std::move(*out_shape));
    if (fuse) {
      ++i;
      built_of[i] = built_of[i - 1];
    }
  }
  auto shape = shapes.back();
  auto out = shape;
  out[0] = -1;
  model_spec resolved = spec;
  if (spec.reconstructs()) {
    auto pixels = element_count(input);
    if (shape.size() != 2 || shape[1] != pixels)
      return make_error(ec::shape_mismatch,
                        source + ": loss " + to_string(desc.loss)
                          + ": the output " + to_string(out)
                          + " must be [-1, " + std::to_string(pixels)
                          + "], one logit per input value");
    if (desc.layers.front().type != layer_type::flatten)
      return make_error(ec::invalid_config,
                        source + ": loss " + to_string(desc.loss)
                          + " reconstructs the flattened input: the first "
                            "layer must be flatten");
  } else {
    if (shape.size() != 2 || shape[1] < 2)
      return make_error(ec::shape_mismatch,
                        source + ": loss " + to_string(desc.loss)
                          + ": the output " + to_string(out)
                          + " must be [-1, classes] with at least 2 classes");
    resolved.num_classes = shape[1];
  }
  std::unique_ptr<model> result{new model(resolved, std::move(layers),
                                         std::move(inputs),
                                         std::move(shapes))};
  result->collection_ = std::move(collection);
  result->description_ = std::move(desc);
  std::mt19937_64 rng{seed};
  for (size_t i = 0; i < result->params_.size(); ++i)
    if (inits[i])
      initialise(result->params_[i], *inits[i], rng);
  result->set_noise_seed(seed);
  return result;
}

caf::error model::set_parameters(const parameter_set& values) {
  if (auto err = check_matches(params_, values, "parameters"))
    return err;
  for (size_t i = 0; i < values.size(); ++i)
    params_[i].value.values() = values[i].value.values();
  return caf::none;
}

caf::error model::check_batch(const tensor& images,
                              const label_vector& labels) const {
  const auto& s = images.shape();
  if (s.size() != 4 || s[1] != spec_.height || s[2] != spec_.width
      || s[3] != spec_.channels || s[0] < 1)
    return make_error(ec::shape_mismatch,
                      "batch images " + images.shape_string()
                        + " do not fit the model input "
                        + to_string(tensor_shape{-1, spec_.height,
                                                 spec_.width,
                                                 spec_.channels}));
  if (static_cast<int64_t>(labels.size()) != s[0])
    return make_error(ec::shape_mismatch,
                      "batch has " + std::to_string(s[0]) + " images but "
                        + std::to_string(labels.size()) + " labels");
  if (!images.all_finite())
    return make_error(ec::non_finite, "batch images hold NaN or Inf");
  return caf::none;
}

void model::set_noise_seed(uint64_t seed) noexcept {
  noise_seed_ = seed;
  training_passes_ = 0;
}

void model::begin_pass(bool training) {
  // Distinct, well-mixed seeds per training pass and per layer: the
  // dropout layer hashes its seed with each element's index.
  constexpr uint64_t golden = 0x9e3779b97f4a7c15ULL;
  auto pass_seed = noise_seed_ + golden * (training ? ++training_passes_ : 0);
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->begin_pass(
      pass_mode{training, pass_seed ^ (golden * (i + 1) >> 1)});
}

caf::expected<eval_result> model::forward(backend& dev, const tensor& images,
                                          const label_vector& labels) {
  return run_forward(dev, images, labels, true);
}

caf::expected<eval_result> model::run_forward(backend& dev,
                                              const tensor& images,
                                              const label_vector& labels,
                                              bool training) {
  if (auto err = check_batch(images, labels))
    return err;
  begin_pass(training);
  // The forward and the backward pass both read the parameters: on a GPU,
  // one copy to the device per change instead of one per kernel call.
  for (auto& p : params_)
    if (auto err = dev.make_resident(p.value))
      return err;
  input_ = &images;
  if (auto err = forward_layers(dev))
    return err;
  const tensor* x = &layers_.back()->output();
  float loss = 0;
  auto n = static_cast<int64_t>(labels.size());
  if (bernoulli()) {
    const auto& target = flat_inputs();
    if (auto err = dev.sigmoid_xent_forward(*x, target, probs_, loss))
      return err;
    double sq_error = 0;
    for (int64_t i = 0; i < probs_.size(); ++i) {
      auto diff = static_cast<double>(target[i]) - probs_[i];
      sq_error += diff * diff;
    }
    return eval_result{static_cast<double>(loss) * static_cast<double>(n), 0,
                       n, sq_error};
  }
  if (auto err = dev.softmax_xent_forward(*x, labels, probs_, loss))
    return err;
  auto correct = dev.count_correct(*x, labels);
  if (!correct)
    return correct.error();
  return eval_result{static_cast<double>(loss) * static_cast<double>(n),
                     *correct, n, 0};
}

caf::expected<eval_result>
model::forward_backward(backend& dev, const tensor& images,
                        const label_vector& labels) {
  auto result = forward(dev, images, labels);
  if (!result)
    return result;
  if (auto err = backward(dev, labels))
    return err;
  return result;
}

caf::error model::backward(backend& dev, const label_vector& targets,
                           bool parameter_grads) {
  if (auto err = bernoulli()
                   ? dev.sigmoid_xent_backward(probs_, flat_inputs(), dlogits_)
                   : dev.softmax_xent_backward(probs_, targets, dlogits_))
    return err;
  if (!bernoulli() && spec_.label_smoothing > 0)
    smooth_labels(targets);
  return backward_layers(dev, parameter_grads);
}

void model::smooth_labels(const label_vector& targets) {
  // The backend gave (p - onehot) / N; the smoothed target t = (1 - e)
  // onehot + e / K makes it (p - t) / N = that + e (onehot - 1 / K) / N.
  // On the host, after any backend: the correction is O(N K).
  auto N = dlogits_.dim(0);
  auto K = dlogits_.dim(1);
  if (N == 0 || K == 0)
    return;
  const float e = spec_.label_smoothing;
  const float all = e / static_cast<float>(K * N);
  const float own = e / static_cast<float>(N);
  for (int64_t r = 0; r < N; ++r) {
    float* d = dlogits_.data() + r * K;
    for (int64_t k = 0; k < K; ++k)
      d[k] -= all;
    d[targets[static_cast<size_t>(r)]] += own;
  }
}

caf::error model::backward_sampled(backend& dev, std::mt19937_64& rng,
                                   bool parameter_grads) {
  if (!bernoulli())
    return backward(dev, sample_targets(rng), parameter_grads);
  sampled_pixels_ = sample_pixel_targets(rng);
  if (auto err = dev.sigmoid_xent_backward(probs_, sampled_pixels_, dlogits_))
    return err;
  return backward_layers(dev, parameter_grads);
}

const tensor* model::output_of(int layer) const {
  return layer < 0 ? input_ : &layers_[static_cast<size_t>(layer)]->output();
}

caf::error model::forward_layers(backend& dev) {
  std::vector<const tensor*> xs;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (merges_[i] == nullptr) {
      const auto& x = *output_of(inputs_[i][0]);
      // A conv2d and the max_pool that is all its output feeds run as one
      // (layers.hpp, forward_through_pool): the pool reads each tile of
      // the conv's output while it is in cache.
      if (through_pool_[i]) {
        if (auto err = forward_through_pool(dev, *layers_[i], *layers_[i + 1],
                                            x))
          return err;
        ++i;
        continue;
      }
      if (auto err = layers_[i]->forward(dev, x))
        return err;
      continue;
    }
    xs.clear();
    for (auto j : inputs_[i])
      xs.push_back(output_of(j));
    if (auto err = merges_[i]->forward_all(dev, xs))
      return err;
  }
  return caf::none;
}

void model::add_gradient(int layer, tensor& grad) {
  auto p = static_cast<size_t>(layer);
  if (!has_grad_[p]) {
    std::swap(grad_outputs_[p], grad);
    has_grad_[p] = true;
    return;
  }
  // Another consumer's share already arrived (a fan-out, e.g. the input
  // of a residual block): kept aside until the layer's backward, which
  // sums them where it reads them (sum_gradient_shares, or the merge's
  // backward_shares).
  later_shares_[p].push_back(&grad);
}

void model::share_gradient(int layer, int owner) {
  auto p = static_cast<size_t>(layer);
  if (!has_grad_[p]) {
    grad_alias_[p] = owner;
    has_grad_[p] = true;
    return;
  }
  later_shares_[p].push_back(&grad_outputs_[static_cast<size_t>(owner)]);
}

std::vector<const tensor*> model::gradient_shares(int layer) const {
  std::vector<const tensor*> shares{&gradient_of(layer)};
  const auto& later = later_shares_[static_cast<size_t>(layer)];
  shares.insert(shares.end(), later.begin(), later.end());
  return shares;
}

caf::error model::sum_gradient_shares(backend& dev, int layer) {
  auto p = static_cast<size_t>(layer);
  if (later_shares_[p].empty())
    return caf::none;
  // Read from the gradient layer referred to, if it did, and written into
  // its own (add_forward's output may be one of its inputs).
  auto shares = gradient_shares(layer);
  grad_alias_[p] = -1;
  later_shares_[p].clear();
  return dev.add_forward(shares, activation::identity, grad_outputs_[p]);
}

const tensor& model::gradient_of(int layer) const {
  auto alias = grad_alias_[static_cast<size_t>(layer)];
  return grad_outputs_[static_cast<size_t>(alias >= 0 ? alias : layer)];
}

caf::error model::backward_layers(backend& dev, bool parameter_grads) {
  const auto count = layers_.size();
  // Without parameter gradients nothing below the first layer with
  // parameters is needed: its input gradient feeds no statistic.
  size_t first = 0;
  if (!parameter_grads)
    while (first + 1 < count && !layers_[first]->kfac())
      ++first;
  // Whether layer j's output gradient is needed: a layer of the pass (not
  // the model's input).
  auto needed = [first](int j) { return j >= 0 && static_cast<size_t>(j) >= first; };
  has_grad_.assign(count, false);
  grad_alias_.assign(count, -1);
  later_shares_.resize(count);
  for (auto& shares : later_shares_)
    shares.clear();
  for (size_t i = count; i-- > first;) {
    const tensor* dy = &dlogits_;
    // A merge that sums the shares of its output's gradient on its way
    // (add: in its activation's gradient pass) takes them as they are;
    // any other layer reads their sum. The last layer's is dlogits_.
    const bool takes_shares = i + 1 < count && merges_[i] != nullptr
                              && merges_[i]->sums_gradient_shares();
    if (i + 1 < count) {
      if (!has_grad_[i])
        return make_error(ec::internal, "model: no gradient reached layer '"
                                          + layers_[i]->name() + "'");
      if (!takes_shares)
        if (auto err = sum_gradient_shares(dev, static_cast<int>(i)))
          return err;
      dy = &gradient_of(static_cast<int>(i));
    }
    if (merges_[i] != nullptr) {
      const auto& ins = inputs_[i];
      // Where every input gets one gradient (add), it is made once, for
      // an input that nothing else gives a gradient to (so that its
      // gradient is written by this delivery alone and then only read),
      // and the other inputs refer to it: no copy, and a residual
      // block's input sums it with its other share in one pass.
      int owner = -1;
      if (merges_[i]->gradient_is_shared())
        for (size_t k = 0; k < ins.size() && owner < 0; ++k)
          if (needed(ins[k]) && consumers_[static_cast<size_t>(ins[k])] == 1)
            owner = static_cast<int>(k);
      auto made_here = [owner](size_t k) {
        return owner < 0 || k == static_cast<size_t>(owner);
      };
      std::vector<tensor*> dxs;
      for (size_t k = 0; k < ins.size(); ++k)
        dxs.push_back(needed(ins[k]) && made_here(k) ? &merge_grads_[i][k]
                                                     : nullptr);
      auto err = takes_shares
                   ? merges_[i]->backward_shares(
                     dev, gradient_shares(static_cast<int>(i)), dxs)
                   : merges_[i]->backward_all(dev, *dy, dxs);
      if (err)
        return err;
      for (size_t k = 0; k < ins.size(); ++k)
        if (dxs[k] != nullptr)
          add_gradient(ins[k], *dxs[k]);
      for (size_t k = 0; k < ins.size(); ++k)
        if (!made_here(k) && needed(ins[k]))
          share_gradient(ins[k], ins[static_cast<size_t>(owner)]);
      continue;
    }
    // A max_pool after a conv2d writes the conv's dL/ds, and the conv
    // continues from it (layers.hpp, pool_takes_activation), where the
    // device has kernels for that; i > first keeps the conv, at i - 1,
    // inside the pass.
    bool pair = i > first && through_pool_[i - 1]
                && dev.fuses_pool_activation();
    if (pair)
      --i;
    // The input gradient goes straight into the producer's when this
    // layer is its only consumer (a chain), else through a scratch tensor
    // into the sum.
    auto producer = inputs_[i][0];
    tensor* dx = nullptr;
    bool direct = false;
    if (needed(producer)) {
      direct = consumers_[static_cast<size_t>(producer)] == 1;
      dx = direct ? &grad_outputs_[static_cast<size_t>(producer)]
                  : &grad_scratch_[i];
    }
    auto err = pair ? backward_through_pool(dev, *layers_[i], *layers_[i + 1],
                                            *dy, dx, parameter_grads)
               : parameter_grads ? layers_[i]->backward(dev, *dy, dx)
                                 : layers_[i]->backward_data(dev, *dy, dx);
    if (err)
      return err;
    if (dx != nullptr) {
      if (direct)
        has_grad_[static_cast<size_t>(producer)] = true;
      else
        add_gradient(producer, *dx);
    }
  }
  return caf::none;
}

caf::error model::adopt_forward(const model& source, int64_t n) {
  if (&source == this)
    return make_error(ec::invalid_argument,
                      "model: adopt_forward from the model itself");
  if (source.description_ != description_)
    return make_error(ec::invalid_argument,
                      "model: adopt_forward from a replica of another model ("
                        + source.description_.name + " vs "
                        + description_.name + " or other layers)");
  if (source.input_ == nullptr || source.probs_.rank() != 2)
    return make_error(ec::invalid_argument,
                      "model: adopt_forward from a replica without a "
                      "forward pass");
  auto batch = source.probs_.dim(0);
  if (n < 1 || n > batch)
    return make_error(ec::invalid_argument,
                      "model: adopt_forward of " + std::to_string(n)
                        + " examples from a forward pass of "
                        + std::to_string(batch));
  const auto& from = *source.input_;
  auto in_shape = from.shape();
  auto per_example = from.size() / in_shape[0];
  in_shape[0] = n;
  adopted_input_.resize(in_shape);
  std::copy(from.data(), from.data() + n * per_example,
            adopted_input_.data());
  input_ = &adopted_input_;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (auto err = layers_[i]->adopt_prefix(*source.layers_[i],
                                            *output_of(inputs_[i][0]), n))
      return err;
  auto cols = source.probs_.dim(1);
  probs_.resize({n, cols});
  std::copy(source.probs_.data(), source.probs_.data() + n * cols,
            probs_.data());
  return caf::none;
}

label_vector model::sample_targets(std::mt19937_64& rng) const {
  // Inverse-CDF sampling from raw generator output: std:: distributions
  // differ between standard libraries, and runs should replay anywhere.
  label_vector targets;
  if (probs_.rank() != 2 || bernoulli())
    return targets;
  auto n = probs_.dim(0);
  auto k = probs_.dim(1);
  targets.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double acc = 0;
    int32_t pick = static_cast<int32_t>(k - 1);
    for (int64_t j = 0; j < k; ++j) {
      acc += probs_[i * k + j];
      if (u < acc) {
        pick = static_cast<int32_t>(j);
        break;
      }
    }
    targets.push_back(pick);
  }
  return targets;
}

tensor model::sample_pixel_targets(std::mt19937_64& rng) const {
  // One raw draw per output, as sample_targets (replays anywhere).
  if (probs_.rank() != 2 || !bernoulli())
    return tensor{};
  tensor targets{probs_.shape()};
  for (int64_t i = 0; i < probs_.size(); ++i) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    targets[i] = u < static_cast<double>(probs_[i]) ? 1.0f : 0.0f;
  }
  return targets;
}

caf::expected<eval_result> model::evaluate(backend& dev, const tensor& images,
                                           const label_vector& labels) {
  return run_forward(dev, images, labels, false);
}

std::vector<model::sparse_rows_of> model::sparse_gradient_rows() const {
  std::vector<sparse_rows_of> result;
  for (auto& l : layers_)
    if (auto rows = l->sparse_rows())
      result.push_back({l->sparse_variable(), rows});
  return result;
}

std::vector<kfac_view> model::kfac_layers() const {
  std::vector<kfac_view> result;
  for (auto& l : layers_)
    if (auto view = l->kfac())
      result.push_back(std::move(*view));
  return result;
}

std::string model::summary() const {
  std::ostringstream out;
  out << description_.name << " (init " << to_string(spec_.init) << ", "
      << value_count(params_) << " parameters)";
  auto kfac = collection_.layers.begin();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    auto shown = shapes_[i];
    shown[0] = -1; // the batch dimension
    out << "\n  " << l->name();
    // A layer that does not take the one before it says what it takes.
    if (inputs_[i] != std::vector<int>{static_cast<int>(i) - 1}) {
      out << " (";
      for (size_t k = 0; k < inputs_[i].size(); ++k) {
        auto j = inputs_[i][k];
        out << (k > 0 ? " + " : "")
            << (j < 0 ? std::string{model_input_name}
                      : layers_[static_cast<size_t>(j)]->name());
      }
      out << ")";
    }
    out << " -> " << to_string(shown);
    if (kfac != collection_.layers.end() && kfac->name == l->name()) {
      out << (kfac->kind == layer_kind::conv2d ? "  [K-FAC conv2d]"
                                               : "  [K-FAC dense]");
      ++kfac;
    }
  }
  return out.str();
}

} // namespace syncfac
