// A gradient push on the PS shard: checked whole, then accumulated.

#include "actors/ps_shard_parts.hpp"

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace syncfac {

namespace ps_shard_parts {

namespace {

constexpr size_t no_variable = std::numeric_limits<size_t>::max();

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
  ++st.counters.refused_pushes;
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
                        + std::to_string(st.counters.global_step));
  return caf::none;
}

/// Adds a push that `checked` passed to the accumulators, checking
/// nothing again; whether it was fresh.
caf::expected<bool> accumulate(ps_shard_state& st, const gradient_push& p,
                               const push_check& checked) {
  const bool fresh = p.local_step >= st.counters.global_step;
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

} // namespace

caf::expected<bool> take_push(ps_shard_state& st, const gradient_push& push) {
  push_check checked{st, push};
  if (auto bad = checked.run())
    return refuse(st, std::move(*bad));
  return accumulate(st, push, checked);
}

} // namespace ps_shard_parts

} // namespace syncfac
