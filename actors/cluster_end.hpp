#pragma once

// The end of a cluster's run on the chief's node, in one place: what the
// roles' counters were (into a cluster_report, runtime/cluster/
// cluster_report.hpp) and telling every node that the run is over. Each
// wait is one receive bounded by the request timeout, woken by the
// answers rather than polled.

#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/chief_supervisor.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/node.hpp"
#include "runtime/cluster/cluster_report.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

class cluster_end {
public:
  /// `me` names this node in log lines; `request_timeout` bounds each wait
  /// for the nodes' answers.
  cluster_end(caf::scoped_actor& self, std::string me,
              std::chrono::milliseconds request_timeout, std::ostream& log);

  /// Every role's counters (`shards` and `roles` as the run ended; an
  /// unset handle is a role that was not there) and what the roles
  /// reported to `metrics` (unset: no sink), each answer bounded by
  /// `timeout`.
  cluster_report collect(const std::vector<ps_actor>& shards,
                         const run_roles& roles, const metrics_actor& metrics,
                         std::chrono::milliseconds timeout);

  /// Tells the nodes that said hello to `node` but are no task of
  /// `cluster` that trains (an evaluator; the last hello of each counts)
  /// that the run is over. They may finish work (a last evaluation on the
  /// shards) before they answer, so they are told before the shards.
  void tell_callers(const node_actor& node, const cluster_spec& cluster,
                    const std::string& reason);

  /// Tells every node of `nodes` but the chief's that the run is over; a
  /// task that restarted during the run (and said hello again) under the
  /// node of its latest hello in `hellos`.
  void tell_nodes(const std::map<std::string, node_info>& nodes,
                  const std::map<std::string, caf::actor>& hellos,
                  const std::string& reason);

private:
  /// Sends `peers` (node actors by task name) the end of the run and waits
  /// until each has answered or gone down, or the request timeout passed:
  /// a node answers and exits, and its process may be gone before the
  /// answer leaves (TLS flushes lazily), so going down counts as an answer.
  void tell(const std::map<std::string, caf::actor>& peers,
            const std::string& reason);

  caf::scoped_actor& self_;
  std::string me_;
  std::chrono::milliseconds request_timeout_;
  std::ostream& log_;
};

} // namespace syncfac
