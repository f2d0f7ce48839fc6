#include "runtime/model_file.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json.hpp"
#include "runtime/json_reader.hpp"

namespace syncfac {

namespace {

using json = nlohmann::ordered_json;

/// "string \"16\"", "number 2.5", "array": what was found instead.
std::string describe(const json& value) {
  return json_describe(value);
}

/// text_excerpt in single quotes: 'dropout'.
std::string excerpt(const std::string& text, size_t max_chars = 40) {
  return "'" + text_excerpt(text, max_chars) + "'";
}

std::string join(std::initializer_list<const char*> xs) {
  std::string out;
  for (auto x : xs)
    out += std::string{out.empty() ? "" : ", "} + x;
  return out;
}

/// Reads the fields of one JSON object; every message begins with `where`.
class field_reader {
public:
  field_reader(const json& obj, std::string where)
    : obj_(obj), where_(std::move(where)) {
  }

  caf::error only(std::initializer_list<const char*> allowed) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (std::none_of(allowed.begin(), allowed.end(),
                       [&](const char* x) { return it.key() == x; }))
        return bad("unknown field " + excerpt(it.key()) + " (expected "
                   + join(allowed) + ")");
    return caf::none;
  }

  caf::error integer(const char* field, int64_t& out, bool required) const {
    auto it = obj_.find(field);
    if (it == obj_.end())
      return required ? bad(std::string{"missing field '"} + field + "'")
                      : caf::none;
    if (!it->is_number_integer())
      return bad(std::string{"field '"} + field
                 + "' must be an integer, got " + describe(*it));
    if (it->is_number_unsigned() && it->get<uint64_t>() > (1ull << 40))
      return bad(std::string{"field '"} + field + "' is too large: "
                 + it->dump() + " (at most 2^40)");
    out = it->get<int64_t>();
    return caf::none;
  }

  caf::error number(const char* field, double& out) const {
    auto it = obj_.find(field);
    if (it == obj_.end())
      return caf::none;
    if (!it->is_number())
      return bad(std::string{"field '"} + field + "' must be a number, got "
                 + describe(*it));
    out = it->get<double>();
    return caf::none;
  }

  caf::error string(const char* field, std::string& out,
                    bool required) const {
    auto it = obj_.find(field);
    if (it == obj_.end())
      return required ? bad(std::string{"missing field '"} + field + "'")
                      : caf::none;
    if (!it->is_string())
      return bad(std::string{"field '"} + field + "' must be a string, got "
                 + describe(*it));
    out = it->get<std::string>();
    return caf::none;
  }

  caf::error pad(padding& out) const {
    std::string text;
    if (auto err = string("padding", text, false))
      return err;
    if (text.empty())
      return caf::none;
    std::string upper = text;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    if (upper == "SAME")
      out = padding::same;
    else if (upper == "VALID")
      out = padding::valid;
    else
      return bad("field 'padding' is " + excerpt(text)
                 + " (expected SAME or VALID)");
    return caf::none;
  }

  caf::error act(activation& out) const {
    std::string text;
    if (auto err = string("activation", text, false))
      return err;
    if (text.empty())
      return caf::none;
    auto parsed = parse_activation(text);
    if (!parsed)
      return bad("field 'activation' is " + excerpt(text)
                 + " (expected linear, relu, tanh or sigmoid)");
    out = *parsed;
    return caf::none;
  }

  /// "inputs": an array of layer names (or "input").
  caf::error names(const char* field, std::vector<std::string>& out) const {
    auto it = obj_.find(field);
    if (it == obj_.end())
      return caf::none;
    if (!it->is_array())
      return bad(std::string{"field '"} + field
                 + "' must be an array of layer names, got " + describe(*it));
    for (const auto& x : *it) {
      if (!x.is_string())
        return bad(std::string{"field '"} + field
                   + "' must hold layer names (strings), got "
                   + describe(x));
      out.push_back(x.get<std::string>());
    }
    return caf::none;
  }

  caf::error bad(const std::string& what) const {
    return make_error(ec::invalid_config, where_ + ": " + what);
  }

private:
  const json& obj_;
  std::string where_;
};

caf::error parse_layer(const json& entry, size_t index,
                       const std::string& source, layer_desc& out) {
  auto where = source + ": layer " + std::to_string(index);
  if (!entry.is_object())
    return make_error(ec::invalid_config,
                      where + ": must be an object, got " + describe(entry));
  field_reader top{entry, where};
  std::string type;
  if (auto err = top.string("type", type, true))
    return err;
  field_reader f{entry, where + " (" + text_excerpt(type, 20) + ")"};
  if (type == "relu" || type == "tanh" || type == "sigmoid") {
    out.type = layer_type::activation;
    out.act = *parse_activation(type);
    return f.only({"type"});
  }
  if (auto err = f.string("name", out.name, false))
    return err;
  if (auto err = f.names("inputs", out.inputs))
    return err;
  if (type == "dense") {
    out.type = layer_type::dense;
    if (auto err = f.only({"type", "name", "inputs", "units", "activation",
                           "init"}))
      return err;
    if (auto err = f.integer("units", out.units, true))
      return err;
    if (auto err = f.act(out.act))
      return err;
    return f.string("init", out.init, false);
  }
  if (type == "conv2d") {
    out.type = layer_type::conv2d;
    if (auto err = f.only({"type", "name", "inputs", "filters", "kernel",
                           "stride", "padding", "activation", "init"}))
      return err;
    if (auto err = f.integer("filters", out.units, true))
      return err;
    if (auto err = f.integer("kernel", out.kernel, true))
      return err;
    out.stride = 1;
    if (auto err = f.integer("stride", out.stride, false))
      return err;
    if (auto err = f.pad(out.pad))
      return err;
    if (auto err = f.act(out.act))
      return err;
    return f.string("init", out.init, false);
  }
  if (type == "max_pool") {
    out.type = layer_type::max_pool;
    if (auto err = f.only({"type", "name", "inputs", "window", "stride",
                           "padding"}))
      return err;
    if (auto err = f.integer("window", out.kernel, true))
      return err;
    out.stride = out.kernel; // TF's and Keras's default
    if (auto err = f.integer("stride", out.stride, false))
      return err;
    return f.pad(out.pad);
  }
  if (type == "avg_pool") {
    out.type = layer_type::avg_pool;
    if (auto err = f.only({"type", "name", "inputs", "window", "stride",
                           "padding"}))
      return err;
    if (auto err = f.integer("window", out.kernel, true))
      return err;
    out.stride = out.kernel; // as max_pool
    if (auto err = f.integer("stride", out.stride, false))
      return err;
    return f.pad(out.pad);
  }
  if (type == "global_avg_pool") {
    out.type = layer_type::global_avg_pool;
    return f.only({"type", "name", "inputs"});
  }
  if (type == "batch_norm") {
    out.type = layer_type::batch_norm;
    if (auto err = f.only({"type", "name", "inputs", "momentum", "epsilon",
                           "activation"}))
      return err;
    if (auto err = f.number("momentum", out.momentum))
      return err;
    if (auto err = f.number("epsilon", out.epsilon))
      return err;
    return f.act(out.act);
  }
  if (type == "dropout") {
    out.type = layer_type::dropout;
    if (auto err = f.only({"type", "name", "inputs", "rate"}))
      return err;
    return f.number("rate", out.rate);
  }
  if (type == "embedding_bag") {
    out.type = layer_type::embedding_bag;
    if (auto err = f.only({"type", "name", "inputs", "vocabulary", "units",
                           "combiner", "init"}))
      return err;
    if (auto err = f.integer("vocabulary", out.vocabulary, true))
      return err;
    if (auto err = f.integer("units", out.units, true))
      return err;
    std::string combiner = "mean";
    if (auto err = f.string("combiner", combiner, false))
      return err;
    if (combiner == "sum")
      out.combiner = bag_combiner::sum;
    else if (combiner != "mean")
      return f.bad("field 'combiner' is " + excerpt(combiner)
                   + " (expected mean or sum)");
    return f.string("init", out.init, false);
  }
  if (type == "flatten") {
    out.type = layer_type::flatten;
    return f.only({"type", "name", "inputs"});
  }
  if (type == "add") {
    out.type = layer_type::add;
    if (auto err = f.only({"type", "name", "inputs", "activation"}))
      return err;
    return f.act(out.act);
  }
  if (type == "concat") {
    out.type = layer_type::concat;
    return f.only({"type", "name", "inputs"});
  }
  return top.bad("unknown layer type " + excerpt(type)
                 + " (expected dense, conv2d, max_pool, avg_pool, "
                   "global_avg_pool, batch_norm, dropout, flatten, "
                   "embedding_bag, add, concat, relu, tanh or sigmoid)");
}

} // namespace

caf::expected<model_description>
parse_model_description(const std::string& json_text,
                        const std::string& source) {
  // The project's one JSON reader: duplicate keys, nesting and size are
  // refused as in a cluster file (runtime/json_reader.hpp).
  json_limits limits;
  limits.max_bytes = max_description_bytes;
  auto parsed = read_json(json_text, limits);
  if (!parsed)
    return with_context(parsed.error(), source);
  const auto& doc = *parsed;
  if (!doc.is_object())
    return make_error(ec::invalid_config,
                      source + ": not a JSON object (found " + describe(doc)
                        + "); expected {\"input_shape\": [...], \"layers\": "
                          "[...], \"loss\": \"...\"}");
  field_reader top{doc, source};
  if (auto err = top.only({"name", "input_shape", "init", "layers", "loss"}))
    return err;
  model_description desc;
  if (auto err = top.string("name", desc.name, false))
    return err;
  if (auto err = top.string("init", desc.init, false))
    return err;
  auto shape = doc.find("input_shape");
  if (shape == doc.end())
    return top.bad("missing field 'input_shape' (e.g. [28, 28, 1])");
  if (!shape->is_array())
    return top.bad("field 'input_shape' must be an array of integers, got "
                   + describe(*shape));
  for (const auto& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1
        || d.get<int64_t>() > (1ll << 30))
      return top.bad("field 'input_shape' must hold positive integers, got "
                     + describe(d));
    desc.input_shape.push_back(d.get<int64_t>());
  }
  std::string loss;
  if (auto err = top.string("loss", loss, true))
    return err;
  if (loss == "softmax_cross_entropy")
    desc.loss = loss_kind::softmax_cross_entropy;
  else if (loss == "sigmoid_cross_entropy")
    desc.loss = loss_kind::sigmoid_cross_entropy;
  else
    return top.bad("field 'loss' is " + excerpt(loss)
                   + " (expected softmax_cross_entropy or "
                     "sigmoid_cross_entropy)");
  auto layers = doc.find("layers");
  if (layers == doc.end())
    return top.bad("missing field 'layers'");
  if (!layers->is_array())
    return top.bad("field 'layers' must be an array of layer objects, got "
                   + describe(*layers));
  for (size_t i = 0; i < layers->size(); ++i) {
    layer_desc l;
    if (auto err = parse_layer((*layers)[i], i, source, l))
      return err;
    desc.layers.push_back(std::move(l));
  }
  if (auto err = check_fields(desc, source))
    return err;
  return desc;
}

} // namespace syncfac
