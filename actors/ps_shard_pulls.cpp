// The PS shard's answers to workers' pulls: whole variables or rows, at
// once or once the step they wait for comes.

#include "actors/ps_shard_parts.hpp"

#include <string>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace syncfac {

namespace ps_shard_parts {

/// The shard's variables at its step; counted as sent.
shard_params current_values(ps_shard_state& st) {
  st.counters.sent.add(value_count(st.variables)
              * static_cast<int64_t>(sizeof(float)));
  return {st.index, st.counters.global_step, st.variables};
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
  shard_params result{st.index, st.counters.global_step, {}};
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
  st.counters.sent.add(bytes);
  return result;
}

/// The answer to a waiting row pull its worker cancelled: its token is
/// for the step the worker's values are at, which is the shard's step
/// (the pull waits for the next), and those values are what the worker
/// holds but for the rows its next batch looks up, whose copies may be
/// older. So the rows at the shard's step go, and no other variable
/// (docs/protocol.md, "Row pulls").
void answer_with_rows(ps_shard_state& st, waiting_pull& p) {
  shard_params result{st.index, st.counters.global_step, {}};
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
  st.counters.sent.add(bytes);
  p.promise.deliver(std::move(result));
}

/// An answer without values to a waiting pull that will not get them.
void answer_without_values(ps_shard_state& st, waiting_pull& p) {
  st.counters.sent.add();
  ++st.counters.pulls_without_values;
  p.promise.deliver(shard_params{st.index, st.counters.global_step, {}, false});
}

/// Answers the pulls that wait for the shard's step (or an earlier one).
void release_due_pulls(ps_shard_state& st) {
  if (st.waiting_pulls.empty())
    return;
  for (auto& p : st.waiting_pulls.take_due(st.counters.global_step))
    deliver(p.promise, current_values(st, p.rows));
}

} // namespace ps_shard_parts

} // namespace syncfac
