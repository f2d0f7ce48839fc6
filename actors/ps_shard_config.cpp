// The PS shard's configuration: its checks, and the state built from it.

#include "actors/ps_shard_parts.hpp"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

namespace syncfac {

namespace ps_shard_parts {

namespace {

bool non_negative(const tensor_shape& shape) {
  return std::all_of(shape.begin(), shape.end(),
                     [](int64_t d) { return d >= 0; });
}

caf::error check_variables(const ps_shard_config& cfg) {
  const auto who = shard_name(cfg.index);
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < cfg.variables.size(); ++i) {
    const auto& [name, value] = cfg.variables[i];
    if (name.empty())
      return bad_config(who, "variable #" + std::to_string(i)
                               + " has an empty name");
    if (!names.insert(name).second)
      return bad_config(who, "variable " + in_quotes(name)
                               + " appears twice");
    // The accumulators throw on shapes like these: refuse them here.
    if (!non_negative(value.shape())
        || !detail::has_shape(value, value.shape()))
      return bad_config(who, "variable " + in_quotes(name)
                               + " has an inconsistent shape "
                               + detail::describe(value));
    if (!value.all_finite())
      return bad_config(who, "variable " + in_quotes(name)
                               + " holds NaN or Inf");
  }
  return caf::none;
}

const named_tensor* find_variable(const parameter_set& vars,
                                  const std::string& name) {
  auto i = std::find_if(vars.begin(), vars.end(),
                        [&](const named_tensor& x) { return x.name == name; });
  return i == vars.end() ? nullptr : &*i;
}

caf::error check_sparse_names(const ps_shard_config& cfg) {
  const auto who = shard_name(cfg.index);
  std::unordered_set<std::string> seen;
  for (const auto& name : cfg.sparse_variables) {
    auto var = find_variable(cfg.variables, name);
    if (var == nullptr)
      return bad_config(who, "sparse variable " + in_quotes(name)
                               + " is not among the shard's variables");
    if (!seen.insert(name).second)
      return bad_config(who, "sparse variable " + in_quotes(name)
                               + " is listed twice");
    if (var->value.rank() < 1)
      return bad_config(who, "sparse variable " + in_quotes(name)
                               + " needs rank >= 1 (rows), got shape "
                               + var->value.shape_string());
  }
  return caf::none;
}

caf::error check_unaveraged_names(const ps_shard_config& cfg) {
  for (const auto& name : cfg.unaveraged_variables)
    if (find_variable(cfg.variables, name) == nullptr)
      return bad_config(shard_name(cfg.index),
                        "unaveraged variable " + in_quotes(name)
                          + " is not among the shard's variables");
  return caf::none;
}

caf::error check_kfac_layers(const ps_shard_config& cfg) {
  const auto who = shard_name(cfg.index);
  if (!cfg.kfac_layers.empty() && cfg.optimizer.kind != optimizer_kind::kfac)
    return bad_config(who, "K-FAC layers given, but the optimizer is "
                           + std::string{to_string(cfg.optimizer.kind)});
  std::unordered_set<std::string> seen;
  std::unordered_set<std::string> sparse(cfg.sparse_variables.begin(),
                                         cfg.sparse_variables.end());
  for (const auto& l : cfg.kfac_layers) {
    if (auto err = l.validate())
      return prefixed(who, err);
    if (!seen.insert(l.name).second)
      return bad_config(who, "K-FAC layer " + in_quotes(l.name)
                               + " is listed twice");
    auto w = find_variable(cfg.variables, l.weight_name);
    auto b = find_variable(cfg.variables, l.bias_name);
    if (w == nullptr || b == nullptr)
      return bad_config(who, "K-FAC layer " + in_quotes(l.name)
                               + " needs variables " + in_quotes(l.weight_name)
                               + " and " + in_quotes(l.bias_name)
                               + " on this shard");
    if (sparse.count(l.weight_name) + sparse.count(l.bias_name) > 0)
      return bad_config(who, "K-FAC layer " + in_quotes(l.name)
                               + " has a sparse variable");
    if (b->value.size() != l.g_dim
        || w->value.size() != (l.a_dim - 1) * l.g_dim)
      return bad_config(who,
                        "K-FAC layer " + in_quotes(l.name) + " has factors "
                          + std::to_string(l.a_dim) + "x"
                          + std::to_string(l.a_dim) + " and "
                          + std::to_string(l.g_dim) + "x"
                          + std::to_string(l.g_dim)
                          + " that do not fit its weight "
                          + w->value.shape_string() + " and bias "
                          + b->value.shape_string());
  }
  return caf::none;
}

} // namespace

/// Builds the state from a validated config.
caf::error init_state(ps_shard_state& st, ps_shard_config cfg) {
  if (auto err = cfg.validate())
    return err;
  auto opt = optimizer::make(cfg.optimizer, cfg.variables);
  if (!opt)
    return prefixed(shard_name(cfg.index), opt.error());
  std::unordered_set<std::string> sparse(cfg.sparse_variables.begin(),
                                         cfg.sparse_variables.end());
  st.index = cfg.index;
  for (size_t i = 0; i < cfg.variables.size(); ++i) {
    const auto& var = cfg.variables[i];
    st.by_name.emplace(var.name, i);
    if (sparse.count(var.name) > 0)
      st.accumulators.emplace_back(std::in_place_type<sparse_accumulator>,
                                   var.name, var.value.shape());
    else
      st.accumulators.emplace_back(std::in_place_type<conditional_accumulator>,
                                   var.name, var.value.shape());
  }
  for (const auto& l : cfg.kfac_layers)
    st.kfac.push_back(shard_kfac_layer{l, st.by_name.at(l.weight_name),
                                       st.by_name.at(l.bias_name), {}});
  st.refused.assign(cfg.variables.size(), 0);
  st.averaged.assign(cfg.variables.size(), true);
  for (const auto& name : cfg.unaveraged_variables)
    st.averaged[st.by_name.at(name)] = false;
  st.variables = std::move(cfg.variables);
  st.averages = st.variables;
  st.average_decay = cfg.moving_average_decay;
  auto* state = &st;
  st.assembler.emplace([state](const std::string& name) -> const tensor_shape* {
    auto i = state->by_name.find(name);
    return i == state->by_name.end()
             ? nullptr
             : &state->variables[i->second].value.shape();
  });
  st.opt = std::move(*opt);
  return caf::none;
}

} // namespace ps_shard_parts

caf::error ps_shard_config::validate() const {
  if (index < 0)
    return bad_config(ps_shard_parts::shard_name(index), "index must be >= 0");
  if (auto err = ps_shard_parts::check_variables(*this))
    return err;
  if (auto err = ps_shard_parts::check_sparse_names(*this))
    return err;
  if (auto err = optimizer.validate())
    return ps_shard_parts::prefixed(ps_shard_parts::shard_name(index), err);
  if (auto err = ps_shard_parts::check_kfac_layers(*this))
    return err;
  if (auto err = ps_shard_parts::check_unaveraged_names(*this))
    return err;
  if (!(moving_average_decay >= 0.0f && moving_average_decay < 1.0f))
    return bad_config(ps_shard_parts::shard_name(index),
                      "moving-average decay must be in [0, 1), got "
                        + std::to_string(moving_average_decay));
  return caf::none;
}

} // namespace syncfac
