#include "actors/role_totals.hpp"

#include <algorithm>

namespace syncfac {

namespace {

/// K-FAC's figures are one total over every role, kept under this kind.
const std::string kfac_kind = "kfac";

} // namespace

void role_totals::fold(const std::string& kind, summary_part part,
                       const observe::figure& fig, double value,
                       bool integral) {
  const auto& k = part == summary_part::kfac ? kfac_kind : kind;
  auto i = std::find_if(totals_.begin(), totals_.end(), [&](const total& t) {
    return t.kind == k && std::string{t.fig.key} == fig.key;
  });
  if (i == totals_.end())
    i = totals_.insert(totals_.end(), total{k, part, fig, integral, 0, 0});
  auto& t = *i;
  if (fig.fold == observe::figure_fold::max && t.actors > 0)
    t.value = std::max(t.value, value);
  else if (fig.fold == observe::figure_fold::max)
    t.value = value;
  else
    t.value += value;
  ++t.actors;
}

const role_totals::total* role_totals::find(const std::string& kind,
                                            const std::string& key) const {
  for (const auto& t : totals_)
    if (t.kind == kind && key == t.fig.key)
      return &t;
  return nullptr;
}

double role_totals::value(const std::string& kind,
                          const std::string& key) const {
  auto* t = find(kind, key);
  if (t == nullptr)
    return 0;
  if (t->fig.fold == observe::figure_fold::mean)
    return t->value / static_cast<double>(t->actors);
  return t->value;
}

int64_t role_totals::actors(const std::string& kind) const {
  auto i = actors_.find(kind);
  return i == actors_.end() ? 0 : i->second;
}

void role_totals::add_to(json_object& obj, const total& t) {
  if (t.fig.fold == observe::figure_fold::mean)
    obj.add(t.fig.key, t.value / static_cast<double>(t.actors));
  else if (t.integral)
    obj.add(t.fig.key, static_cast<int64_t>(t.value));
  else
    obj.add(t.fig.key, t.value);
}

json_object role_totals::roles_json() const {
  std::vector<std::string> kinds;
  for (const auto& t : totals_)
    if (t.part == summary_part::role
        && std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end())
      kinds.push_back(t.kind);
  json_object obj;
  for (const auto& kind : kinds) {
    json_object role;
    role.add("actors", actors(kind));
    for (const auto& t : totals_)
      if (t.kind == kind)
        add_to(role, t);
    obj.add(kind, role);
  }
  return obj;
}

json_object role_totals::kfac_json() const {
  json_object obj;
  for (const auto& t : totals_)
    if (t.part == summary_part::kfac)
      add_to(obj, t);
  return obj;
}

} // namespace syncfac
