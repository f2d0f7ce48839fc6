#pragma once

// The decisions of the chief's recovery from a lost role, as data: events
// in (a role lost, the chief's steps paused, a host back, each answer of a
// restore step, a wait that ran out, a preemption, the chief lost) and
// commands out (pause the chief, await these hosts, probe every role,
// restore the shards from this checkpoint, roll the chief back to this
// step, go on, end the run with this error). No actor, no clock, no file:
// the same events give the same commands, so every order of events can be
// tried in a test (tests/runtime/cluster/recovery_plan.cpp). The chief's
// supervisor (actors/chief_recovery.cpp) carries the commands out and
// feeds their answers back; docs/design.md §6, "The recovery plan", draws
// one recovery.
//
// One recovery (from the first loss to the run going on) is made of
// attempts. An attempt begins once the chief's steps are paused and again
// on every loss while the recovery is under way (a role lost while its
// host is awaited, while the roles are probed or restored, the role being
// restored lost again): each awaits every lost role's host that is not
// back, probes every role, and restores from the start. Every command of
// an attempt carries its number and every answer names the attempt it
// answers: an answer of an earlier attempt changes nothing, so a restore
// chain that was in flight when another role went away can never take the
// run back to running.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <caf/error.hpp>

#include "runtime/checkpoint/run_checkpoint.hpp"

namespace syncfac {

/// What the plan knows of the run: facts fixed for its whole length.
struct recovery_layout {
  /// The chief's task ("chief:0"): a role it hosts cannot come back.
  std::string me;
  /// The task hosting each role that may be lost ("ps:1" -> "ps:1"); a
  /// role missing here (an in-process run) cannot come back.
  std::map<std::string, std::string> hosts;
  /// Each task's address, for the messages ("ps:0 at 127.0.0.1:4001").
  std::map<std::string, std::string> addresses;
  /// Tasks that connect to the chief themselves (their hello is awaited);
  /// the others are reached again by a connector.
  std::set<std::string> passive;
  bool has_connector = false;
  /// Whether the run writes checkpoints (a lost shard needs one).
  bool writes_checkpoints = false;
  /// The longest wait for a lost role's host, as its message names it (the
  /// plan keeps no time: the supervisor's timer says when it ran out).
  std::chrono::milliseconds max_wait{300000};
};

/// A task hosting lost roles, and whether it is back.
struct awaited_host {
  std::string task;
  std::vector<std::string> roles;
  bool back = false;
};

/// Where the plan stands: between recoveries (running), or what one waits
/// for now.
enum class recovery_stage {
  /// No role lost: the chief's steps run.
  running,
  /// The chief was told to pause; its run request fails with
  /// ec::peer_lost once the checkpoints begun are settled.
  pausing,
  /// The newest checkpoint is looked up (once per recovery).
  finding_checkpoint,
  /// Each lost role's host is awaited (bounded by max_wait).
  awaiting_hosts,
  /// Every role is asked for its status (a frozen task may have lost
  /// others whose loss never came).
  probing,
  /// The paused chief is asked for its step.
  asking_step,
  /// The shards are restored from the checkpoint (a shard was lost).
  restoring_shards,
  /// The covariance actors take factors from the checkpoint.
  restoring_covariance,
  /// The chief is rolled back (a new incarnation).
  rolling_back,
  /// Preempted while the steps were paused: the chief ends the run where
  /// it stands.
  ending_preempted,
  /// The run ended with an error.
  ended,
};

const char* to_string(recovery_stage stage);

std::ostream& operator<<(std::ostream& out, recovery_stage stage);

/// What happens to the plan.
namespace recovery_event {

/// A role whose loss pauses the steps (a PS shard, a covariance or an
/// inverse actor) went away or did not answer a liveness probe.
struct role_lost {
  std::string role;
  std::string why;
};

/// The chief's run request failed with ec::peer_lost: its steps are
/// paused (`error` is that failure).
struct chief_paused {
  caf::error error;
};

/// The chief failed (its run request with another error, or a request of
/// the restore to it): the run ends with `error`.
struct chief_lost {
  caf::error error;
};

/// The chief was preempted while its steps were paused.
struct preempted {
  std::string why;
};

/// A task hosting lost roles is reachable again.
struct host_back {
  std::string task;
};

/// The wait of attempt `attempt` for the lost roles' hosts ran out.
struct wait_expired {
  uint64_t attempt = 0;
};

/// The newest good checkpoint of the run (nullptr: none yet).
struct checkpoint_found {
  uint64_t attempt = 0;
  std::shared_ptr<const restored_run> checkpoint;
};

/// Every role answered the probe but `silent`.
struct probed {
  uint64_t attempt = 0;
  std::vector<std::string> silent;
};

/// The paused chief stands at global step `step`.
struct chief_step {
  uint64_t attempt = 0;
  int64_t step = 0;
};

struct shards_restored {
  uint64_t attempt = 0;
};

struct covariance_restored {
  uint64_t attempt = 0;
};

/// The chief went back to the restore's step as incarnation `incarnation`.
struct chief_rolled_back {
  uint64_t attempt = 0;
  int64_t incarnation = 0;
};

/// A step of the restore (a lookup, a role's restore) failed.
struct step_failed {
  uint64_t attempt = 0;
  caf::error error;
};

} // namespace recovery_event

using recovery_input
  = std::variant<recovery_event::role_lost, recovery_event::chief_paused,
                 recovery_event::chief_lost, recovery_event::preempted,
                 recovery_event::host_back, recovery_event::wait_expired,
                 recovery_event::checkpoint_found, recovery_event::probed,
                 recovery_event::chief_step, recovery_event::shards_restored,
                 recovery_event::covariance_restored,
                 recovery_event::chief_rolled_back,
                 recovery_event::step_failed>;

/// What the supervisor is told to do.
namespace recovery_command {

/// A line for the run's log.
struct say {
  std::string line;
};

/// Tell the chief to pause its steps for `role`.
struct pause_chief {
  std::string role;
};

/// Look up the run's newest good checkpoint (answer: checkpoint_found, or
/// step_failed when the lookup itself fails).
struct find_checkpoint {
  uint64_t attempt = 0;
};

/// Begin a wait of max_wait for `hosts` (none back yet; answer: host_back
/// for each as it is, wait_expired); those not passive are reached again
/// through their connector.
struct await_hosts {
  uint64_t attempt = 0;
  std::vector<awaited_host> hosts;
};

/// Resolve the roles as the nodes say now and ask each for its status
/// (answer: probed).
struct probe_roles {
  uint64_t attempt = 0;
};

/// Ask the paused chief for its step (answer: chief_step).
struct ask_chief_step {
  uint64_t attempt = 0;
};

/// Restore every shard from `from` (answer: shards_restored).
struct restore_shards {
  uint64_t attempt = 0;
  std::shared_ptr<const restored_run> from;
};

/// Give covariance actors the factors of `from`: every one (`every`, the
/// shards went back to it), else only the new ones (answer:
/// covariance_restored).
struct restore_covariance {
  uint64_t attempt = 0;
  std::shared_ptr<const restored_run> from;
  bool every = false;
};

/// Hand the K-FAC roles the roles now and roll the chief back to `step`
/// (with each worker's resume point in `from` when `rolls_back`; answer:
/// chief_rolled_back).
struct roll_back_chief {
  uint64_t attempt = 0;
  int64_t step = 0;
  std::shared_ptr<const restored_run> from;
  bool rolls_back = false;
};

/// The recovery is done: rebind the workers at `step` as incarnation
/// `incarnation` and send the chief's run request again.
struct go_on {
  std::vector<std::string> lost;
  int64_t step = 0;
  /// Where the steps had come when they paused.
  int64_t paused_step = 0;
  int64_t incarnation = 0;
  /// The shards went back to `from` (else the run goes on from `step`,
  /// with `from`, if any, the factors of new covariance actors).
  bool rolled_back = false;
  std::shared_ptr<const restored_run> from;
};

/// Preempted while paused: ask the chief to end the run where it stands.
struct end_where_it_stands {
  std::string why;
};

/// The run ends with `error`.
struct end_run {
  caf::error error;
};

} // namespace recovery_command

using recovery_order = std::variant<
  recovery_command::say, recovery_command::pause_chief,
  recovery_command::find_checkpoint, recovery_command::await_hosts,
  recovery_command::probe_roles, recovery_command::ask_chief_step,
  recovery_command::restore_shards, recovery_command::restore_covariance,
  recovery_command::roll_back_chief, recovery_command::go_on,
  recovery_command::end_where_it_stands, recovery_command::end_run>;

using recovery_orders = std::vector<recovery_order>;

class recovery_plan {
public:
  explicit recovery_plan(recovery_layout layout);

  /// What `input` means now: the commands to carry out, in order.
  recovery_orders on(const recovery_input& input);

  recovery_stage stage() const {
    return stage_;
  }

  /// The current attempt (answers naming another are of an earlier one).
  uint64_t attempt() const {
    return attempt_;
  }

  /// The roles lost since the run last went on, in order.
  const std::vector<std::string>& lost() const {
    return lost_;
  }

  const std::vector<awaited_host>& hosts() const {
    return hosts_;
  }

  /// Counted when a recovery brings them back (or gives them up,
  /// preempted).
  int64_t shards_lost() const {
    return shards_lost_;
  }
  int64_t kfac_roles_lost() const {
    return kfac_roles_lost_;
  }
  int64_t rolled_back_steps() const {
    return rolled_back_steps_;
  }

  /// "ps:0 at 127.0.0.1:4001".
  std::string where(const std::string& task) const;

private:
  bool recovering() const;
  bool current(uint64_t attempt) const {
    return attempt == attempt_;
  }
  bool shard_lost() const;
  /// Adds `role` to the lost roles and its host to the awaited ones (not
  /// back); false when that changes nothing.
  bool mark_lost(const std::string& role);
  void begin_attempt(recovery_orders& out);
  void await(recovery_orders& out);
  void end(recovery_orders& out, caf::error error);
  void end_preempted(recovery_orders& out);
  void count_lost();
  std::string hosts_text(bool only_missing) const;
  std::string lost_text(const char* separator) const;

  void on(const recovery_event::role_lost& e, recovery_orders& out);
  void on(const recovery_event::chief_paused& e, recovery_orders& out);
  void on(const recovery_event::chief_lost& e, recovery_orders& out);
  void on(const recovery_event::preempted& e, recovery_orders& out);
  void on(const recovery_event::host_back& e, recovery_orders& out);
  void on(const recovery_event::wait_expired& e, recovery_orders& out);
  void on(const recovery_event::checkpoint_found& e, recovery_orders& out);
  void on(const recovery_event::probed& e, recovery_orders& out);
  void on(const recovery_event::chief_step& e, recovery_orders& out);
  void on(const recovery_event::shards_restored& e, recovery_orders& out);
  void on(const recovery_event::covariance_restored& e,
          recovery_orders& out);
  void on(const recovery_event::chief_rolled_back& e, recovery_orders& out);
  void on(const recovery_event::step_failed& e, recovery_orders& out);

  recovery_layout layout_;
  recovery_stage stage_ = recovery_stage::running;
  uint64_t attempt_ = 0;
  std::vector<std::string> lost_;
  std::vector<awaited_host> hosts_;
  /// The recovery's checkpoint: not looked up yet (nullopt), none
  /// (nullptr), or the one the shards go back to and new covariance
  /// actors take their factors from.
  std::optional<std::shared_ptr<const restored_run>> checkpoint_;
  /// The furthest step the paused chief said it stands at in this
  /// recovery: an attempt given up after its rollback reached the chief
  /// finds the chief at the rollback's step, and the steps thrown away
  /// are counted from where the steps paused.
  int64_t paused_step_ = -1;
  /// The step the current attempt's restore goes to.
  int64_t restore_step_ = 0;
  /// Why the chief was preempted (empty: it was not).
  std::string preempted_;
  int64_t shards_lost_ = 0;
  int64_t kfac_roles_lost_ = 0;
  int64_t rolled_back_steps_ = 0;
};

} // namespace syncfac
