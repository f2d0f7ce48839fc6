#pragma once

// The supervisor of the chief's node: the event-based actor that owns the
// chief's side of the fault path (docs/design.md, "Failure model"). The
// chief keeps tokens and apply rounds; every decision that a role is lost,
// every wait for it and every step that brings the run back is this
// actor's, as a state (a behaviour) and asynchronous requests, each bounded
// by a timeout that names what it waited for:
//
//   connecting  the node is being wired; hellos of peers are kept
//   awaiting    the tasks that connect to the chief themselves (workers,
//               say) are awaited, bounded by the connect timeout (a
//               restarted chief goes on without gradient workers missing
//               then); each is asked for its roles
//   starting    the covariance actors take the checkpoint's factors, the
//               chief its K-FAC roles, the workers their start
//   running     the chief's run request is out; the PS shards and K-FAC
//               roles are monitored and the K-FAC roles probed (a frozen
//               process's link can stay up through the other nodes, so no
//               down message comes); a loss tells the chief to pause
//   pausing     the chief pauses; its run request fails with ec::peer_lost
//               once the checkpoints begun are settled
//   recovering  the recovery plan's commands are carried out
//               (runtime/cluster/recovery_plan.hpp decides): each lost
//               role's host is waited for (reached again by a connector,
//               or its hello), bounded by max_wait and naming whom; roles
//               that do not answer a probe then are lost too; then the
//               shards are restored from the newest checkpoint (a lost
//               shard), the covariance actors' factors, the chief rolled
//               back and the workers rebound: running again. Each attempt
//               of a recovery is one weakly held object
//               (actors/recovery_attempt.hpp): a loss meanwhile replaces
//               it, and the answers of the one replaced reach nothing
//   ending_preempted  preempted while paused: the chief ends the run
//               where it stands
//   ended       the node program's request is answered (the summary or the
//               error) and the supervisor stops

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/evaluator.hpp"
#include "actors/node_watch.hpp"
#include "actors/recovery_attempt.hpp"
#include "actors/supervisor.hpp"
#include "messages/atoms.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/cluster/recovery_plan.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

/// The roles a run's chief talks to besides the shards it was made with.
struct run_roles {
  /// The PS shards.
  std::vector<ps_actor> shards;
  /// Gradient workers, then statistics workers (unset: not here, a
  /// restarted chief went on without it).
  std::vector<worker_actor> workers;
  std::vector<worker_actor> stats_workers;
  /// K-FAC only.
  std::vector<covariance_actor> covariance;
  std::vector<inverse_actor> inverses;
};

/// Where a role lives: its host task ("ps:0") and its role name ("ps:0").
struct role_place {
  std::string host;
  std::string role;
};

/// Where every role of the run lives; empty (an in-process run): the
/// roles are the ones handed over, and a lost one cannot come back.
struct chief_placement {
  std::vector<role_place> shards;
  std::vector<role_place> workers;
  std::vector<role_place> stats_workers;
  std::vector<role_place> covariance;
  std::vector<role_place> inverses;

  bool empty() const {
    return shards.empty();
  }
};

/// What the chief's driver hands its supervisor once the chief exists and
/// the tasks it connects to are connected.
struct chief_run {
  chief_actor chief;
  evaluator_actor evaluator;
  /// The peers connected to so far, by task name; the roles hosted here.
  std::map<std::string, node_info> nodes;
  std::map<std::string, caf::actor> hosted;
  /// Without a placement: the run's roles.
  run_roles roles;
  /// The tasks awaited before the start (they connect to the chief), how
  /// long, and whether gradient workers missing then are left out (a
  /// restarted chief goes on with those that came back).
  std::vector<std::string> awaited;
  std::chrono::milliseconds await_wait{60000};
  bool partial = false;
  /// The checkpoint the run continues from; the one only the covariance
  /// factors come from (the shards kept the run); the step the shards
  /// kept (-1: none, the run starts or continues from `restored`).
  std::shared_ptr<const restored_run> restored;
  std::shared_ptr<const restored_run> factors_from;
  int64_t kept_step = -1;
  /// The newest good checkpoint of the run's directory now (none:
  /// nullptr), and whether the run writes any.
  std::function<caf::expected<std::shared_ptr<const restored_run>>()>
    newest_checkpoint;
  bool writes_checkpoints = false;
  /// Longest wait for the chief's run request (every step bounded).
  std::chrono::milliseconds run_timeout{std::chrono::hours{1}};
  /// Where the fault lines and records go (outlives the supervisor).
  training_log* out = nullptr;
  /// Called once every task is here (every node agreed to the run), before
  /// the start; an error (say, an output that cannot be created) ends the
  /// run with it.
  std::function<caf::error()> on_connected;
};

/// How the run ended, as the supervisor answers it.
struct chief_run_end {
  /// Set when the run failed (the summary is then empty).
  caf::error error;
  sync_summary summary;
  /// The roles now (a role that came back has a new actor), the nodes'
  /// answers by task and the node actors of the latest hellos by task.
  run_roles roles;
  std::map<std::string, node_info> nodes;
  std::map<std::string, caf::actor> hellos;
  /// The checkpoint the run restored last (a rollback's), if any.
  std::shared_ptr<const restored_run> restored;
  int64_t shards_lost = 0;
  int64_t kfac_roles_lost = 0;
  int64_t rolled_back_steps = 0;
};

} // namespace syncfac

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(syncfac::chief_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(syncfac::chief_run_end)

namespace syncfac {

using chief_supervisor_actor = caf::typed_actor<
  // From the chief's driver: supervise the run; answered when it ends.
  caf::replies_to<run_atom, chief_run>::with<chief_run_end>,
  // From the node actor: a peer said hello (a task that connects to the
  // chief, at the start or back after a loss; a worker that restarted).
  caf::reacts_to<hello_atom, std::string, caf::actor>,
  // From the node actor: it refused a peer configured for another run.
  caf::reacts_to<hello_atom, std::string, std::string>,
  // From the node actor: a task said it cannot join the run (its own
  // setup refused it) before it exits; before the run starts it ends the
  // run, whichever task it is.
  caf::reacts_to<refuse_atom, std::string, std::string>,
  // From the chief's program while it connects to the tasks it reaches
  // itself: the text of a refusal that ends the run (a task said it
  // cannot join), or an empty string.
  caf::replies_to<refuse_atom>::with<std::string>,
  // From the node actor: a shutdown (the chief's node gets none; logged).
  caf::reacts_to<shutdown_atom, std::string>,
  // From its own down handler: a monitored role or node went away.
  caf::reacts_to<lost_atom, node_loss>,
  // From the chief: it was preempted while its steps are paused for a
  // lost role; the recovery is given up and the run ends where it stands
  // (docs/distributed.md, "Preemption"), not after --max_wait_ms.
  caf::reacts_to<preempt_atom, std::string>,
  // Its own timer: probe the K-FAC roles (this probe round's number).
  caf::reacts_to<probe_atom, uint64_t>,
  // Its own timer: the wait with this number ran out.
  caf::reacts_to<deadline_atom, uint64_t>,
  // A worker's answer to its start or rebind, when its run ends. The
  // start is sent, not anonymous: a worker starts its first step once
  // initialised only while the start still waits for its answer.
  caf::reacts_to<worker_status>>;

struct chief_supervisor_config {
  /// This node's task ("chief:0"), and every task's address by name (for
  /// the messages that name whom a wait was for).
  std::string me;
  std::map<std::string, std::string> addresses;
  /// Where every role lives (empty: an in-process run).
  chief_placement placement;
  /// Tasks that connect to the chief themselves: after a loss their hello
  /// is awaited; the others are connected to again (the connector).
  std::set<std::string> passive;
  /// The hello this node sends (asking a peer that said hello for its
  /// roles; filled in once the node actor exists, which the supervisor
  /// owns).
  std::shared_ptr<const node_hello> hello;
  /// Longest wait for a lost role's host; for one answer; for a probe of
  /// a K-FAC role (0: not probed; probed twice per timeout).
  std::chrono::milliseconds max_wait{300000};
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds probe_timeout{0};
  /// Longest wait for one answer of a connector; pause before asking a
  /// node that said hello for its roles again (it has not published them).
  std::chrono::milliseconds connect_attempt{5000};
  std::chrono::milliseconds hello_retry{200};
  /// The connector for `task` (made once per task, on its first loss).
  std::function<connector_actor(const std::string& task)> connector;
  /// Where the node's lines go (may be empty).
  std::function<void(const std::string&)> log;
};

/// Why a task cannot join the run.
struct task_refusal {
  /// What the run ends with: "refused worker:1 at connect: worker:1
  /// differs from the chief in ..." (the node refused its hello), or
  /// "worker:1 cannot join the run: ..." (the task said so itself).
  std::string text;
  /// The task said so itself (its own setup refused it, and it exits).
  bool own = false;
};

struct chief_supervisor_state {
  static inline const char* name = "chief_supervisor";

  chief_supervisor_config cfg;
  std::optional<node_watch> watch;
  chief_run run;
  run_roles roles;
  caf::typed_response_promise<chief_run_end> done;
  /// The latest hello's node actor per task.
  std::map<std::string, caf::actor> hellos;
  /// Why a task cannot join the run, by task, until that task says hello
  /// with a configuration that fits: a refusal that came before the run
  /// was handed over ends the run as soon as it is (not after the connect
  /// timeout), when the task is one the run awaits or said so itself.
  std::map<std::string, task_refusal> refusals;
  /// Gradient worker tasks a restarted chief went on without.
  std::set<std::string> absent;
  /// A refusal that came while the steps ran, ending the run after the
  /// global step in flight (checkpointed): the run's answer ends it with
  /// this error (request_run). None: no such refusal.
  caf::error refusal_ends_run;
  /// What a loss means and what brings the run back, from the start of
  /// the run on (runtime/cluster/recovery_plan.hpp); the events it has
  /// yet to take, the one it takes now first (actors/chief_recovery.cpp).
  std::optional<recovery_plan> plan;
  std::deque<recovery_input> plan_events;
  /// The recovery's attempt under way, its only owner: every answer of
  /// its requests reaches the plan only while it is held (a new loss
  /// replaces it, going on or the end drops it).
  std::shared_ptr<recovery_attempt> attempt;
  /// The roles before the recovery (which actors are new).
  run_roles before;
  /// The current probe round (a timer of an earlier one is over).
  uint64_t probe_round = 0;
  /// Connectors made so far, by task; stopped with the supervisor.
  std::map<std::string, connector_actor> connectors;
  std::shared_ptr<std::vector<caf::actor>> to_stop
    = std::make_shared<std::vector<caf::actor>>();

  void log(const std::string& line) const {
    if (run.out)
      run.out->line(line);
    else if (cfg.log)
      cfg.log(line);
  }

  /// The roles as the placement and the nodes say now; an error names
  /// the role that cannot be found.
  caf::expected<run_roles> resolve() const;

  /// "ps:0 at 127.0.0.1:4001".
  std::string where(const std::string& task) const;
};

chief_supervisor_actor::behavior_type chief_supervisor(
  chief_supervisor_actor::stateful_pointer<chief_supervisor_state> self,
  chief_supervisor_config cfg);

/// Spawns a chief's supervisor; an error names the field of `cfg` that is
/// wrong.
caf::expected<chief_supervisor_actor>
spawn_chief_supervisor(caf::actor_system& sys, chief_supervisor_config cfg);

/// Every variable of the checkpoint `run` has found a shard (`restored`
/// of them did); else an error naming the checkpoint.
caf::error check_all_restored(const restored_run& run, size_t restored);

} // namespace syncfac
