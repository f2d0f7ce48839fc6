#include "actors/role_snapshots.hpp"

#include <algorithm>

#include "actors/ps_shard_parts.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {

namespace {

/// `got` holds exactly the names and shapes of `want`, in any order;
/// the error names `what` (e.g. "ps shard 0: checkpoint variables").
caf::error check_same_variables(const parameter_set& want,
                                const parameter_set& got,
                                const std::string& what) {
  if (got.size() != want.size()) {
    for (const auto& w : want)
      if (std::none_of(got.begin(), got.end(), [&](const named_tensor& g) {
            return g.name == w.name;
          }))
        return make_error(ec::unknown_name,
                          what + " lack " + in_quotes(w.name));
    return make_error(ec::unknown_name,
                      what + " hold " + std::to_string(got.size())
                        + " tensors, the shard " + std::to_string(want.size()));
  }
  for (const auto& g : got) {
    auto w = std::find_if(want.begin(), want.end(),
                          [&](const named_tensor& x) { return x.name == g.name; });
    if (w == want.end())
      return make_error(ec::unknown_name,
                        what + " hold " + in_quotes(g.name)
                          + ", which the shard does not");
    if (w->value.shape() != g.value.shape())
      return make_error(ec::shape_mismatch,
                        what + ": " + in_quotes(g.name) + " has shape "
                          + to_string(g.value.shape()) + ", the shard's "
                          + to_string(w->value.shape()));
    if (!g.value.all_finite())
      return make_error(ec::non_finite,
                        what + ": " + in_quotes(g.name) + " is not finite");
  }
  return caf::none;
}

/// `got` reordered like `want` (names checked before).
parameter_set in_order_of(const parameter_set& want, parameter_set got) {
  parameter_set result;
  result.reserve(want.size());
  for (const auto& w : want)
    for (auto& g : got)
      if (g.name == w.name) {
        result.push_back(std::move(g));
        break;
      }
  return result;
}

} // namespace

shard_snapshot take_snapshot(const ps_shard_state& st) {
  shard_snapshot snap;
  snap.shard = st.index;
  snap.global_step = st.counters.global_step;
  snap.variables = st.variables;
  snap.averages = st.averages;
  snap.slots = st.opt->slots();
  for (const auto& l : st.kfac) {
    snap.kfac_layers.push_back(l.info.name);
    if (l.inverse)
      snap.inverses.push_back(*l.inverse);
  }
  return snap;
}

caf::error restore_snapshot(ps_shard_state& st, shard_snapshot snap) {
  auto who = "ps shard " + std::to_string(st.index) + ": restore";
  if (snap.global_step < 0)
    return make_error(ec::invalid_argument,
                      who + ": global_step " + std::to_string(snap.global_step)
                        + " is negative");
  if (auto err = check_same_variables(st.variables, snap.variables,
                                      who + ": the checkpoint's variables"))
    return err;
  if (!snap.averages.empty())
    if (auto err = check_same_variables(st.variables, snap.averages,
                                        who + ": the checkpoint's averages"))
      return err;
  std::vector<size_t> targets;
  for (const auto& inv : snap.inverses) {
    auto i = st.kfac_layer(inv.layer);
    if (!i)
      return make_error(ec::unknown_name,
                        who + ": the checkpoint has an inverse for layer "
                          + in_quotes(inv.layer) + ", which this shard lacks");
    const auto& layer = st.kfac[*i].info;
    if (auto err = check_inverse(inv, layer.a_dim, layer.g_dim))
      return with_context(err, who);
    targets.push_back(*i);
  }
  // The optimizer checks its slots against the variables; it is the last
  // check, and restores nothing when it fails.
  auto opt = *st.opt;
  auto slots = std::move(snap.slots);
  for (auto* set : {&slots.first, &slots.second})
    if (!set->empty())
      *set = in_order_of(st.variables, std::move(*set));
  if (auto err = opt.restore(std::move(slots)))
    return with_context(err, who + " of the optimizer slots");
  st.opt = std::move(opt);
  auto variables = in_order_of(st.variables, std::move(snap.variables));
  st.averages = snap.averages.empty()
                  ? variables
                  : in_order_of(st.variables, std::move(snap.averages));
  st.variables = std::move(variables);
  for (auto& l : st.kfac)
    l.inverse.reset();
  for (size_t k = 0; k < targets.size(); ++k)
    st.kfac[targets[k]].inverse = std::move(snap.inverses[k]);
  st.round_pushes = 0;
  // Gradients of a round in progress were computed from variables the
  // restore just replaced.
  for (auto& acc : st.accumulators)
    std::visit([](auto& x) { x.discard(); }, acc);
  ps_shard_parts::set_global_step(st, snap.global_step);
  return caf::none;
}

covariance_snapshot take_snapshot(const covariance_state& st) {
  covariance_snapshot snap;
  snap.index = st.cfg.index;
  snap.last_folded = st.last_folded;
  for (const auto& l : st.layers) {
    layer_factors f;
    f.layer = l.info.name;
    f.locations = l.info.locations;
    f.cov_updates = st.status.cov_updates;
    f.a = l.a_raw;
    f.g = l.g_raw;
    snap.layers.push_back(std::move(f));
    snap.weights.push_back(l.weight);
  }
  return snap;
}

caf::error restore_snapshot(covariance_state& st, covariance_snapshot snap) {
  auto who = "covariance actor " + std::to_string(st.cfg.index) + ": restore";
  if (snap.weights.size() != snap.layers.size())
    return make_error(ec::bad_message,
                      who + ": " + std::to_string(snap.layers.size())
                        + " layers but " + std::to_string(snap.weights.size())
                        + " weights");
  if (snap.layers.size() != st.layers.size())
    return make_error(ec::unknown_name,
                      who + ": the checkpoint has factors of "
                        + std::to_string(snap.layers.size())
                        + " layers, this actor keeps "
                        + std::to_string(st.layers.size()));
  std::vector<size_t> source(st.layers.size());
  for (size_t i = 0; i < st.layers.size(); ++i) {
    const auto& l = st.layers[i];
    auto k = std::find_if(snap.layers.begin(), snap.layers.end(),
                          [&](const layer_factors& f) {
                            return f.layer == l.info.name;
                          });
    if (k == snap.layers.end())
      return make_error(ec::unknown_name, who + ": the checkpoint lacks the "
                                            "factors of layer "
                                            + in_quotes(l.info.name));
    source[i] = static_cast<size_t>(k - snap.layers.begin());
    auto w = snap.weights[source[i]];
    // Before its first fold a layer has no factors yet (weight 0).
    tensor_shape a_shape{l.info.a_dim, l.info.a_dim};
    tensor_shape g_shape{l.info.g_dim, l.info.g_dim};
    bool unfolded = w == 0 && k->a.empty() && k->g.empty();
    if (!unfolded && (k->a.shape() != a_shape || k->g.shape() != g_shape))
      return make_error(ec::shape_mismatch,
                        who + ": layer " + in_quotes(l.info.name)
                          + " has factors " + to_string(k->a.shape()) + " and "
                          + to_string(k->g.shape()) + ", this actor "
                          + to_string(a_shape) + " and " + to_string(g_shape));
    if (!k->a.all_finite() || !k->g.all_finite() || !(w >= 0 && w <= 1))
      return make_error(ec::non_finite,
                        who + ": the factors of layer " + in_quotes(l.info.name)
                          + " are not finite or their weight "
                          + std::to_string(w) + " is outside [0, 1]");
  }
  for (size_t i = 0; i < st.layers.size(); ++i) {
    auto& f = snap.layers[source[i]];
    st.layers[i].a_raw = std::move(f.a);
    st.layers[i].g_raw = std::move(f.g);
    st.layers[i].weight = snap.weights[source[i]];
  }
  st.last_folded = snap.last_folded;
  st.pending.reset();
  if (!snap.layers.empty())
    st.status.cov_updates = snap.layers.front().cov_updates;
  return caf::none;
}

} // namespace syncfac
