// What the PS shard reports of itself (shard_status).

#include "actors/ps_shard_parts.hpp"

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

namespace syncfac {

namespace ps_shard_parts {

namespace {

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

} // namespace

shard_status make_status(const ps_shard_state& st) {
  auto result = st.counters;
  result.shard = st.index;
  result.kfac_layers = static_cast<int64_t>(st.kfac.size());
  result.kfac_ready = std::count_if(st.kfac.begin(), st.kfac.end(),
                                    [](const shard_kfac_layer& l) {
                                      return l.inverse.has_value();
                                    });
  if (st.opt->config().kind == optimizer_kind::kfac)
    result.first_order_variables = first_order_variables(st);
  result.variables.reserve(st.accumulators.size());
  for (size_t i = 0; i < st.accumulators.size(); ++i) {
    auto stats = std::visit([](const auto& x) { return x.stats(); },
                            st.accumulators[i]);
    stats.refused += st.refused[i];
    result.variables.push_back(std::move(stats));
  }
  return result;
}

} // namespace ps_shard_parts

} // namespace syncfac
