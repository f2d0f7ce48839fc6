#pragma once

// An evaluator role written the way a user of syncfac writes a role: only
// against the installed headers. Asked to, it pulls the variables of every
// PS shard (reads only: the shards serve pulls between their updates, so
// the sync loop never waits for it) or takes given ones (a checkpoint's),
// loads them on its own device actor, evaluates them on a held-out set and
// answers with a metrics record.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actors.hpp"
#include "actors/metrics_sink.hpp"
#include "runtime/data/dataset.hpp"

namespace evaluator_role {

/// The role's typed interface: one handler per message it understands.
using eval_role_actor = caf::typed_actor<
  // Pull every shard's variables (all at one global step, else an
  // ec::unavailable error: an update is in flight), evaluate them and
  // answer with {source, global step, test_loss, test_accuracy, examples}.
  caf::replies_to<syncfac::eval_atom,
                  std::vector<syncfac::ps_actor>>::with<syncfac::metrics_record>,
  // Evaluate these variables (e.g. a checkpoint's) as those of `step`;
  // every variable of the model must be there, nothing else.
  caf::replies_to<syncfac::eval_atom, int64_t,
                  syncfac::parameter_set>::with<syncfac::metrics_record>,
  // The last record (step -1 before the first evaluation); any peer may
  // ask, metrics_record being a registered syncfac type.
  caf::replies_to<syncfac::status_atom>::with<syncfac::metrics_record>>;

struct eval_role_config {
  /// The task name records carry ("evaluator:0").
  std::string source;
  syncfac::model_spec model;
  std::shared_ptr<const syncfac::dataset> data;
  /// The role's own device actor.
  syncfac::device_actor device;
  /// Examples per device request (bounds activation memory); the chief's
  /// evaluator uses the same default.
  int64_t slice_size = 500;
  std::chrono::milliseconds request_timeout{60000};

  caf::error validate() const;
};

struct eval_role_state {
  static inline const char* name = "evaluator_role";

  eval_role_config cfg;
  syncfac::parameter_set params;
  std::map<std::string, size_t> slot_of;
  bool loaded = false;
  syncfac::metrics_record last;
};

eval_role_actor::behavior_type
eval_role(eval_role_actor::stateful_pointer<eval_role_state> self,
          eval_role_config cfg);

caf::expected<eval_role_actor> spawn_eval_role(caf::actor_system& sys,
                                               eval_role_config cfg);

} // namespace evaluator_role
