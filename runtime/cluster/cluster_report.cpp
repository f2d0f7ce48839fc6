#include "runtime/cluster/cluster_report.hpp"

namespace syncfac {

void cluster_report::counters(const std::string& role, json_object counters) {
  roles.emplace_back(role, std::move(counters));
}

void cluster_report::unreachable(const std::string& role,
                                 const std::string& why) {
  json_object entry;
  entry.add("unreachable", why);
  roles.emplace_back(role, std::move(entry));
}

json_object cluster_report::to_json() const {
  json_object by_role;
  for (const auto& [role, entry] : roles)
    by_role.add(role, entry);
  json_object out;
  out.add("tasks", tasks).add("tls", tls).add("roles", by_role);
  if (metrics)
    out.add("metrics", *metrics);
  return out;
}

} // namespace syncfac
