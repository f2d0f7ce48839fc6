#include "actors/role_metrics.hpp"

#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "messages/atoms.hpp"

namespace syncfac {

namespace {

using observe::metric_family;
using observe::metric_type;
using label_list = std::vector<std::pair<std::string, std::string>>;

/// Asks `role` (a Handle) for its Status and adds its families to `out`;
/// false when it does not answer within `timeout`.
template <class Handle, class Status>
bool ask(caf::scoped_actor& self, const caf::actor& role,
         std::chrono::milliseconds timeout, const std::string& name,
         const label_list& labels, std::vector<metric_family>& out) {
  bool answered = false;
  self->request(caf::actor_cast<Handle>(role), timeout, status_atom::value)
    .receive(
      [&](Status& st) {
        for (auto& fam : role_families(st, name, labels))
          out.push_back(std::move(fam));
        answered = true;
      },
      [&](caf::error&) {});
  return answered;
}

} // namespace

observe::metric_collector
role_metrics(caf::actor_system& sys, std::shared_ptr<role_directory> roles,
             std::chrono::milliseconds timeout) {
  auto* sysp = &sys;
  return [sysp, roles, timeout](const label_list& labels) {
    std::vector<metric_family> out;
    int64_t silent = 0;
    caf::scoped_actor self{*sysp};
    for (const auto& kvp : roles->snapshot()) {
      const auto& name = kvp.first;
      auto kind = name.substr(0, name.find(':'));
      if (kind != "ps" && kind != "worker" && kind != "chief"
          && kind != "covariance" && kind != "inverse")
        continue;
      bool answered = false;
      if (kind == "ps")
        answered = ask<ps_actor, shard_status>(self, kvp.second, timeout,
                                               name, labels, out);
      else if (kind == "worker")
        answered = ask<worker_actor, worker_status>(self, kvp.second, timeout,
                                                    name, labels, out);
      else if (kind == "chief")
        answered = ask<chief_actor, chief_status>(self, kvp.second, timeout,
                                                  name, labels, out);
      else if (kind == "covariance")
        answered = ask<covariance_actor, covariance_status>(
          self, kvp.second, timeout, name, labels, out);
      else
        answered = ask<inverse_actor, inverse_status>(
          self, kvp.second, timeout, name, labels, out);
      if (!answered)
        ++silent;
    }
    out.push_back({"syncfac_role_status_timeouts",
                   "Hosted roles that did not answer this scrape in time.",
                   metric_type::gauge,
                   {{labels, static_cast<double>(silent)}}});
    return out;
  };
}

} // namespace syncfac
