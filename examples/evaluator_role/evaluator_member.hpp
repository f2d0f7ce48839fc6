#pragma once

// The evaluator as the member role of its task (actors/cluster_member.hpp):
// it decides when to evaluate, reports each record, and hears the run's
// events from the node's supervisor as messages. Its states are behaviours:
//
//   waiting     the next poll is a timer message away (--poll_ms)
//   working     a poll of the shards' step (or the look for new
//               checkpoints) and the evaluation it calls for are in flight;
//               a stop signal waits for them
//   peers_lost  a peer's node went down: no polls until the supervisor
//               says it is back, bounded by max_wait (then the evaluator
//               stops on ec::timeout naming who is missing, and the
//               supervisor ends the member naming it)
//   preempted   a stop signal was passed to the supervisor (then the
//               chief): no more evaluations, the chief's word is awaited
//               (the supervisor bounds that)
//   finishing   the chief ended the run: the final evaluation (none for a
//               preempted run), then the answer, which lets the chief go on
//
// An answer that comes after the state it was asked in is over (a loss, the
// end) reaches nothing: each round is one object the state owns and the
// answers hold weakly.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actors.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/supervisor.hpp"
#include "eval_role.hpp"

namespace evaluator_role {

using evaluator_actor = syncfac::member_role_actor::extend<
  // Its own timer: poll number `n` is due (one of an earlier wait is not).
  caf::reacts_to<syncfac::step_atom, uint64_t>,
  // Its own timer: the wait number `n` for lost peers ran out.
  caf::reacts_to<syncfac::deadline_atom, uint64_t>,
  // From the program's stop signal watcher (the signal's name): passed to
  // the node's supervisor after the evaluation in flight, no evaluation
  // after it.
  caf::reacts_to<syncfac::preempt_atom, std::string>>;

struct evaluator_config {
  /// "evaluator:0": records and log lines say it.
  std::string me;
  /// The task hosting the chief (its "metrics" role is the sink).
  std::string chief;
  eval_role_actor role;
  syncfac::supervisor_actor supervisor;
  /// Handles as connected at start: the chief's metrics sink and every
  /// PS shard in index order (shard s is role "ps:s" of task "ps:s").
  syncfac::metrics_actor sink;
  std::vector<syncfac::ps_actor> shards;
  /// Evaluate every K global steps, polling the shards every `poll`, each
  /// status request bounded by `poll_timeout`.
  int64_t eval_every_steps = 100;
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds poll_timeout{2000};
  /// One request's bound (an evaluation gets four).
  std::chrono::milliseconds request_timeout{60000};
  /// Longest wait for a lost peer to be back (the supervisor's too).
  std::chrono::milliseconds max_wait{300000};
  /// Set: evaluate each checkpoint written here instead of polling.
  std::string checkpoint_dir;
  /// This evaluator's own JSON-lines file (may be unset).
  std::shared_ptr<std::ofstream> metrics;
  /// The step of the last record reported (-1: none), for the program's
  /// last line.
  std::shared_ptr<std::atomic<int64_t>> last_reported;
};

struct evaluator_state {
  static inline const char* name = "evaluator";

  evaluator_config cfg;
  /// The global step of the last record reported (-1: none).
  int64_t last = -1;
  /// Evaluations that failed in a row.
  int failures = 0;
  /// Peer tasks whose node is down.
  std::set<std::string> missing;
  /// The round in flight (a poll and its evaluation): answers to an
  /// earlier one reach nothing.
  std::shared_ptr<const int> round;
  /// Numbers of the poll timer and of the wait for lost peers in force.
  uint64_t tick = 0;
  uint64_t wait = 0;
  /// A stop signal that came during a round, passed on when it is over.
  std::string stop;
};

/// A record as one JSON line (the --metrics format).
std::string record_json(const syncfac::metrics_record& rec);

evaluator_actor::behavior_type
evaluator(evaluator_actor::stateful_pointer<evaluator_state> self,
          evaluator_config cfg);

} // namespace evaluator_role
