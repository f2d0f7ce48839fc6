#include "runtime/model_description.hpp"

#include <cctype>
#include <map>
#include <set>

#include "runtime/base/error.hpp"
#include "runtime/json.hpp"
#include "runtime/json_reader.hpp"
#include "runtime/model_spec.hpp"

namespace syncfac {

const char* to_string(layer_type x) noexcept {
  switch (x) {
    case layer_type::dense: return "dense";
    case layer_type::conv2d: return "conv2d";
    case layer_type::max_pool: return "max_pool";
    case layer_type::flatten: return "flatten";
    case layer_type::activation: return "activation";
    case layer_type::embedding_bag: return "embedding_bag";
    case layer_type::add: return "add";
    case layer_type::concat: return "concat";
    case layer_type::avg_pool: return "avg_pool";
    case layer_type::global_avg_pool: return "global_avg_pool";
    case layer_type::batch_norm: return "batch_norm";
    case layer_type::dropout: return "dropout";
  }
  return "?";
}

const char* to_string(bag_combiner x) noexcept {
  return x == bag_combiner::mean ? "mean" : "sum";
}

const char* to_string(loss_kind x) noexcept {
  switch (x) {
    case loss_kind::softmax_cross_entropy: return "softmax_cross_entropy";
    case loss_kind::sigmoid_cross_entropy: return "sigmoid_cross_entropy";
  }
  return "?";
}

std::vector<int64_t> model_description::image_shape() const {
  switch (input_shape.size()) {
    case 1: return {1, 1, input_shape[0]};
    case 2: return {input_shape[0], input_shape[1], 1}; // one channel
    default: return input_shape;
  }
}

std::vector<std::string> layer_names(const model_description& desc) {
  std::vector<std::string> names;
  int64_t position = 0;
  for (const auto& l : desc.layers) {
    if (l.type == layer_type::flatten) {
      names.push_back(l.name.empty() ? "flatten" : l.name);
      continue;
    }
    if (l.type == layer_type::activation) {
      names.push_back(to_string(l.act));
      continue;
    }
    auto id = std::to_string(position++);
    if (!l.name.empty()) {
      names.push_back(l.name);
      continue;
    }
    switch (l.type) {
      case layer_type::embedding_bag: names.push_back("emb" + id); break;
      case layer_type::dense: names.push_back("fc" + id); break;
      case layer_type::conv2d: names.push_back("conv" + id); break;
      case layer_type::add: names.push_back("add" + id); break;
      case layer_type::concat: names.push_back("concat" + id); break;
      case layer_type::global_avg_pool: names.push_back("gap" + id); break;
      case layer_type::batch_norm: names.push_back("bn" + id); break;
      case layer_type::dropout: names.push_back("dropout" + id); break;
      default: names.push_back("pool" + id); break; // max_pool, avg_pool
    }
  }
  return names;
}

std::string layer_label(const model_description& desc,
                        const std::vector<std::string>& names, size_t index) {
  const auto& l = desc.layers[index];
  if (l.type == layer_type::activation)
    return "layer " + std::to_string(index) + " (" + to_string(l.act) + ")";
  return "layer " + std::to_string(index) + " (" + to_string(l.type) + " '"
         + names[index] + "')";
}

std::string layer_label(const model_description& desc, size_t index) {
  return layer_label(desc, layer_names(desc), index);
}

namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '_' && c != '-' && c != '.')
      return false;
  return true;
}

bool valid_init(const std::string& init) {
  return init.empty() || parse_init_scheme(init).engaged();
}

} // namespace

caf::error check_fields(const model_description& desc,
                        const std::string& source) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config, source + ": " + what);
  };
  if (desc.input_shape.empty() || desc.input_shape.size() > 3)
    return bad("input_shape must have 1 to 3 dimensions ([H, W, C], [H, W] "
               "or [D]), got "
               + std::to_string(desc.input_shape.size()));
  for (auto d : desc.input_shape)
    if (d < 1)
      return bad("input_shape " + to_string(tensor_shape{desc.input_shape})
                 + ": every dimension must be positive");
  if (!valid_init(desc.init))
    return bad("init '" + text_excerpt(desc.init)
               + "' is not one of seeds, glorot, he, sparse");
  if (desc.layers.empty())
    return bad("no layers");
  auto names = layer_names(desc);
  std::set<std::string> seen;
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const auto& l = desc.layers[i];
    // The names computed once: layer_label(desc, i) derives them all
    // again, which made validation quadratic in the layers.
    auto where = layer_label(desc, names, i) + ": ";
    if (l.type == layer_type::activation) {
      if (l.act == activation::identity)
        return bad(where + "an activation layer is relu, tanh or sigmoid");
      continue; // owns no variables: needs no name of its own
    }
    if (!valid_name(names[i]))
      return bad(where + "name must be 1 to 64 letters, digits, '_', '-' "
                         "or '.'");
    if (names[i] == model_input_name)
      return bad(where + "the name '" + names[i]
                 + "' is the model's input in 'inputs': choose another");
    if (!seen.insert(names[i]).second)
      return bad(where + "name '" + names[i]
                 + "' is used by an earlier layer (variable names must be "
                   "unique)");
    if (!valid_init(l.init))
      return bad(where + "init '" + text_excerpt(l.init)
                 + "' is not one of seeds, glorot, he, sparse");
    auto positive = [&](int64_t value, const char* field) -> caf::error {
      if (value < 1)
        return bad(where + field + " must be a positive integer, got "
                   + std::to_string(value));
      return caf::none;
    };
    switch (l.type) {
      case layer_type::dense:
        if (auto err = positive(l.units, "units"))
          return err;
        break;
      case layer_type::conv2d:
        if (auto err = positive(l.units, "filters"))
          return err;
        [[fallthrough]];
      case layer_type::max_pool:
      case layer_type::avg_pool:
        if (auto err = positive(l.kernel, l.type == layer_type::conv2d
                                            ? "kernel"
                                            : "window"))
          return err;
        if (auto err = positive(l.stride, "stride"))
          return err;
        break;
      case layer_type::embedding_bag:
        if (i != 0)
          return bad(where + "embedding_bag must be the first layer (its "
                             "input is the example's indices)");
        if (auto err = positive(l.units, "units"))
          return err;
        if (l.vocabulary < 1 || l.vocabulary > (int64_t{1} << 24))
          return bad(where + "vocabulary must be 1 to 2^24 (indices travel "
                             "as exact float values), got "
                     + std::to_string(l.vocabulary));
        break;
      case layer_type::concat:
        if (l.act != activation::identity)
          return bad(where + "concat has no activation (put one on the "
                             "layers it joins)");
        break;
      case layer_type::batch_norm:
        // Written so that NaN fails too.
        if (!(l.momentum >= 0 && l.momentum < 1))
          return bad(where + "momentum must be in [0, 1), got "
                     + std::to_string(l.momentum));
        if (!(l.epsilon > 0 && l.epsilon <= 1))
          return bad(where + "epsilon must be in (0, 1], got "
                     + std::to_string(l.epsilon));
        break;
      case layer_type::dropout:
        if (!(l.rate >= 0 && l.rate < 1))
          return bad(where + "rate must be in [0, 1), got "
                     + std::to_string(l.rate));
        break;
      case layer_type::add:
      case layer_type::flatten:
      case layer_type::global_avg_pool:
      case layer_type::activation: break;
    }
  }
  auto inputs = resolve_inputs(desc, names, source);
  if (!inputs)
    return inputs.error();
  return caf::none;
}

caf::expected<std::vector<std::vector<int>>>
resolve_inputs(const model_description& desc,
             const std::vector<std::string>& names,
             const std::string& source) {
  auto bad = [&](size_t i, const std::string& what) {
    return make_error(ec::invalid_config, source + ": "
                                            + layer_label(desc, names, i)
                                            + ": " + what);
  };
  const auto count = desc.layers.size();
  std::vector<std::vector<int>> result(count);
  // The layers so far by name (activation layers have none of their own:
  // their name is their activation's), and which outputs some layer took.
  std::map<std::string, int> earlier;
  std::vector<bool> taken(count, false);
  int previous = -1;
  int last = -1;
  for (size_t i = 0; i < count; ++i) {
    const auto& l = desc.layers[i];
    if (l.type == layer_type::activation) {
      if (!l.inputs.empty())
        return bad(i, "an activation layer takes no inputs (it is part of "
                      "the layer before it)");
      continue; // the layer before it stands for both
    }
    auto arity = l.inputs.size();
    if (l.merges() && arity < 2)
      return bad(i, std::string{to_string(l.type)}
                      + " needs two or more layers in 'inputs', got "
                      + std::to_string(arity));
    if (!l.merges() && arity > 1)
      return bad(i, "takes one input, got " + std::to_string(arity)
                      + " in 'inputs' (only add and concat take several)");
    if (arity == 0)
      result[i].push_back(previous);
    for (const auto& name : l.inputs) {
      if (name == model_input_name) {
        result[i].push_back(-1);
        continue;
      }
      auto found = earlier.find(name);
      if (found != earlier.end()) {
        result[i].push_back(found->second);
        continue;
      }
      if (name == names[i])
        return bad(i, "input '" + text_excerpt(name)
                        + "' is the layer itself: a cycle");
      for (size_t j = i + 1; j < count; ++j)
        if (desc.layers[j].type != layer_type::activation && names[j] == name)
          return bad(i, "input '" + text_excerpt(name) + "' is "
                          + layer_label(desc, names, j)
                          + ", which comes later: a layer takes only "
                            "earlier layers' outputs (anything else would "
                            "be a cycle)");
      return bad(i, "input '" + text_excerpt(name)
                      + "' names no layer (nor '" + model_input_name
                      + "', the model's input)");
    }
    for (auto j : result[i])
      if (j >= 0)
        taken[static_cast<size_t>(j)] = true;
    earlier.emplace(names[i], static_cast<int>(i));
    previous = last = static_cast<int>(i);
  }
  for (size_t i = 0; i < count; ++i)
    if (desc.layers[i].type != layer_type::activation && !taken[i]
        && static_cast<int>(i) != last)
      return bad(i, "its output goes to no layer (only the last layer's "
                    "reaches the loss: name it in a later layer's "
                    "'inputs')");
  return result;
}

std::string model_description::to_json() const {
  auto names = layer_names(*this);
  std::string out = "{\n  \"name\": " + json_quote(name)
                    + ",\n  \"input_shape\": [";
  for (size_t i = 0; i < input_shape.size(); ++i)
    out += (i > 0 ? ", " : "") + std::to_string(input_shape[i]);
  out += "],\n";
  if (!init.empty())
    out += "  \"init\": " + json_quote(init) + ",\n";
  out += "  \"layers\": [";
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    json_object obj;
    if (l.type == layer_type::activation) {
      obj.add("type", to_string(l.act));
      out += (i > 0 ? ",\n    " : "\n    ") + obj.str();
      continue;
    }
    obj.add("type", to_string(l.type)).add("name", names[i]);
    switch (l.type) {
      case layer_type::dense:
        obj.add("units", l.units).add("activation", to_string(l.act));
        break;
      case layer_type::conv2d:
        obj.add("filters", l.units)
          .add("kernel", l.kernel)
          .add("stride", l.stride)
          .add("padding", l.pad == padding::same ? "SAME" : "VALID")
          .add("activation", to_string(l.act));
        break;
      case layer_type::max_pool:
      case layer_type::avg_pool:
        obj.add("window", l.kernel)
          .add("stride", l.stride)
          .add("padding", l.pad == padding::same ? "SAME" : "VALID");
        break;
      case layer_type::embedding_bag:
        obj.add("vocabulary", l.vocabulary)
          .add("units", l.units)
          .add("combiner", to_string(l.combiner));
        break;
      case layer_type::add:
        obj.add("activation", to_string(l.act));
        break;
      case layer_type::batch_norm:
        obj.add("momentum", l.momentum)
          .add("epsilon", l.epsilon)
          .add("activation", to_string(l.act));
        break;
      case layer_type::dropout:
        obj.add("rate", l.rate);
        break;
      case layer_type::concat:
      case layer_type::flatten:
      case layer_type::global_avg_pool:
      case layer_type::activation: break;
    }
    if (!l.init.empty())
      obj.add("init", l.init);
    if (!l.inputs.empty())
      obj.add("inputs", l.inputs);
    out += (i > 0 ? ",\n    " : "\n    ") + obj.str();
  }
  out += "\n  ],\n  \"loss\": " + json_quote(to_string(loss)) + "\n}\n";
  return out;
}

namespace {

layer_desc weighted(layer_type type, std::string name, int64_t units,
                    activation act) {
  layer_desc l;
  l.type = type;
  l.name = std::move(name);
  l.units = units;
  l.act = act;
  return l;
}

layer_desc conv(int64_t kernel, int64_t filters, activation act) {
  auto l = weighted(layer_type::conv2d, "", filters, act);
  l.kernel = kernel;
  l.stride = 1;
  l.pad = padding::same;
  return l;
}

layer_desc max_pool(int64_t window, int64_t stride) {
  layer_desc l;
  l.type = layer_type::max_pool;
  l.kernel = window;
  l.stride = stride;
  l.pad = padding::same;
  return l;
}

layer_desc flatten() {
  layer_desc l;
  l.type = layer_type::flatten;
  return l;
}

} // namespace

model_description builtin_description(const model_spec& spec) {
  if (spec.arch == model_arch::described)
    return spec.description;
  model_description desc;
  desc.input_shape = {spec.height, spec.width, spec.channels};
  auto& ls = desc.layers;
  switch (spec.arch) {
    case model_arch::convnet:
      // TF kfac/examples/convnet.py: layer ids 0..4.
      desc.name = "seeds_convnet";
      ls.push_back(conv(5, 16, activation::relu));
      ls.push_back(max_pool(3, 2));
      ls.push_back(conv(5, 16, activation::relu));
      ls.push_back(max_pool(3, 2));
      ls.push_back(flatten());
      ls.push_back(weighted(layer_type::dense, "", spec.num_classes,
                            activation::identity));
      break;
    case model_arch::mlp:
      desc.name = "seeds_mlp";
      ls.push_back(flatten());
      for (auto width : spec.hidden)
        ls.push_back(weighted(layer_type::dense, "", width,
                              spec.hidden_activation));
      ls.push_back(weighted(layer_type::dense, "", spec.num_classes,
                            activation::identity));
      break;
    case model_arch::autoencoder: {
      // Encoder down to the linear code layer (the last hidden width), the
      // mirror decoder, and one logit per input pixel.
      desc.name = "autoencoder";
      desc.loss = loss_kind::sigmoid_cross_entropy;
      ls.push_back(flatten());
      auto depth = spec.hidden.size();
      for (size_t i = 0; i < depth; ++i)
        ls.push_back(weighted(layer_type::dense, "enc" + std::to_string(i),
                              spec.hidden[i],
                              i + 1 == depth ? activation::identity
                                             : spec.hidden_activation));
      for (size_t i = depth - 1; i-- > 0;)
        ls.push_back(weighted(layer_type::dense,
                              "dec" + std::to_string(depth - 2 - i),
                              spec.hidden[i], spec.hidden_activation));
      ls.push_back(weighted(layer_type::dense, "output",
                            spec.height * spec.width * spec.channels,
                            activation::identity));
      break;
    }
    case model_arch::described: break;
  }
  return desc;
}

} // namespace syncfac
