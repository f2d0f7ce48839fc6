#pragma once

// What a cluster's run ended with, collected in one place on the chief's
// node: each role's counters, or why it could not be asked, and what the
// roles reported to the metrics sink. The chief's summary carries it as
// its "cluster" part (docs/distributed.md, "Start-up, handshake and end"). Pure: the
// chief's node fills it from the roles' answers (actors/cluster_end.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/json.hpp"

namespace syncfac {

struct cluster_report {
  /// The tasks of the cluster file and whether the run used TLS.
  int64_t tasks = 0;
  bool tls = false;
  /// Per role, in the order they were asked: its counters, or why not.
  std::vector<std::pair<std::string, json_object>> roles;
  /// The metrics sink's sources, by the last record of each; unset when
  /// the node hosts no sink.
  std::optional<json_object> metrics;

  /// `role` answered with `counters`.
  void counters(const std::string& role, json_object counters);

  /// `role` could not be asked (`why`: its error, or that it was gone).
  void unreachable(const std::string& role, const std::string& why);

  /// The summary's "cluster" object: {"tasks", "tls", "roles", "metrics"}.
  json_object to_json() const;
};

/// Why a role has no counters when it has no actor at the end of a run.
inline const char* gone_at_the_end() {
  return "not there when the run ended (lost, or not back after the "
         "chief's restart)";
}

} // namespace syncfac
