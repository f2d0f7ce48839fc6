#include "runtime/model_builder.hpp"

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"

namespace syncfac {

model_builder::model_builder(std::string name, std::vector<int64_t> input) {
  desc_.name = std::move(name);
  desc_.input_shape = std::move(input);
}

layer_desc& model_builder::append(layer_type type, std::string name,
                                  std::vector<std::string> inputs) {
  layer_desc l;
  l.type = type;
  l.name = std::move(name);
  l.inputs = std::move(inputs);
  desc_.layers.push_back(std::move(l));
  return desc_.layers.back();
}

model_builder& model_builder::conv2d(int64_t filters, int64_t kernel,
                                     const conv2d_options& opts) {
  auto& l = append(layer_type::conv2d, opts.name, opts.inputs);
  l.units = filters;
  l.kernel = kernel;
  l.stride = opts.stride;
  l.pad = opts.pad;
  l.act = opts.act;
  l.init = opts.init;
  return *this;
}

model_builder& model_builder::dense(int64_t units, const dense_options& opts) {
  auto& l = append(layer_type::dense, opts.name, opts.inputs);
  l.units = units;
  l.act = opts.act;
  l.init = opts.init;
  return *this;
}

model_builder& model_builder::add(std::vector<std::string> inputs,
                                  activation act, std::string name) {
  append(layer_type::add, std::move(name), std::move(inputs)).act = act;
  return *this;
}

model_builder& model_builder::concat(std::vector<std::string> inputs,
                                     std::string name) {
  append(layer_type::concat, std::move(name), std::move(inputs));
  return *this;
}

model_builder& model_builder::dense(int64_t units, activation act) {
  dense_options opts;
  opts.act = act;
  return dense(units, opts);
}

model_builder& model_builder::max_pool(int64_t window, int64_t stride,
                                       padding pad, std::string name) {
  auto& l = append(layer_type::max_pool, std::move(name));
  l.kernel = window;
  l.stride = stride == 0 ? window : stride;
  l.pad = pad;
  return *this;
}

model_builder& model_builder::avg_pool(int64_t window, int64_t stride,
                                       padding pad, std::string name) {
  max_pool(window, stride, pad, std::move(name));
  desc_.layers.back().type = layer_type::avg_pool;
  return *this;
}

model_builder& model_builder::global_avg_pool(std::string name) {
  append(layer_type::global_avg_pool, std::move(name));
  return *this;
}

model_builder& model_builder::batch_norm(const batch_norm_options& opts) {
  auto& l = append(layer_type::batch_norm, opts.name, opts.inputs);
  l.momentum = opts.momentum;
  l.epsilon = opts.epsilon;
  l.act = opts.act;
  return *this;
}

model_builder& model_builder::dropout(double rate, std::string name) {
  append(layer_type::dropout, std::move(name)).rate = rate;
  return *this;
}

model_builder& model_builder::embedding_bag(int64_t vocabulary,
                                            int64_t width,
                                            bag_combiner combiner,
                                            std::string name) {
  auto& l = append(layer_type::embedding_bag, std::move(name));
  l.vocabulary = vocabulary;
  l.units = width;
  l.combiner = combiner;
  return *this;
}

model_builder& model_builder::flatten() {
  append(layer_type::flatten);
  return *this;
}

model_builder& model_builder::relu() {
  append(layer_type::activation).act = activation::relu;
  return *this;
}

model_builder& model_builder::tanh() {
  append(layer_type::activation).act = activation::tanh;
  return *this;
}

model_builder& model_builder::sigmoid() {
  append(layer_type::activation).act = activation::sigmoid;
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
