#include "runtime/checkpoint/run_checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using json = nlohmann::json;

constexpr const char* format_key = "format";
constexpr const char* format_value = "syncfac-run-1";

/// Whole: a float in JSON must come back bit for bit.
std::string exact(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(x));
  return buf;
}

void add_tensor(parameter_set& out, std::set<std::string>& names,
                std::string name, const tensor& value, caf::error& err) {
  if (err)
    return;
  if (!names.insert(name).second) {
    err = make_error(ec::invalid_argument,
                     "checkpoint: two sources for tensor " + in_quotes(name));
    return;
  }
  out.push_back(named_tensor{std::move(name), value});
}

/// A tensor of a layer's K-FAC state, file name "kfac/inverse/<layer>/<part>"
/// or "kfac/factors/<layer>/<part>": what encode_run_checkpoint writes and
/// decode_tensors reads back. An `if_held` part (the eigenvalues of eigen
/// mode) is written only when it holds something.
template <class T>
struct kfac_part {
  const char* name;
  tensor T::*member;
  bool if_held;
};

constexpr kfac_part<layer_inverse> inverse_parts[] = {
  {"a", &layer_inverse::a, false},
  {"g", &layer_inverse::g, false},
  {"a_values", &layer_inverse::a_values, true},
  {"g_values", &layer_inverse::g_values, true},
};

constexpr kfac_part<layer_factors> factor_parts[] = {
  {"a", &layer_factors::a, false},
  {"g", &layer_factors::g, false},
};

/// Writes the parts of `entry` under "<prefix><part>".
template <class T, size_t N>
void add_kfac_parts(parameter_set& out, std::set<std::string>& names,
                    const std::string& prefix,
                    const kfac_part<T> (&parts)[N], const T& entry,
                    caf::error& err) {
  for (const auto& part : parts)
    if (!part.if_held || !(entry.*part.member).empty())
      add_tensor(out, names, prefix + part.name, entry.*part.member, err);
}

json inverse_meta(const layer_inverse& inv) {
  return json{{"mode", static_cast<int>(inv.mode)},
              {"form", static_cast<int>(inv.form)},
              {"locations", inv.locations},
              {"damping", exact(inv.damping)},
              {"a_damping", exact(inv.a_damping)},
              {"g_damping", exact(inv.g_damping)}};
}

json identity_meta(const run_identity& run) {
  return json{{"model", run.model},
              {"optimizer", run.optimizer},
              {"workers", run.workers},
              {"replicas_to_aggregate", run.replicas_to_aggregate},
              {"ps_tasks", run.ps_tasks},
              {"strategy", run.strategy},
              {"averages", run.averages},
              {"started_unix", run.started_unix}};
}

caf::error bad(const checkpoint& ckpt, const std::string& what) {
  return make_error(ec::bad_data, "checkpoint " + ckpt.path + ": " + what);
}

/// The metadata entry `key` as JSON; a missing or malformed entry names
/// the key.
caf::expected<json> meta_json(const checkpoint& ckpt, const std::string& key) {
  auto i = ckpt.metadata.find(key);
  if (i == ckpt.metadata.end())
    return bad(ckpt, "metadata lacks " + in_quotes(key));
  auto parsed = json::parse(i->second, nullptr, false);
  if (parsed.is_discarded())
    return bad(ckpt, "metadata " + in_quotes(key) + " is not valid JSON");
  return parsed;
}

float parse_float(const json& j, const char* key) {
  return std::stof(j.at(key).get<std::string>());
}

/// Reads the JSON-encoded scalars of one entry; nlohmann throws on a
/// wrong type, which becomes ec::bad_data naming the entry.
template <class F>
caf::error read_entry(const checkpoint& ckpt, const std::string& key, F f) {
  auto j = meta_json(ckpt, key);
  if (!j)
    return j.error();
  try {
    f(*j);
  } catch (const std::exception& e) {
    return bad(ckpt, "metadata " + in_quotes(key) + ": " + e.what());
  }
  return caf::none;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

/// Splits "kfac/inverse/<layer>/<part>" into layer and part.
bool split_layer_part(const std::string& rest, std::string& layer,
                      std::string& part) {
  auto slash = rest.rfind('/');
  if (slash == std::string::npos || slash == 0)
    return false;
  layer = rest.substr(0, slash);
  part = rest.substr(slash + 1);
  return true;
}

/// What read_kfac_part made of a tensor.
enum class part_read {
  /// Its name is not "<prefix><layer>/<part>".
  elsewhere,
  stored,
  /// "<prefix><layer>/<part>" with a part the table lacks.
  unknown_part,
};

/// The tensor "<prefix><layer>/<part>" into its part of into[layer].
template <class T, size_t N>
part_read read_kfac_part(const named_tensor& t, const std::string& prefix,
                         const kfac_part<T> (&parts)[N],
                         std::map<std::string, T>& into) {
  std::string layer, name;
  if (!starts_with(t.name, prefix)
      || !split_layer_part(t.name.substr(prefix.size()), layer, name))
    return part_read::elsewhere;
  auto& entry = into[layer];
  entry.layer = layer;
  for (const auto& part : parts)
    if (name == part.name) {
      entry.*part.member = t.value;
      return part_read::stored;
    }
  return part_read::unknown_part;
}

caf::error decode_tensors(const checkpoint& ckpt, restored_run& run) {
  for (const auto& t : ckpt.tensors) {
    if (starts_with(t.name, "variables/"))
      run.variables[t.name.substr(10)] = t.value;
    else if (starts_with(t.name, "averages/"))
      run.averages[t.name.substr(9)] = t.value;
    else if (starts_with(t.name, "slots/first/"))
      run.first_slots[t.name.substr(12)] = t.value;
    else if (starts_with(t.name, "slots/second/"))
      run.second_slots[t.name.substr(13)] = t.value;
    else {
      auto read = read_kfac_part(t, "kfac/inverse/", inverse_parts,
                                 run.inverses);
      if (read == part_read::elsewhere)
        read = read_kfac_part(t, "kfac/factors/", factor_parts, run.factors);
      if (read == part_read::unknown_part)
        return bad(ckpt, "unknown tensor " + in_quotes(t.name));
      if (read == part_read::elsewhere)
        return bad(ckpt, "unknown tensor " + in_quotes(t.name)
                           + " (not written by a syncfac run)");
    }
  }
  if (run.variables.empty())
    return bad(ckpt, "holds no variables");
  return caf::none;
}

caf::error decode_kfac_meta(const checkpoint& ckpt, restored_run& run) {
  for (auto& [layer, inv] : run.inverses) {
    auto& x = inv;
    if (auto err = read_entry(ckpt, "kfac/inverse/" + layer, [&](const json& j) {
          x.mode = static_cast<inverse_mode>(j.at("mode").get<int>());
          x.form = static_cast<inverse_form>(j.at("form").get<int>());
          x.locations = j.at("locations").get<int64_t>();
          x.damping = parse_float(j, "damping");
          x.a_damping = parse_float(j, "a_damping");
          x.g_damping = parse_float(j, "g_damping");
        }))
      return err;
  }
  for (auto& [layer, f] : run.factors) {
    auto& x = f;
    auto& weight = run.factor_weights[layer];
    if (auto err = read_entry(ckpt, "kfac/factors/" + layer, [&](const json& j) {
          x.locations = j.at("locations").get<int64_t>();
          x.cov_updates = j.at("cov_updates").get<int64_t>();
          weight = parse_float(j, "weight");
          run.last_folded = std::max(run.last_folded,
                                     j.at("last_folded").get<int64_t>());
        }))
      return err;
  }
  return caf::none;
}

caf::error decode_run_meta(const checkpoint& ckpt, restored_run& run) {
  if (auto i = ckpt.metadata.find(format_key);
      i == ckpt.metadata.end() || i->second != format_value)
    return bad(ckpt, "not a syncfac training checkpoint (metadata "
                       + in_quotes(format_key) + " is not "
                       + in_quotes(format_value) + ")");
  if (auto err = read_entry(ckpt, "run", [&](const json& j) {
        auto& w = run.written_under;
        w.model = j.at("model").get<std::string>();
        w.optimizer = j.at("optimizer").get<std::string>();
        w.workers = j.at("workers").get<int32_t>();
        w.replicas_to_aggregate = j.at("replicas_to_aggregate").get<int32_t>();
        w.ps_tasks = j.at("ps_tasks").get<int32_t>();
        w.strategy = j.at("strategy").get<std::string>();
        w.averages = j.at("averages").get<bool>();
        // Checkpoints written before it was recorded lack it.
        w.started_unix = j.value("started_unix", 0.0);
      }))
    return err;
  if (auto err = read_entry(ckpt, "optimizer_step", [&](const json& j) {
        run.optimizer_step = j.get<int64_t>();
      }))
    return err;
  return read_entry(ckpt, "data_order", [&](const json& j) {
    for (const auto& e : j) {
      worker_position p;
      p.worker = e.at("worker").get<int32_t>();
      p.local_step = e.at("local_step").get<int64_t>();
      p.data.epoch = e.at("epoch").get<int64_t>();
      p.data.cursor = e.at("cursor").get<int64_t>();
      run.data_order.push_back(p);
    }
  });
}

const tensor* find(const std::map<std::string, tensor>& m,
                   const std::string& name) {
  auto i = m.find(name);
  return i == m.end() ? nullptr : &i->second;
}

/// `out` (named like the shard's variables) filled from `source`.
caf::error fill_set(const std::map<std::string, tensor>& source,
                    const std::string& what, const std::string& path,
                    parameter_set& out) {
  for (auto& v : out) {
    auto t = find(source, v.name);
    if (!t)
      return make_error(ec::unknown_name, "checkpoint " + path + " lacks "
                                            + what + " of variable "
                                            + in_quotes(v.name));
    if (t->shape() != v.value.shape())
      return make_error(ec::shape_mismatch,
                        "checkpoint " + path + ": " + what + " of variable "
                          + in_quotes(v.name) + " has shape "
                          + to_string(t->shape()) + ", the model's "
                          + to_string(v.value.shape()));
    v.value = *t;
  }
  return caf::none;
}

} // namespace

std::string describe_model(const model_spec& spec) {
  if (spec.arch == model_arch::described) {
    // The whole description, one line: a checkpoint of another model's
    // layers is refused by name even where the variables happen to fit.
    std::string out = "described ";
    for (char c : spec.description.to_json())
      if (c != '\n')
        out += c;
    return out;
  }
  std::string out = to_string(spec.arch);
  out += " " + std::to_string(spec.height) + "x" + std::to_string(spec.width)
         + "x" + std::to_string(spec.channels) + "->"
         + std::to_string(spec.num_classes);
  if (spec.arch != model_arch::convnet) {
    out += " hidden";
    for (auto h : spec.hidden)
      out += " " + std::to_string(h);
    out += std::string{" "} + to_string(spec.hidden_activation);
  }
  return out;
}

run_identity make_run_identity(const model_spec& spec,
                               const optimizer_config& opt, int32_t workers,
                               int32_t replicas_to_aggregate, int32_t ps_tasks,
                               const std::string& strategy, bool averages) {
  run_identity id;
  id.model = describe_model(spec);
  id.optimizer = to_string(opt.kind);
  id.workers = workers;
  id.replicas_to_aggregate = replicas_to_aggregate;
  id.ps_tasks = ps_tasks;
  id.strategy = strategy;
  id.averages = averages;
  return id;
}

caf::error encode_run_checkpoint(const checkpoint_contents& contents,
                                 const run_identity& run,
                                 parameter_set& tensors,
                                 tensor_metadata& metadata) {
  caf::error err;
  std::set<std::string> names;
  tensors.clear();
  int64_t optimizer_step = 0;
  for (const auto& sh : contents.shards) {
    for (const auto& v : sh.variables)
      add_tensor(tensors, names, "variables/" + v.name, v.value, err);
    if (run.averages)
      for (const auto& v : sh.averages)
        add_tensor(tensors, names, "averages/" + v.name, v.value, err);
    for (const auto& v : sh.slots.first)
      add_tensor(tensors, names, "slots/first/" + v.name, v.value, err);
    for (const auto& v : sh.slots.second)
      add_tensor(tensors, names, "slots/second/" + v.name, v.value, err);
    optimizer_step = std::max(optimizer_step, sh.slots.step);
    for (const auto& inv : sh.inverses) {
      add_kfac_parts(tensors, names, "kfac/inverse/" + inv.layer + "/",
                     inverse_parts, inv, err);
      metadata["kfac/inverse/" + inv.layer] = inverse_meta(inv).dump();
    }
  }
  for (const auto& cov : contents.covariance)
    for (size_t i = 0; i < cov.layers.size(); ++i) {
      const auto& f = cov.layers[i];
      // A layer that has not folded a step yet has nothing to keep.
      if (f.a.empty())
        continue;
      add_kfac_parts(tensors, names, "kfac/factors/" + f.layer + "/",
                     factor_parts, f, err);
      metadata["kfac/factors/" + f.layer]
        = json{{"locations", f.locations},
               {"cov_updates", f.cov_updates},
               {"weight", exact(cov.weights.at(i))},
               {"last_folded", cov.last_folded}}
            .dump();
    }
  if (err)
    return err;
  auto order = json::array();
  for (const auto& p : contents.data_order)
    order.push_back(json{{"worker", p.worker},
                         {"local_step", p.local_step},
                         {"epoch", p.data.epoch},
                         {"cursor", p.data.cursor}});
  metadata[format_key] = format_value;
  metadata["run"] = identity_meta(run).dump();
  metadata["optimizer_step"] = std::to_string(optimizer_step);
  metadata["data_order"] = order.dump();
  return caf::none;
}

caf::expected<restored_run> decode_run_checkpoint(const checkpoint& ckpt,
                                                  const run_identity& now) {
  restored_run run;
  run.global_step = ckpt.global_step;
  run.path = ckpt.path;
  if (auto err = decode_run_meta(ckpt, run))
    return err;
  const auto& was = run.written_under;
  if (was.model != now.model)
    return make_error(ec::invalid_config,
                      "checkpoint " + ckpt.path + " was written for the model "
                        + in_quotes(was.model) + ", this run trains "
                        + in_quotes(now.model));
  if (was.optimizer != now.optimizer)
    return make_error(ec::invalid_config,
                      "checkpoint " + ckpt.path + " was written with optimizer "
                        + in_quotes(was.optimizer) + ", this run uses "
                        + in_quotes(now.optimizer)
                        + " (its slots would not carry over)");
  if (auto err = decode_tensors(ckpt, run))
    return err;
  if (auto err = decode_kfac_meta(ckpt, run))
    return err;
  return run;
}

parameter_set checkpoint_variables(const checkpoint& ckpt) {
  parameter_set out;
  for (const auto& t : ckpt.tensors)
    if (starts_with(t.name, "variables/"))
      out.push_back(named_tensor{t.name.substr(10), t.value});
  return out;
}

caf::error fill_snapshot(const restored_run& run, shard_snapshot& snap) {
  snap.global_step = run.global_step;
  if (auto err = fill_set(run.variables, "the value", run.path,
                          snap.variables))
    return err;
  if (run.written_under.averages && !snap.averages.empty()) {
    if (auto err = fill_set(run.averages, "the moving average", run.path,
                            snap.averages))
      return err;
  } else {
    snap.averages = snap.variables;
  }
  if (auto err = fill_set(run.first_slots, "the optimizer slot", run.path,
                          snap.slots.first))
    return err;
  if (auto err = fill_set(run.second_slots, "the second optimizer slot",
                          run.path, snap.slots.second))
    return err;
  snap.slots.step = run.optimizer_step;
  // A layer without an inverse in the file uses plain momentum until the
  // next one arrives, as at the start of a run.
  snap.inverses.clear();
  for (const auto& layer : snap.kfac_layers)
    if (auto i = run.inverses.find(layer); i != run.inverses.end())
      snap.inverses.push_back(i->second);
  return caf::none;
}

caf::error fill_snapshot(const restored_run& run, covariance_snapshot& snap) {
  snap.last_folded = run.last_folded;
  for (size_t i = 0; i < snap.layers.size(); ++i) {
    auto& f = snap.layers[i];
    auto k = run.factors.find(f.layer);
    if (k == run.factors.end()) {
      // Not folded when written: the layer starts over.
      f.a = tensor{};
      f.g = tensor{};
      f.cov_updates = 0;
      snap.weights.at(i) = 0;
      continue;
    }
    f.a = k->second.a;
    f.g = k->second.g;
    f.cov_updates = k->second.cov_updates;
    snap.weights.at(i) = run.factor_weights.at(f.layer);
  }
  return caf::none;
}

resume_point resume_of(const restored_run& run, int32_t index,
                       int32_t workers) {
  resume_point rp;
  rp.global_step = run.global_step;
  if (run.data_order.empty())
    return rp;
  int64_t newest_epoch = 0;
  for (const auto& p : run.data_order)
    newest_epoch = std::max(newest_epoch, p.data.epoch);
  rp.has_data_order = true;
  rp.data_order = batcher_state{newest_epoch + 1, 0};
  if (workers == run.written_under.workers)
    for (const auto& p : run.data_order)
      if (p.worker == index)
        rp.data_order = p.data;
  return rp;
}

} // namespace syncfac
