#include "actors/cluster_end.hpp"

#include <caf/send.hpp>

#include "actors/gather.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// Whether `name` ("worker:1") is a task of `cluster` that trains (an
/// evaluator, listed or not, only reads the shards).
bool trains(const cluster_spec& cluster, const std::string& name) {
  for (const auto& t : cluster.tasks())
    if (t.str() == name)
      return t.job != "evaluator";
  return false;
}

} // namespace

cluster_end::cluster_end(caf::scoped_actor& self, std::string me,
                         std::chrono::milliseconds request_timeout,
                         std::ostream& log)
  : self_(self),
    me_(std::move(me)),
    request_timeout_(request_timeout),
    log_(log) {
}

cluster_report cluster_end::collect(const std::vector<ps_actor>& shards,
                                    const run_roles& roles,
                                    const metrics_actor& metrics,
                                    std::chrono::milliseconds timeout) {
  cluster_report report;
  // Per role, in order: its counters or why it could not be reached.
  auto ask = [&](const auto& handles, const std::string& job, auto status,
                 auto fill) {
    using status_type = decltype(status);
    std::vector<json_object> entries(handles.size());
    ask_each<status_type>(
      self_, handles, timeout,
      [&](size_t i, const status_type& st) { fill(entries[i], st); },
      [&](size_t i, const caf::error& err) {
        entries[i].add("unreachable", render(err));
      },
      status_atom::value);
    for (size_t i = 0; i < handles.size(); ++i) {
      auto role = task_id{job, static_cast<int32_t>(i)}.str();
      if (!handles[i])
        report.unreachable(role, gone_at_the_end());
      else
        report.counters(role, entries[i]);
    }
  };
  ask(shards, "ps", shard_status{},
      [](json_object& t, const shard_status& st) {
        t.add("errors", st.refused_pushes + st.refused_inverses)
          .add("stale_pushes", st.stale_pushes);
      });
  auto workers = roles.workers;
  workers.insert(workers.end(), roles.stats_workers.begin(),
                 roles.stats_workers.end());
  ask(workers, "worker", worker_status{},
      [](json_object& t, const worker_status& st) {
        t.add("errors", st.stats_failed)
          .add("stale_pushes", st.stale_pushes)
          .add("steps", st.steps);
      });
  ask(roles.covariance, "covariance", covariance_status{},
      [](json_object& t, const covariance_status& st) {
        t.add("errors", st.refused).add("stale", st.stale);
      });
  ask(roles.inverses, "inverse", inverse_status{},
      [](json_object& t, const inverse_status& st) {
        t.add("errors", st.failed).add("inversions", st.inversions);
      });
  if (!metrics)
    return report;
  // What other roles reported to the metrics sink: the last record of
  // each source and how many it sent.
  json_object sources;
  self_->request(metrics, timeout, status_atom::value)
    .receive(
      [&](std::vector<metrics_record>& recs) {
        for (auto& r : recs) {
          json_object t;
          t.add("last_step", r.step);
          for (const auto& kvp : r.fields)
            if (kvp.first == "reports")
              t.add(kvp.first, static_cast<int64_t>(kvp.second));
            else
              t.add(kvp.first, kvp.second);
          sources.add(r.source, t);
        }
      },
      [&](caf::error& err) { sources.add("unreachable", render(err)); });
  report.metrics = std::move(sources);
  return report;
}

void cluster_end::tell_callers(const node_actor& node,
                               const cluster_spec& cluster,
                               const std::string& reason) {
  // Not by the nodes connected to: the node actor knows every node that
  // said hello, the evaluator's too.
  std::map<std::string, caf::actor> callers;
  self_->request(node, request_timeout_, hello_atom::value)
    .receive(
      [&](std::vector<std::string>& names, std::vector<caf::actor>& nodes) {
        for (size_t i = 0; i < names.size() && i < nodes.size(); ++i)
          if (names[i] != me_ && !trains(cluster, names[i]))
            callers[names[i]] = nodes[i];
      },
      [&](caf::error& err) {
        log_ << me_ << ": cannot list the nodes that joined: " << render(err)
             << std::endl;
      });
  tell(callers, reason);
}

void cluster_end::tell_nodes(const std::map<std::string, node_info>& nodes,
                             const std::map<std::string, caf::actor>& hellos,
                             const std::string& reason) {
  std::map<std::string, caf::actor> peers;
  for (auto& kvp : nodes)
    if (kvp.second.job != "chief")
      if (auto n = node_of(kvp.second))
        peers[kvp.first] = n;
  for (auto& kvp : hellos)
    if (peers.count(kvp.first) > 0)
      peers[kvp.first] = kvp.second;
  tell(peers, reason);
}

void cluster_end::tell(const std::map<std::string, caf::actor>& peers,
                       const std::string& reason) {
  std::map<caf::actor_addr, std::string> waiting;
  for (const auto& [name, n] : peers) {
    auto peer = caf::actor_cast<node_actor>(n);
    self_->monitor(peer);
    waiting.emplace(peer.address(), name);
    self_->send(peer, shutdown_atom::value, reason);
  }
  // One receive per answer, each bounded by what is left of the wait.
  auto deadline = clock_type::now() + request_timeout_;
  bool timed_out = false;
  while (!waiting.empty() && !timed_out) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock_type::now());
    if (left.count() <= 0)
      break;
    self_->receive(
      [&](caf::ok_atom) {
        // A node's owner may answer for it: then its going down counts.
        if (auto sender = self_->current_sender())
          waiting.erase(caf::actor_cast<caf::actor_addr>(sender));
      },
      [&](caf::down_msg& dm) { waiting.erase(dm.source); },
      [&](caf::error&) {},
      caf::after(left) >> [&] { timed_out = true; });
  }
  for (const auto& kvp : waiting)
    log_ << me_ << ": " << kvp.second
         << " neither confirmed the end of the run nor went down within "
         << request_timeout_.count() << " ms" << std::endl;
}

} // namespace syncfac
