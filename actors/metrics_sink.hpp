#pragma once

// The chief's metrics sink: the "metrics" role of chief:0. Any role of a
// cluster (an evaluator, a user's own role) reports records to it; the sink
// writes each into the chief's log and its --metrics JSON-lines file, so a
// run's metrics stay one stream whoever measured them. Reporting is a
// one-way message: a reporter never waits for the chief.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/atoms.hpp"
#include "runtime/wire_float.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

/// One measurement of a role at a global step.
struct metrics_record {
  /// Who measured: a task name ("evaluator:0").
  std::string source;
  /// The global step the measurement belongs to.
  int64_t step = 0;
  /// Named values ("test_loss", "test_accuracy", ...).
  std::map<std::string, double> fields;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, metrics_record& x) {
  return f(caf::meta::type_name("metrics_record"), x.source, x.step,
           wire(x.fields));
}

using metrics_actor = caf::typed_actor<
  // A role reports a record: one log line and one metrics line (a record
  // without a source is counted as refused and logged as such).
  caf::reacts_to<metrics_atom, metrics_record>,
  // The last record of every source, with a field "reports" holding how
  // many records it sent (for the chief's summary).
  caf::replies_to<status_atom>::with<std::vector<metrics_record>>>;

struct metrics_sink_config {
  /// Where records go. Must outlive the sink: the chief stops the sink
  /// before its log ends.
  training_log* log = nullptr;

  caf::error validate() const;
};

struct metrics_sink_state {
  static inline const char* name = "metrics";

  metrics_sink_config cfg;
  std::map<std::string, metrics_record> last;
  std::map<std::string, int64_t> reports;
  int64_t refused = 0;
};

caf::expected<metrics_actor> spawn_metrics_sink(caf::actor_system& sys,
                                                metrics_sink_config cfg);

/// The log line of a record: "[evaluator:0] global_step: 40 | test_loss:
/// 0.51 | test_accuracy: 0.83".
std::string to_log_line(const metrics_record& rec);

} // namespace syncfac
