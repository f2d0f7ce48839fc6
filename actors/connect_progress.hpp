#pragma once

// What a connector knows while it reaches its peers: who answered, who is
// still missing and why the last attempt at each failed. Pure logic, no
// actor: the connector (actors/node_connector.hpp) asks it what to say
// while it waits and when it gives up, and checks each answer with it.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/cluster_messages.hpp"
#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

struct connect_progress {
  /// The tasks to reach, in the order given, each once.
  std::vector<task_id> peers;
  /// Their answers so far, by task name ("worker:1").
  std::map<std::string, node_info> reached;
  /// Why the latest attempt at a task failed, by task name.
  std::map<std::string, std::string> last_error;

  /// Whether every peer answered.
  bool done() const;

  /// The peers without an answer, in order.
  std::vector<task_id> missing() const;

  /// Records why the latest attempt at `task` failed.
  void failed(const task_id& task, std::string why);

  /// "ps:0 at 127.0.0.1:7001 (connection refused), worker:1 at ...": the
  /// peers still missing, where they were looked for and the last error.
  std::string describe_missing(const cluster_spec& cluster) const;

  /// The log line while waiting: "worker:0: waiting for ps:0 at ... since
  /// 5 s".
  std::string waiting_line(const std::string& me, const cluster_spec& cluster,
                           std::chrono::seconds waited) const;

  /// The error at the deadline: ec::timeout, "peers not reachable after
  /// N s: " and the missing peers.
  caf::error timed_out(const cluster_spec& cluster,
                       std::chrono::seconds waited) const;

  /// The answers in the order of `peers`. Precondition: done().
  std::vector<node_info> answers() const;
};

/// Whether an attempt's error is a refusal that will not change (protocol,
/// types, configuration), so that the connecting ends at once.
bool is_final_refusal(const caf::error& err);

} // namespace syncfac
