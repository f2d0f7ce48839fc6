// The PS shard's optimizer step from the accumulated gradients (first-order
// or K-FAC), the norm of a round for --clip_norm, and the checks and
// abandoning of the chief's requests.

#include "actors/ps_shard_parts.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/kfac/kfac_update.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {

namespace ps_shard_parts {

bool all_ready(const ps_shard_state& st, int64_t n) {
  if (st.round_pushes >= n)
    return true;
  return std::all_of(st.accumulators.begin(), st.accumulators.end(),
                     [n](const shard_accumulator& acc) {
                       return std::visit([n](const auto& x) {
                         return x.ready(n);
                       }, acc);
                     });
}

namespace {

/// The fewest gradients any variable averages over this round.
int64_t fewest_gradients(const ps_shard_state& st) {
  int64_t result = std::numeric_limits<int64_t>::max();
  for (const auto& acc : st.accumulators)
    result = std::min(result,
                      std::visit([](const auto& x) { return x.count(); },
                                 acc));
  return st.accumulators.empty() ? 0 : result;
}

/// How many gradients variable i's take asks for: n, or fewer when the
/// round's pushes lacked some of its gradients (its average is over those
/// that came); 0 when none came.
int64_t take_count(const ps_shard_state& st, size_t i, int64_t n) {
  auto count = std::visit([](const auto& x) { return x.count(); },
                          st.accumulators[i]);
  return std::min(count, n);
}

/// Takes variable i's average and applies it through the optimizer; a
/// variable that no push of the round had a gradient for stays as it is
/// (TF applies nothing for grad=None).
caf::error update_variable(ps_shard_state& st, size_t i, int64_t n) {
  auto& param = st.variables[i].value;
  n = take_count(st, i, n);
  if (n == 0)
    return std::visit([](auto& x) { return x.skip_round(); },
                      st.accumulators[i]);
  if (auto dense = std::get_if<conditional_accumulator>(&st.accumulators[i])) {
    auto average = dense->take(n);
    if (!average)
      return average.error();
    return st.opt->update(i, param, *average);
  }
  auto& sparse = std::get<sparse_accumulator>(st.accumulators[i]);
  auto average = sparse.take(n);
  if (!average)
    return average.error();
  return st.opt->update_rows(i, param, average->indices, average->rows);
}

/// K-FAC's step: a layer's weight and bias are preconditioned together,
/// so every dense average is taken first. A sparse variable (an embedding
/// table, which K-FAC does not precondition) takes the first-order update
/// once the preconditioned step succeeded: momentum SGD with K-FAC's
/// learning rate and momentum on the rows the round touched, outside the
/// KL clip (docs/models.md).
caf::error complete_kfac(ps_shard_state& st, int64_t n) {
  std::vector<tensor> averages;
  averages.reserve(st.variables.size());
  std::vector<bool> left_out(st.variables.size(), false);
  std::vector<std::pair<size_t, sparse_gradient>> rows;
  for (size_t i = 0; i < st.accumulators.size(); ++i) {
    auto k = take_count(st, i, n);
    if (auto sparse = std::get_if<sparse_accumulator>(&st.accumulators[i])) {
      left_out[i] = true;
      averages.emplace_back();
      // Like a first-order step: a table no push touched stays as it is.
      if (k == 0) {
        if (auto err = sparse->skip_round())
          return err;
        continue;
      }
      auto average = sparse->take(k);
      if (!average)
        return average.error();
      rows.emplace_back(i, std::move(*average));
      continue;
    }
    auto& acc = std::get<conditional_accumulator>(st.accumulators[i]);
    // A layer's weight and bias are preconditioned together: a variable
    // without gradients this round takes part with a zero gradient (its
    // momentum still moves it, unlike a first-order step, which skips it).
    if (k == 0) {
      if (auto err = acc.skip_round())
        return err;
      averages.emplace_back(acc.shape());
      continue;
    }
    auto average = acc.take(k);
    if (!average)
      return average.error();
    averages.push_back(std::move(*average));
  }
  std::vector<kfac_layer_slot> slots;
  for (const auto& l : st.kfac)
    slots.push_back({l.weight, l.bias,
                     l.inverse ? &*l.inverse : nullptr});
  st.opt->set_global_step(st.counters.global_step);
  auto info = kfac_apply(*st.opt, st.variables, averages, slots, left_out);
  if (!info)
    return info.error();
  for (auto& [i, average] : rows)
    if (auto err = st.opt->update_rows(i, st.variables[i].value,
                                       average.indices, average.rows))
      return err;
  st.counters.preconditioned_applies += info->preconditioned > 0 ? 1 : 0;
  st.counters.last_clip = info->scale;
  return caf::none;
}

/// Moves the moving averages toward the variables the apply just made
/// (TF's ExponentialMovingAverage: shadow -= (1 - decay) (shadow - var));
/// an unaveraged variable's entry takes its value.
void move_averages(ps_shard_state& st) {
  if (st.average_decay <= 0.0f)
    return;
  const float rate = 1.0f - st.average_decay;
  for (size_t i = 0; i < st.variables.size(); ++i) {
    auto& shadow = st.averages[i].value;
    const auto& var = st.variables[i].value;
    if (!st.averaged[i]) {
      shadow = var;
      continue;
    }
    for (int64_t j = 0; j < var.size(); ++j)
      shadow[j] -= rate * (shadow[j] - var[j]);
  }
}

/// `result` with the shard's counts so far.
applied with_counts(const ps_shard_state& st, applied result) {
  result.refused_pushes = st.counters.refused_pushes;
  result.preconditioned_applies = st.counters.preconditioned_applies;
  result.inverse_sets = st.counters.inverse_sets;
  return result;
}

} // namespace

/// One optimizer step from the averages; every accumulator is ready(n).
/// Variable by variable, so at most one average exists at a time.
caf::expected<applied> complete(ps_shard_state& st, int64_t n, float scale) {
  applied result{st.index, st.counters.global_step + 1, fewest_gradients(st)};
  st.round_pushes = 0;
  st.counters.last_applied_step = result.global_step;
  st.counters.last_gradient_scale = scale;
  st.opt->set_gradient_scale(scale);
  if (st.opt->config().kind == optimizer_kind::kfac) {
    if (auto err = complete_kfac(st, n))
      return make_error(ec::internal, shard_name(st.index)
                                        + ": K-FAC apply failed after the "
                                          "checks: "
                                        + render(err));
    st.counters.global_step = result.global_step;
    move_averages(st);
    return with_counts(st, result);
  }
  st.opt->set_global_step(st.counters.global_step);
  st.opt->begin_step();
  for (size_t i = 0; i < st.variables.size(); ++i)
    if (auto err = update_variable(st, i, n))
      return make_error(ec::internal, shard_name(st.index)
                                        + ": apply failed after the checks: "
                                        + render(err));
  st.counters.global_step = result.global_step;
  move_averages(st);
  return with_counts(st, result);
}

void set_global_step(ps_shard_state& st, int64_t step) {
  for (auto& acc : st.accumulators)
    std::visit([step](auto& x) { x.set_global_step(step); }, acc);
  st.counters.global_step = step;
  st.counters.last_applied_step = 0;
  st.counters.last_gradient_scale = 1.0f;
}

/// The sum of the squares of the averages an apply of n takes now (every
/// accumulator ready(n)): a variable without gradients this round adds
/// nothing, as it takes none (or, under K-FAC, a zero one).
caf::expected<norm_part> norm_of_round(const ps_shard_state& st, int64_t n) {
  norm_part result{st.index, st.counters.global_step, 0.0};
  for (size_t i = 0; i < st.accumulators.size(); ++i) {
    auto k = take_count(st, i, n);
    // A moving statistic's push is no gradient (runtime/moving_statistic.hpp).
    if (k == 0 || st.opt->is_moving_statistic(i))
      continue;
    auto squares = std::visit([k](const auto& x) {
      return x.average_sum_of_squares(k);
    }, st.accumulators[i]);
    if (!squares)
      return squares.error();
    result.sum_of_squares += *squares;
  }
  return result;
}

namespace {

/// Fails a pending request (an apply or a norm), if any, saying why it
/// will never complete.
template <class Pending>
void abandon(std::optional<Pending>& slot, const ps_shard_state& st, ec code,
             const char* what, const std::string& why) {
  if (!slot)
    return;
  auto pending = std::move(*slot);
  slot.reset();
  pending.promise.deliver(
    make_error(code, shard_name(st.index) + ": the " + what + " for step "
                       + std::to_string(pending.step) + " (n = "
                       + std::to_string(pending.n) + ") was abandoned: "
                       + why));
}

} // namespace

/// Fails the pending apply and norm, if any, saying why they will never
/// complete.
void abandon_pending(ps_shard_state& st, ec code, const std::string& why) {
  abandon(st.pending_norm, st, code, "norm", why);
  abandon(st.pending, st, code, "apply", why);
}

caf::error check_apply(const ps_shard_state& st, int64_t step, int64_t n,
                       const char* what) {
  auto bad = [&](const std::string& text) {
    return make_error(ec::invalid_argument,
                      shard_name(st.index) + ": " + what + " " + text);
  };
  if (n <= 0)
    return bad("needs a positive number of gradients, got "
               + std::to_string(n));
  if (st.pending)
    return bad("for step " + std::to_string(step)
               + " while the apply for step "
               + std::to_string(st.pending->step)
               + " is still pending (one at a time)");
  if (st.pending_norm)
    return bad("for step " + std::to_string(step)
               + " while the norm for step "
               + std::to_string(st.pending_norm->step)
               + " is still pending (one at a time)");
  // The chief and the shard disagree on the step: applying would move
  // the shard to a step the chief does not expect.
  if (step != st.counters.global_step)
    return bad("for step " + std::to_string(step) + ", but the shard is at "
               "step " + std::to_string(st.counters.global_step));
  return caf::none;
}

/// Checks a whole inverse set against the shard's layers, then installs
/// it: one bad layer refuses the set, so a shard never mixes halves.
caf::error install_inverses(ps_shard_state& st, const inverse_set& set) {
  std::vector<size_t> targets;
  for (const auto& inv : set.layers) {
    auto i = st.kfac_layer(inv.layer);
    if (!i)
      return make_error(ec::unknown_name,
                        shard_name(st.index) + ": inverse for layer "
                          + in_quotes(inv.layer)
                          + ", which this shard does not hold");
    const auto& layer = st.kfac[*i].info;
    if (auto err = check_inverse(inv, layer.a_dim, layer.g_dim))
      return prefixed(shard_name(st.index), err);
    targets.push_back(*i);
  }
  for (size_t k = 0; k < targets.size(); ++k)
    st.kfac[targets[k]].inverse = set.layers[k];
  ++st.counters.inverse_sets;
  return caf::none;
}

} // namespace ps_shard_parts

} // namespace syncfac
