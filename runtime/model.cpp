#include "runtime/model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>

#include "runtime/base/error.hpp"

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


std::vector<layer_ptr> convnet_layers(const model_spec& spec) {
  // TF kfac/examples/convnet.py: layer ids 0..4.
  std::vector<layer_ptr> layers;
  layers.push_back(make_conv2d_layer("conv0", 5, spec.channels, 16, 1,
                                     padding::same, activation::relu));
  layers.push_back(make_max_pool_layer("pool1", 3, 2, padding::same));
  layers.push_back(make_conv2d_layer("conv2", 5, 16, 16, 1, padding::same,
                                     activation::relu));
  layers.push_back(make_max_pool_layer("pool3", 3, 2, padding::same));
  layers.push_back(make_flatten_layer("flatten"));
  // The dense input width follows from the image size (784 for 28x28).
  auto pooled = [](int64_t n) { return (((n + 1) / 2) + 1) / 2; };
  auto in = pooled(spec.height) * pooled(spec.width) * 16;
  layers.push_back(
    make_dense_layer("fc4", in, spec.num_classes, activation::identity));
  return layers;
}

std::vector<layer_ptr> mlp_layers(const model_spec& spec) {
  std::vector<layer_ptr> layers;
  layers.push_back(make_flatten_layer("flatten"));
  auto in = spec.height * spec.width * spec.channels;
  int id = 0;
  for (auto width : spec.hidden) {
    layers.push_back(make_dense_layer("fc" + std::to_string(id++), in, width,
                                      spec.hidden_activation));
    in = width;
  }
  layers.push_back(make_dense_layer("fc" + std::to_string(id), in,
                                    spec.num_classes, activation::identity));
  return layers;
}

std::vector<layer_ptr> autoencoder_layers(const model_spec& spec) {
  // Encoder down to the linear code layer (the last hidden width), the
  // mirror decoder, and one logit per input pixel.
  std::vector<layer_ptr> layers;
  layers.push_back(make_flatten_layer("flatten"));
  auto pixels = spec.height * spec.width * spec.channels;
  auto in = pixels;
  auto depth = spec.hidden.size();
  for (size_t i = 0; i < depth; ++i) {
    auto act = i + 1 == depth ? activation::identity : spec.hidden_activation;
    layers.push_back(make_dense_layer("enc" + std::to_string(i), in,
                                      spec.hidden[i], act));
    in = spec.hidden[i];
  }
  for (size_t i = depth - 1; i-- > 0;) {
    layers.push_back(make_dense_layer("dec" + std::to_string(depth - 2 - i),
                                      in, spec.hidden[i],
                                      spec.hidden_activation));
    in = spec.hidden[i];
  }
  layers.push_back(
    make_dense_layer("output", in, pixels, activation::identity));
  return layers;
}

std::vector<layer_ptr> make_layers(const model_spec& spec) {
  switch (spec.arch) {
    case model_arch::convnet: return convnet_layers(spec);
    case model_arch::mlp: return mlp_layers(spec);
    case model_arch::autoencoder: return autoencoder_layers(spec);
  }
  return {};
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

model::model(model_spec spec, std::vector<layer_ptr> layers)
  : spec_(std::move(spec)), layers_(std::move(layers)) {
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
  grad_inputs_.resize(layers_.size());
}

caf::expected<std::unique_ptr<model>> model::make(const model_spec& spec,
                                                  uint64_t seed) {
  if (auto err = spec.validate())
    return err;
  auto layers = make_layers(spec);
  // Shape-check the whole stack once, so a bad spec fails here.
  layer_collection collection;
  if (spec.arch == model_arch::autoencoder)
    collection.distribution = predictive_distribution::bernoulli;
  tensor_shape shape{1, spec.height, spec.width, spec.channels};
  for (auto& l : layers) {
    auto next = l->output_shape(shape);
    if (!next)
      return next.error();
    shape = std::move(*next);
    if (auto entry = kfac_entry(*l, shape))
      collection.layers.push_back(std::move(*entry));
  }
  std::unique_ptr<model> result{new model(spec, std::move(layers))};
  result->collection_ = std::move(collection);
  std::mt19937_64 rng{seed};
  for (auto& p : result->params_)
    initialise(p, spec.init, rng);
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

caf::expected<eval_result> model::forward(backend& dev, const tensor& images,
                                          const label_vector& labels) {
  if (auto err = check_batch(images, labels))
    return err;
  // The forward and the backward pass both read the parameters: on a GPU,
  // one copy to the device per change instead of one per kernel call.
  for (auto& p : params_)
    if (auto err = dev.make_resident(p.value))
      return err;
  input_ = &images;
  const tensor* x = &images;
  for (auto& l : layers_) {
    if (auto err = l->forward(dev, *x))
      return err;
    x = &l->output();
  }
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
  return backward_layers(dev, parameter_grads);
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

caf::error model::backward_layers(backend& dev, bool parameter_grads) {
  const tensor* dy = &dlogits_;
  // Without parameter gradients nothing below the first layer with
  // parameters is needed: its input gradient feeds no statistic.
  size_t first = 0;
  if (!parameter_grads)
    while (first + 1 < layers_.size() && !layers_[first]->kfac())
      ++first;
  for (size_t i = layers_.size(); i-- > first;) {
    tensor* dx = i > first ? &grad_inputs_[i] : nullptr;
    auto err = parameter_grads ? layers_[i]->backward(dev, *dy, dx)
                               : layers_[i]->backward_data(dev, *dy, dx);
    if (err)
      return err;
    dy = dx;
  }
  return caf::none;
}

caf::error model::adopt_forward(const model& source, int64_t n) {
  if (&source == this)
    return make_error(ec::invalid_argument,
                      "model: adopt_forward from the model itself");
  const auto& a = source.spec_;
  const auto& b = spec_;
  if (a.arch != b.arch || a.height != b.height || a.width != b.width
      || a.channels != b.channels || a.num_classes != b.num_classes
      || a.hidden != b.hidden || a.hidden_activation != b.hidden_activation)
    return make_error(ec::invalid_argument,
                      std::string{"model: adopt_forward from a replica of "
                                  "another model ("}
                        + to_string(a.arch) + " vs " + to_string(b.arch)
                        + " or other shapes)");
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
  const tensor* x = &adopted_input_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (auto err = layers_[i]->adopt_prefix(*source.layers_[i], *x, n))
      return err;
    x = &layers_[i]->output();
  }
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
  return forward(dev, images, labels);
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
  out << to_string(spec_.arch) << " (init " << to_string(spec_.init) << ", "
      << value_count(params_) << " parameters)";
  tensor_shape shape{1, spec_.height, spec_.width, spec_.channels};
  for (auto& l : layers_) {
    if (auto next = l->output_shape(shape))
      shape = std::move(*next);
    auto shown = shape;
    shown[0] = -1; // the batch dimension
    out << "\n  " << l->name() << " -> " << to_string(shown);
  }
  return out.str();
}

} // namespace syncfac
