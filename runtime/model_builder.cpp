#include "runtime/model_builder.hpp"

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"

namespace syncfac {

model_builder::model_builder(std::string name, std::vector<int64_t> input) {
  desc_.name = std::move(name);
  desc_.input_shape = std::move(input);
}

model_builder& model_builder::conv2d(int64_t filters, int64_t kernel,
                                     const conv2d_options& opts) {
  layer_desc l;
  l.type = layer_type::conv2d;
  l.units = filters;
  l.kernel = kernel;
  l.stride = opts.stride;
  l.pad = opts.pad;
  l.act = opts.act;
  l.init = opts.init;
  l.name = opts.name;
  l.inputs = opts.inputs;
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::dense(int64_t units, const dense_options& opts) {
  layer_desc l;
  l.type = layer_type::dense;
  l.units = units;
  l.act = opts.act;
  l.init = opts.init;
  l.name = opts.name;
  l.inputs = opts.inputs;
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::add(std::vector<std::string> inputs,
                                  activation act, std::string name) {
  layer_desc l;
  l.type = layer_type::add;
  l.inputs = std::move(inputs);
  l.act = act;
  l.name = std::move(name);
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::concat(std::vector<std::string> inputs,
                                     std::string name) {
  layer_desc l;
  l.type = layer_type::concat;
  l.inputs = std::move(inputs);
  l.name = std::move(name);
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::dense(int64_t units, activation act) {
  dense_options opts;
  opts.act = act;
  return dense(units, opts);
}

model_builder& model_builder::max_pool(int64_t window, int64_t stride,
                                       padding pad, std::string name) {
  layer_desc l;
  l.type = layer_type::max_pool;
  l.name = std::move(name);
  l.kernel = window;
  l.stride = stride == 0 ? window : stride;
  l.pad = pad;
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::avg_pool(int64_t window, int64_t stride,
                                       padding pad, std::string name) {
  max_pool(window, stride, pad, std::move(name));
  desc_.layers.back().type = layer_type::avg_pool;
  return *this;
}

model_builder& model_builder::global_avg_pool(std::string name) {
  layer_desc l;
  l.type = layer_type::global_avg_pool;
  l.name = std::move(name);
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::batch_norm(const batch_norm_options& opts) {
  layer_desc l;
  l.type = layer_type::batch_norm;
  l.momentum = opts.momentum;
  l.epsilon = opts.epsilon;
  l.act = opts.act;
  l.name = opts.name;
  l.inputs = opts.inputs;
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::dropout(double rate, std::string name) {
  layer_desc l;
  l.type = layer_type::dropout;
  l.rate = rate;
  l.name = std::move(name);
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::embedding_bag(int64_t vocabulary,
                                            int64_t width,
                                            bag_combiner combiner,
                                            std::string name) {
  layer_desc l;
  l.type = layer_type::embedding_bag;
  l.vocabulary = vocabulary;
  l.units = width;
  l.combiner = combiner;
  l.name = std::move(name);
  desc_.layers.push_back(std::move(l));
  return *this;
}

model_builder& model_builder::flatten() {
  layer_desc l;
  l.type = layer_type::flatten;
  desc_.layers.push_back(std::move(l));
  return *this;
}

namespace {

layer_desc activation_layer(activation act) {
  layer_desc l;
  l.type = layer_type::activation;
  l.act = act;
  return l;
}

} // namespace

model_builder& model_builder::relu() {
  desc_.layers.push_back(activation_layer(activation::relu));
  return *this;
}

model_builder& model_builder::tanh() {
  desc_.layers.push_back(activation_layer(activation::tanh));
  return *this;
}

model_builder& model_builder::sigmoid() {
  desc_.layers.push_back(activation_layer(activation::sigmoid));
  return *this;
}

model_builder& model_builder::init(std::string scheme) {
  desc_.init = std::move(scheme);
  return *this;
}

model_builder& model_builder::loss(loss_kind kind) {
  desc_.loss = kind;
  return *this;
}

caf::expected<model_description> model_builder::build() const {
  auto source = "model '" + desc_.name + "'";
  if (auto err = check_fields(desc_, source))
    return err;
  // Chains the shapes and checks the loss, as a model file's load does.
  auto built = model::make(described_spec(desc_), 0);
  if (!built)
    return built.error();
  return desc_;
}

} // namespace syncfac
