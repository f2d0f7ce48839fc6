#include "actors/ps_shard.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_set>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/make_message.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/role_snapshots.hpp"
#include "actors/spawn_validated.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {

namespace {

using self_ptr = ps_actor::stateful_pointer<ps_shard_state>;

constexpr size_t no_variable = std::numeric_limits<size_t>::max();

std::string shard_name(int32_t index) {
  return "ps shard " + std::to_string(index);
}

/// `err` with "prefix: " in front of its context, same code and category:
/// an optimizer error reaching a chief should say which shard raised it.
caf::error prefixed(const std::string& prefix, const caf::error& err) {
  const auto& ctx = err.context();
  auto what = ctx.size() == 1 && ctx.match_element<std::string>(0)
                ? ctx.get_as<std::string>(0)
                : render(err);
  return caf::error{err.code(), err.category(),
                    caf::make_message(prefix + ": " + what)};
}

// -- configuration ------------------------------------------------------------

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

// -- push validation ----------------------------------------------------------

/// Why a push was refused, and the variable to count it on (if any).
struct refusal {
  caf::error err;
  size_t variable = no_variable;
};

/// Checks one push as a whole before any accumulator sees it, so a bad
/// entry late in the push cannot leave earlier ones half-applied. What is
/// wrong with a gradient the accumulator's own check() says; this adds
/// what only a whole push can get wrong (an unknown variable, one twice,
/// dense for sparse or the other way round).
class push_check {
public:
  push_check(const ps_shard_state& st, const gradient_push& push)
    : st_(st), push_(push), seen_(st.variables.size(), false),
      pieces_(pieces_by_variable(push)) {
  }

  std::optional<refusal> run() {
    for (const auto& entry : push_.dense)
      if (auto bad = dense(entry))
        return bad;
    for (const auto& entry : push_.sparse)
      if (auto bad = sparse(entry))
        return bad;
    for (auto& [name, pieces] : pieces_)
      if (auto bad = sliced(name, pieces))
        return bad;
    return std::nullopt;
  }

  /// The sliced variables' pieces, as run() checked them.
  const std::map<std::string, std::vector<gradient_piece>>& pieces() const {
    return pieces_;
  }

private:
  std::optional<refusal> dense(const named_tensor& entry) {
    return dense_gradient(entry.name, entry.value);
  }

  /// A variable that came in slices (a push in parts).
  std::optional<refusal> sliced(const std::string& name,
                                std::vector<gradient_piece>& pieces) {
    return dense_gradient(name, pieces);
  }

  /// A dense variable's gradient, whole (a tensor) or in pieces: what its
  /// accumulator's check() finds wrong with it.
  template <class Gradient>
  std::optional<refusal> dense_gradient(const std::string& name,
                                        Gradient& gradient) {
    size_t i = 0;
    if (auto bad = claim(name, i))
      return bad;
    auto acc = std::get_if<conditional_accumulator>(&st_.accumulators[i]);
    if (acc == nullptr)
      return fail(ec::bad_message, i,
                  "is sparse: its gradient must come as rows, not dense");
    return failed(i, acc->check(gradient));
  }

  std::optional<refusal> sparse(const sparse_update& entry) {
    size_t i = 0;
    if (auto bad = claim(entry.variable, i))
      return bad;
    auto acc = std::get_if<sparse_accumulator>(&st_.accumulators[i]);
    if (acc == nullptr)
      return fail(ec::bad_message, i,
                  "is dense: its gradient must come dense, not as rows");
    return failed(i, acc->check(entry.indices, entry.rows));
  }

  /// Marks the variable as seen and sets `index`; a refusal when the name
  /// is unknown or the push carries it twice.
  std::optional<refusal> claim(const std::string& name, size_t& index) {
    auto found = st_.by_name.find(name);
    if (found == st_.by_name.end())
      return refusal{make_error(ec::unknown_name,
                                prefix() + "unknown variable " + in_quotes(name)
                                  + " (not held by " + shard_name(st_.index)
                                  + ")")};
    index = found->second;
    if (seen_[index])
      return fail(ec::bad_message, index, "appears twice in the push");
    seen_[index] = true;
    return std::nullopt;
  }

  /// The refusal for what an accumulator's check() found, if anything.
  std::optional<refusal>
  failed(size_t i, const std::optional<gradient_problem>& problem) const {
    if (!problem)
      return std::nullopt;
    return fail(problem->code, i, problem->what);
  }

  refusal fail(ec code, size_t i, const std::string& what) const {
    return {make_error(code, prefix() + "variable "
                               + in_quotes(st_.variables[i].name) + " "
                               + what),
            i};
  }

  std::string prefix() const {
    return shard_name(st_.index) + ": push from worker "
           + std::to_string(push_.worker) + " (local_step "
           + std::to_string(push_.local_step) + "): ";
  }

  const ps_shard_state& st_;
  const gradient_push& push_;
  std::vector<bool> seen_;
  std::map<std::string, std::vector<gradient_piece>> pieces_;
};

caf::error refuse(ps_shard_state& st, refusal bad) {
  ++st.refused_pushes;
  if (bad.variable != no_variable)
    ++st.refused[bad.variable];
  return std::move(bad.err);
}

// -- accumulation -------------------------------------------------------------

/// An accumulator's verdict must be the shard's: they share one step.
caf::error check_lockstep(const ps_shard_state& st, bool admitted, bool fresh,
                          const std::string& variable) {
  if (admitted != fresh)
    return make_error(ec::internal,
                      shard_name(st.index) + ": accumulator of "
                        + in_quotes(variable) + " left the shard's step "
                        + std::to_string(st.global_step));
  return caf::none;
}

/// Adds a push that `checked` passed to the accumulators, checking
/// nothing again; whether it was fresh.
caf::expected<bool> accumulate(ps_shard_state& st, const gradient_push& p,
                               const push_check& checked) {
  const bool fresh = p.local_step >= st.global_step;
  for (const auto& entry : p.dense) {
    auto& acc = std::get<conditional_accumulator>(
      st.accumulators[st.by_name.at(entry.name)]);
    if (auto err = check_lockstep(
          st, acc.apply_checked(p.local_step, entry.value), fresh,
          entry.name))
      return err;
  }
  for (const auto& [name, pieces] : checked.pieces()) {
    auto& acc = std::get<conditional_accumulator>(
      st.accumulators[st.by_name.at(name)]);
    if (auto err = check_lockstep(st, acc.apply_checked(p.local_step, pieces),
                                  fresh, name))
      return err;
  }
  for (const auto& entry : p.sparse) {
    auto& acc = std::get<sparse_accumulator>(
      st.accumulators[st.by_name.at(entry.variable)]);
    if (auto err = check_lockstep(
          st, acc.apply_checked(p.local_step, entry.indices, entry.rows),
          fresh, entry.variable))
      return err;
  }
  return fresh;
}

// -- applying -----------------------------------------------------------------

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
  st.opt->set_global_step(st.global_step);
  auto info = kfac_apply(*st.opt, st.variables, averages, slots, left_out);
  if (!info)
    return info.error();
  for (auto& [i, average] : rows)
    if (auto err = st.opt->update_rows(i, st.variables[i].value,
                                       average.indices, average.rows))
      return err;
  st.preconditioned_applies += info->preconditioned > 0 ? 1 : 0;
  st.last_clip = info->scale;
  return caf::none;
}

/// `result` with the shard's counts so far.
applied with_counts(const ps_shard_state& st, applied result) {
  result.refused_pushes = st.refused_pushes;
  result.preconditioned_applies = st.preconditioned_applies;
  result.inverse_sets = st.inverse_sets;
  return result;
}

/// One optimizer step from the averages; every accumulator is ready(n).
/// Variable by variable, so at most one average exists at a time.
caf::expected<applied> complete(ps_shard_state& st, int64_t n, float scale) {
  applied result{st.index, st.global_step + 1, fewest_gradients(st)};
  st.round_pushes = 0;
  st.opt->set_gradient_scale(scale);
  if (st.opt->config().kind == optimizer_kind::kfac) {
    if (auto err = complete_kfac(st, n))
      return make_error(ec::internal, shard_name(st.index)
                                        + ": K-FAC apply failed after the "
                                          "checks: "
                                        + render(err));
    st.global_step = result.global_step;
    return with_counts(st, result);
  }
  st.opt->set_global_step(st.global_step);
  st.opt->begin_step();
  for (size_t i = 0; i < st.variables.size(); ++i)
    if (auto err = update_variable(st, i, n))
      return make_error(ec::internal, shard_name(st.index)
                                        + ": apply failed after the checks: "
                                        + render(err));
  st.global_step = result.global_step;
  return with_counts(st, result);
}

void release_due_pulls(ps_shard_state& st);

/// The sum of the squares of the averages an apply of n takes now (every
/// accumulator ready(n)): a variable without gradients this round adds
/// nothing, as it takes none (or, under K-FAC, a zero one).
caf::expected<norm_part> norm_of_round(const ps_shard_state& st, int64_t n) {
  norm_part result{st.index, st.global_step, 0.0};
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

/// Answers the pending norm request once every gradient it waits for is
/// in.
void finish_pending_norm(ps_shard_state& st) {
  if (!st.pending_norm || !all_ready(st, st.pending_norm->n))
    return;
  auto pending = std::move(*st.pending_norm);
  st.pending_norm.reset();
  st.sent.add();
  auto result = norm_of_round(st, pending.n);
  if (result)
    pending.promise.deliver(std::move(*result));
  else
    pending.promise.deliver(std::move(result.error()));
}

/// Answers the pending apply once the last gradient it waits for is in.
void finish_pending(ps_shard_state& st) {
  finish_pending_norm(st);
  if (!st.pending || !all_ready(st, st.pending->n))
    return;
  auto pending = std::move(*st.pending);
  st.pending.reset();
  auto result = complete(st, pending.n, pending.scale);
  st.sent.add();
  if (result)
    pending.promise.deliver(std::move(*result));
  else
    pending.promise.deliver(std::move(result.error()));
  release_due_pulls(st);
}

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

/// Fails the pending apply and norm, if any, saying why they will never
/// complete.
void abandon_pending(ps_shard_state& st, ec code, const std::string& why) {
  abandon(st.pending_norm, st, code, "norm", why);
  abandon(st.pending, st, code, "apply", why);
}

caf::error check_apply(const ps_shard_state& st, int64_t step, int64_t n,
                       const char* what = "apply") {
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
  if (step != st.global_step)
    return bad("for step " + std::to_string(step) + ", but the shard is at "
               "step " + std::to_string(st.global_step));
  return caf::none;
}

/// Checks a whole inverse set against the shard's layers, then installs
/// it: one bad layer refuses the set, so a shard never mixes halves.
caf::error install_inverses(ps_shard_state& st, const inverse_set& set) {
  std::vector<size_t> targets;
  for (const auto& inv : set.layers) {
    auto i = std::find_if(st.kfac.begin(), st.kfac.end(),
                          [&](const shard_kfac_layer& l) {
                            return l.info.name == inv.layer;
                          });
    if (i == st.kfac.end())
      return make_error(ec::unknown_name,
                        shard_name(st.index) + ": inverse for layer "
                          + in_quotes(inv.layer)
                          + ", which this shard does not hold");
    if (auto err = check_inverse(inv, i->info.a_dim, i->info.g_dim))
      return prefixed(shard_name(st.index), err);
    targets.push_back(static_cast<size_t>(i - st.kfac.begin()));
  }
  for (size_t k = 0; k < targets.size(); ++k)
    st.kfac[targets[k]].inverse = set.layers[k];
  ++st.inverse_sets;
  return caf::none;
}

// -- waiting pulls ------------------------------------------------------------

/// The shard's variables at its step; counted as sent.
shard_params current_values(ps_shard_state& st) {
  st.sent.add(value_count(st.variables)
              * static_cast<int64_t>(sizeof(float)));
  return {st.index, st.global_step, st.variables};
}

/// ec::invalid_argument (ec::unknown_name for a variable the shard lacks)
/// unless every request names a sparse variable of the shard, once, and
/// rows of it: the error names the variable, and for a bad id the id and
/// the table's rows.
caf::error check_row_requests(const ps_shard_state& st,
                              const std::vector<row_request>& requests) {
  const auto who = shard_name(st.index) + ": row pull: ";
  std::unordered_set<std::string> named;
  for (const auto& req : requests) {
    auto i = st.by_name.find(req.variable);
    if (i == st.by_name.end())
      return make_error(ec::unknown_name,
                        who + "variable " + in_quotes(req.variable)
                          + ", which this shard does not hold");
    if (!std::holds_alternative<sparse_accumulator>(st.accumulators[i->second]))
      return make_error(ec::invalid_argument,
                        who + "variable " + in_quotes(req.variable)
                          + " is dense: it is pulled whole, not by rows");
    if (!named.insert(req.variable).second)
      return make_error(ec::invalid_argument,
                        who + "variable " + in_quotes(req.variable)
                          + " is asked for twice");
    const auto& table = st.variables[i->second].value;
    if (auto err = check_row_ids(req.variable, req.rows, table.dim(0)))
      return prefixed(shard_name(st.index) + ": row pull", err);
  }
  return caf::none;
}

/// The shard's variables at its step for checked row requests: each
/// variable a request names as those rows, every other one whole; counted
/// as sent.
caf::expected<shard_params>
current_values(ps_shard_state& st, const std::vector<row_request>& requests) {
  if (requests.empty())
    return current_values(st);
  shard_params result{st.index, st.global_step, {}};
  int64_t bytes = 0;
  std::vector<bool> by_rows(st.variables.size(), false);
  for (const auto& req : requests) {
    auto i = st.by_name.at(req.variable);
    by_rows[i] = true;
    auto rows = gather_rows(st.variables[i], req.rows);
    if (!rows)
      return prefixed(shard_name(st.index) + ": row pull", rows.error());
    bytes += payload_bytes(*rows);
    result.rows.push_back(std::move(*rows));
  }
  for (size_t i = 0; i < st.variables.size(); ++i)
    if (!by_rows[i]) {
      result.values.push_back(st.variables[i]);
      bytes += st.variables[i].value.size()
               * static_cast<int64_t>(sizeof(float));
    }
  st.sent.add(bytes);
  return result;
}

/// The answer to a waiting row pull its worker cancelled: its token is
/// for the step the worker's values are at, which is the shard's step
/// (the pull waits for the next), and those values are what the worker
/// holds but for the rows its next batch looks up, whose copies may be
/// older. So the rows at the shard's step go, and no other variable
/// (docs/protocol.md, "Row pulls").
void answer_with_rows(ps_shard_state& st, waiting_pull& p) {
  shard_params result{st.index, st.global_step, {}};
  int64_t bytes = 0;
  for (const auto& req : p.rows) {
    auto rows = gather_rows(st.variables[st.by_name.at(req.variable)],
                            req.rows);
    if (!rows) {
      p.promise.deliver(prefixed(shard_name(st.index) + ": row pull",
                                 rows.error()));
      return;
    }
    bytes += payload_bytes(*rows);
    result.rows.push_back(std::move(*rows));
  }
  st.sent.add(bytes);
  p.promise.deliver(std::move(result));
}

/// An answer without values to a waiting pull that will not get them.
void answer_without_values(ps_shard_state& st, waiting_pull& p) {
  st.sent.add();
  ++st.pulls_without_values;
  p.promise.deliver(shard_params{st.index, st.global_step, {}, false});
}

/// Answers the pulls that wait for the shard's step (or an earlier one).
void release_due_pulls(ps_shard_state& st) {
  if (st.waiting_pulls.empty())
    return;
  for (auto& p : st.waiting_pulls.take_due(st.global_step)) {
    auto values = current_values(st, p.rows);
    if (values)
      p.promise.deliver(std::move(*values));
    else
      p.promise.deliver(std::move(values.error()));
  }
}

/// Sets the timer for the earliest waiting pull's deadline, unless one is
/// set already (it sets the next when it fires).
void schedule_expiry(self_ptr self) {
  auto& st = self->state;
  auto next = st.waiting_pulls.next_deadline();
  if (st.expiry_set || !next)
    return;
  st.expiry_set = true;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    *next - pull_waitlist::clock_type::now());
  self->delayed_send(self, std::max(left, std::chrono::milliseconds{1}),
                     expire_atom::value);
}

/// Under K-FAC, the shard's variables that no K-FAC layer holds (its
/// sparse tables among them): they take the first-order update.
std::vector<std::string> first_order_variables(const ps_shard_state& st) {
  std::vector<bool> held(st.variables.size(), false);
  for (const auto& l : st.kfac)
    held[l.weight] = held[l.bias] = true;
  std::vector<std::string> result;
  for (size_t i = 0; i < st.variables.size(); ++i)
    if (!held[i])
      result.push_back(st.variables[i].name);
  return result;
}

shard_status make_status(const ps_shard_state& st) {
  shard_status result{st.index,       st.global_step, st.accepted_pushes,
                      st.stale_pushes, st.refused_pushes, {}};
  result.kfac_layers = static_cast<int64_t>(st.kfac.size());
  result.kfac_ready = std::count_if(st.kfac.begin(), st.kfac.end(),
                                    [](const shard_kfac_layer& l) {
                                      return l.inverse.has_value();
                                    });
  result.inverse_sets = st.inverse_sets;
  result.refused_inverses = st.refused_inverses;
  result.preconditioned_applies = st.preconditioned_applies;
  result.last_clip = st.last_clip;
  if (st.opt->config().kind == optimizer_kind::kfac)
    result.first_order_variables = first_order_variables(st);
  result.sent = st.sent;
  result.pulls_waited = st.pulls_waited;
  result.pulls_without_values = st.pulls_without_values;
  result.variables.reserve(st.accumulators.size());
  for (size_t i = 0; i < st.accumulators.size(); ++i) {
    auto stats = std::visit([](const auto& x) { return x.stats(); },
                            st.accumulators[i]);
    stats.refused += st.refused[i];
    result.variables.push_back(std::move(stats));
  }
  return result;
}

} // namespace

// -- config and state ---------------------------------------------------------

caf::error ps_shard_config::validate() const {
  if (index < 0)
    return bad_config(shard_name(index), "index must be >= 0");
  if (auto err = check_variables(*this))
    return err;
  if (auto err = check_sparse_names(*this))
    return err;
  if (auto err = optimizer.validate())
    return prefixed(shard_name(index), err);
  if (auto err = check_kfac_layers(*this))
    return err;
  if (auto err = check_unaveraged_names(*this))
    return err;
  return caf::none;
}

ps_shard_state::~ps_shard_state() {
  abandon_pending(*this, ec::peer_down, "the shard stopped");
  for (auto& p : waiting_pulls.take_all())
    p.promise.deliver(make_error(ec::peer_down,
                                 shard_name(index) + ": stopped while a pull "
                                   "waited for step "
                                   + std::to_string(p.step)));
}

// -- behaviour ----------------------------------------------------------------

namespace {

/// The chief's apply of step `step` over n gradients, every average times
/// `scale`: at once when every gradient is in, else once the last comes.
caf::result<applied> begin_apply(self_ptr self,
                                 int64_t step, int64_t n, float scale) {
  auto& st = self->state;
  if (auto err = check_apply(st, step, n)) {
    st.sent.add();
    return err;
  }
  if (all_ready(st, n)) {
    st.sent.add();
    auto result = complete(st, n, scale);
    release_due_pulls(st);
    return result;
  }
  st.pending = pending_apply{self->make_response_promise<applied>(), n, step,
                             scale};
  return st.pending->promise;
}

/// A pull for `step` (checked row requests, or none: every variable
/// whole): answered at once when the shard is there, else held until it
/// is or `wait_ms` ran out.
caf::result<shard_params> pull_at(self_ptr self, int64_t step,
                                  int64_t wait_ms,
                                  std::vector<row_request> rows) {
  auto& st = self->state;
  if (wait_ms < 0)
    return make_error(ec::invalid_argument,
                      shard_name(st.index)
                        + ": a pull's wait must be >= 0 ms, got "
                        + std::to_string(wait_ms));
  if (st.global_step >= step) {
    auto values = current_values(st, rows);
    if (!values)
      return std::move(values.error());
    return std::move(*values);
  }
  ++st.pulls_waited;
  // Before the promise: making it takes the sender out of the message.
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto rp = self->make_response_promise<shard_params>();
  st.waiting_pulls.add(waiting_pull{
    rp, step, std::move(sender),
    pull_waitlist::clock_type::now() + std::chrono::milliseconds{wait_ms},
    std::move(rows)});
  schedule_expiry(self);
  return rp;
}

ps_actor::behavior_type ps_shard(self_ptr self, ps_shard_config cfg) {
  end_program_on_exception(self, "PS shard");
  if (auto err = init_state(self->state, std::move(cfg))) {
    // Only reachable when spawned around spawn_ps_shard, which validates.
    self->quit(std::move(err));
    return ps_actor::behavior_type::make_empty_behavior();
  }
  return {
    [=](push_atom, gradient_push& part) -> caf::result<push_ack> {
      auto& st = self->state;
      auto whole = st.assembler->add(std::move(part));
      if (!whole) {
        ++st.refused_pushes;
        return prefixed(shard_name(st.index), whole.error());
      }
      // A part taken, the rest of the push still to come.
      st.sent.add(); // the answer, whichever of the ones below
      if (!*whole)
        return push_ack{true, st.global_step};
      const auto& push = **whole;
      push_check checked{st, push};
      if (auto bad = checked.run())
        return refuse(st, std::move(*bad));
      // The step the push was judged against, even when it completes a
      // pending apply below and moves the shard on.
      auto step = st.global_step;
      auto fresh = accumulate(st, push, checked);
      if (!fresh)
        return std::move(fresh.error());
      if (*fresh) {
        ++st.accepted_pushes;
        ++st.round_pushes;
        finish_pending(st);
      } else {
        ++st.stale_pushes;
      }
      return push_ack{*fresh, step};
    },
    [=](pull_atom) -> shard_params { return current_values(self->state); },
    [=](pull_atom, int64_t step,
        int64_t wait_ms) -> caf::result<shard_params> {
      return pull_at(self, step, wait_ms, {});
    },
    [=](pull_atom, int64_t step, int64_t wait_ms,
        std::vector<row_request>& rows) -> caf::result<shard_params> {
      if (auto err = check_row_requests(self->state, rows))
        return err;
      return pull_at(self, step, wait_ms, std::move(rows));
    },
    [=](pull_atom, cancel_atom) {
      auto& st = self->state;
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      for (auto& p : st.waiting_pulls.take_from(sender))
        if (p.rows.empty())
          answer_without_values(st, p);
        else
          answer_with_rows(st, p);
    },
    [=](expire_atom) {
      auto& st = self->state;
      st.expiry_set = false;
      for (auto& p :
           st.waiting_pulls.take_expired(pull_waitlist::clock_type::now()))
        answer_without_values(st, p);
      schedule_expiry(self);
    },
    [=](pull_atom, average_atom) -> shard_params {
      auto& st = self->state;
      st.sent.add(value_count(st.averages)
                  * static_cast<int64_t>(sizeof(float)));
      return {st.index, st.global_step, st.averages};
    },
    [=](average_atom, float decay) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      st.sent.add();
      if (!(decay >= 0.0f && decay < 1.0f))
        return make_error(ec::invalid_argument,
                          shard_name(st.index)
                            + ": moving-average decay must be in [0, 1), got "
                            + std::to_string(decay));
      for (size_t i = 0; i < st.variables.size(); ++i) {
        auto& shadow = st.averages[i].value;
        const auto& var = st.variables[i].value;
        if (!st.averaged[i]) {
          shadow = var;
          continue;
        }
        for (int64_t j = 0; j < var.size(); ++j)
          shadow[j] -= (1.0f - decay) * (shadow[j] - var[j]);
      }
      return caf::ok_atom::value;
    },
    [=](apply_atom, int64_t step, int64_t n) -> caf::result<applied> {
      return begin_apply(self, step, n, 1.0f);
    },
    [=](apply_atom, int64_t step, int64_t n,
        gradient_scale scale) -> caf::result<applied> {
      auto f = scale.factor;
      if (!(f > 0.0f && f <= 1.0f)) {
        self->state.sent.add();
        return make_error(ec::invalid_argument,
                          shard_name(self->state.index)
                            + ": apply: a clip factor must be in (0, 1], "
                              "got "
                            + std::to_string(f));
      }
      return begin_apply(self, step, n, f);
    },
    [=](norm_atom, int64_t step, int64_t n) -> caf::result<norm_part> {
      auto& st = self->state;
      if (auto err = check_apply(st, step, n, "norm")) {
        st.sent.add();
        return err;
      }
      if (all_ready(st, n)) {
        st.sent.add();
        return norm_of_round(st, n);
      }
      st.pending_norm = norm_request{
        self->make_response_promise<norm_part>(), n, step};
      return st.pending_norm->promise;
    },
    [=](set_step_atom, int64_t step) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (step < 0)
        return make_error(ec::invalid_argument,
                          shard_name(st.index)
                            + ": set_step needs a step >= 0, got "
                            + std::to_string(step));
      // The chief (re)started and re-synchronises: whoever asked for the
      // pending apply no longer waits for it.
      abandon_pending(st, ec::invalid_argument,
                      "the global step was set to " + std::to_string(step));
      for (auto& acc : st.accumulators)
        std::visit([step](auto& x) { x.set_global_step(step); }, acc);
      st.global_step = step;
      st.sent.add();
      release_due_pulls(st);
      return caf::ok_atom::value;
    },
    [=](inverse_atom, const inverse_set& set) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = install_inverses(st, set)) {
        ++st.refused_inverses;
        return err;
      }
      return caf::ok_atom::value;
    },
    [=](checkpoint_atom) -> shard_snapshot {
      return take_snapshot(self->state);
    },
    [=](restore_atom, shard_snapshot& snap) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      auto step = snap.global_step;
      if (auto err = restore_snapshot(st, std::move(snap)))
        return err;
      abandon_pending(st, ec::invalid_argument,
                      "the shard was restored to step " + std::to_string(step));
      release_due_pulls(st);
      return caf::ok_atom::value;
    },
    [=](status_atom) -> shard_status {
      return make_status(self->state);
    },
  };
}

} // namespace

caf::expected<ps_actor> spawn_ps_shard(caf::actor_system& sys,
                                       ps_shard_config cfg) {
  return spawn_validated(sys, ps_shard, std::move(cfg));
}

} // namespace syncfac
