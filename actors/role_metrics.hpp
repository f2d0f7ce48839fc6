#pragma once

// The roles a process hosts, as Prometheus metrics: at each scrape of
// --metrics_port every hosted role (PS shard, worker, chief, covariance,
// inverse) is asked for its status, bounded by a timeout, and every figure
// of its status table (actors/role_figures.hpp) becomes a sample labelled
// with the role ("ps:0"). A role that does not answer in time is left out
// of that scrape (and counted).

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/role_figures.hpp"
#include "runtime/observe/metrics_endpoint.hpp"

namespace syncfac {

/// The roles of a process by name ("ps:0", "worker:1", "chief"); roles
/// that come back replace their entry. Thread-safe: the node's thread
/// fills it, the metrics server's thread reads it.
class role_directory {
public:
  void set(const std::string& name, const caf::actor& role) {
    std::lock_guard<std::mutex> guard{mtx_};
    roles_[name] = role;
  }

  std::map<std::string, caf::actor> snapshot() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return roles_;
  }

private:
  mutable std::mutex mtx_;
  std::map<std::string, caf::actor> roles_;
};

/// One family per figure of `st`'s table, each with one sample labelled
/// `labels` and role=`role` (families of one name from several roles are
/// written as one: observe::exposition_text).
template <class Status>
std::vector<observe::metric_family>
role_families(const Status& st, const std::string& role,
              std::vector<std::pair<std::string, std::string>> labels) {
  labels.emplace_back("role", role);
  std::vector<observe::metric_family> out;
  figures(st, [&](summary_part, const observe::figure& fig, auto value) {
    out.push_back({fig.metric, fig.help, fig.type,
                   {{labels, static_cast<double>(value)}}});
  });
  return out;
}

/// A collector asking every role of `roles` for its status (each within
/// `timeout`). `sys` must outlive the collector's use.
observe::metric_collector
role_metrics(caf::actor_system& sys, std::shared_ptr<role_directory> roles,
             std::chrono::milliseconds timeout);

} // namespace syncfac
