#pragma once

// The chief's state and what its files share, which no other file uses
// (actors/chief.hpp names the files). The state is data only; which
// messages mean what in which state is actors/chief.cpp's.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/chief.hpp"
#include "actors/chief_checkpoints.hpp"
#include "actors/chief_round.hpp"
#include "runtime/sync/update_account.hpp"

namespace syncfac {

/// A worker's token request waiting for a token.
struct token_request {
  caf::typed_response_promise<token_grant> promise;
  int32_t worker = 0;
  caf::actor_addr sender;
  /// When it came: its wait counts into round_report::token_wait_s.
  std::chrono::steady_clock::time_point since
    = std::chrono::steady_clock::now();
};

/// What the chief knows of one gradient worker task.
struct worker_record {
  /// The worker actor of the task now (a restart brings a new one).
  caf::actor_addr actor;
  /// The step of the last token it was granted (-1: none).
  int64_t granted_step = -1;
  int64_t losses = 0;
  int64_t rejoins = 0;
};

/// The workers' reports since the previous round and the run's totals of
/// them: what each round_report says of the workers.
struct report_window {
  double loss = 0;
  int64_t correct = 0;
  int64_t count = 0;
  int64_t reports = 0;
  /// Totals of the run.
  int64_t stale_pushes = 0;
  int64_t examples = 0;
  /// Mean loss and accuracy of the last window with reports.
  double last_loss = 0;
  double last_accuracy = 0;

  void add(const worker_report& rep);

  /// Fills `out`'s share (reports, loss, accuracy, stale pushes,
  /// examples) and starts the next window.
  void close(round_report& out);

  /// Forgets the window (a rollback: its reports are of steps undone).
  void clear();
};

/// Why the steps paused: the role the supervisor found lost.
struct chief_pause {
  std::string lost_task;
  int64_t lost_at = -1;
};

/// Rejoin requests held while the steps cannot go on (paused for a lost
/// role, or rolled back and not running yet): at most one per gradient
/// worker, answered where the steps go on (actors/chief_rejoins.cpp).
struct held_rejoins {
  struct held {
    caf::typed_response_promise<resume_point> promise;
    /// Why it waits ("ps:0 was lost"), for the error if it never can.
    std::string why;
  };
  std::map<int32_t, held> by_worker;

  /// Holds `promise` for `worker`; an earlier request of the same worker
  /// fails, replaced by this one.
  void hold(int32_t worker, caf::typed_response_promise<resume_point> promise,
            std::string why);

  /// Fails every held request, naming its worker, why it waited and `end`
  /// (why it never can go on).
  void fail_all(const std::string& end);
};

struct chief_state {
  static inline const char* name = "chief";

  chief_config cfg;
  int64_t global_step = 0;
  std::deque<int64_t> tokens;
  std::deque<token_request> waiting;
  int64_t tokens_granted = 0;
  /// chief_status::sent: grants, apply and set_step requests.
  transfer_counts sent;
  caf::typed_response_promise<sync_summary> run_promise;
  report_window window;
  /// The shards' counts as their last applies reported them
  /// (round_report).
  int64_t refused_pushes = 0;
  int64_t preconditioned_steps = 0;
  int64_t inverse_sets = 0;
  double token_wait_s = 0;
  /// Worker reports refused as malformed.
  int64_t refused_reports = 0;
  /// Per gradient worker task.
  std::vector<worker_record> workers;
  worker_positions positions;
  chief_checkpoints checkpoints;
  /// The steps while they run and the round in flight
  /// (actors/chief_round.hpp): the continuations of their requests hold
  /// them weakly.
  std::shared_ptr<chief_steps> steps;
  std::shared_ptr<chief_round> round;
  /// Set by a lost role (lost_atom), until a rollback: the steps wait for
  /// the supervisor to bring the role back; a run that ends instead keeps
  /// it (its workers' failures are of the steps given up).
  std::optional<chief_pause> pause;
  /// K-FAC: the inverse actors (their supervisor watches them).
  std::vector<inverse_actor> inverses;
  /// Workers' rejoins asked while the steps could not go on.
  held_rejoins rejoins;
  /// Bumped by each rollback (worker_report::incarnation).
  int64_t incarnation = 0;
  /// Every acknowledged update: in the parameters, or rolled back and
  /// redone (the summary's faults.updates_*).
  update_account updates;
  /// Why the run was preempted (empty: it was not).
  std::string preempted;
  /// Who said a role was lost (the chief's supervisor): a preemption while
  /// the steps are paused is passed to it, to end the run there instead of
  /// waiting for the role.
  caf::actor supervisor;

  chief_status status(bool finished) const;

  /// Which workers are lost and have not come back, for a step that
  /// waited in vain.
  std::string lost_workers() const;
};

namespace chief_parts {

using self_ptr = chief_actor::stateful_pointer<chief_state>;
using behavior = chief_actor::behavior_type;

// -- chief.cpp: the states ----------------------------------------------------

/// Before the steps run: at spawn, and after a rollback.
behavior ready(self_ptr self);
/// The steps run: tokens go out, rounds are applied.
behavior running(self_ptr self);
/// A role is lost: no token goes out until a rollback (or the run's end).
behavior paused(self_ptr self);
/// The steps are over: every token request is answered with a stop; the
/// summary waits for the checkpoints in flight.
behavior finishing(self_ptr self);
/// The summary is delivered.
behavior done(self_ptr self);

// -- chief_steps.cpp ----------------------------------------------------------

void note(self_ptr self, const std::string& line);

/// Takes a worker's report with its token request (checked, counted); the
/// request waits in the queue. An error refuses it; a diverged loss ends
/// the run too.
caf::result<token_grant> take_report(self_ptr self, const worker_report& rep);

/// Grants tokens to the waiting requests while there are tokens.
void grant_tokens(self_ptr self);

/// Answers every waiting request with a stop.
void grant_stops(self_ptr self);

/// A worker's process or node went away: its waiting requests go, and a
/// token it held for the current step goes back to the queue.
void lose_worker(self_ptr self, const caf::actor_addr& who);

/// Sets every shard's step, then the tokens and the rounds: ready to
/// running.
void start(self_ptr self);

/// The next round, or the run's end at the last step.
void run_round(self_ptr self);

/// Ends the run with its summary once the checkpoints begun are written
/// (or failed): to finishing, then done.
void finish(self_ptr self);

/// Ends the run with `err`: stops every worker, answers the run request.
void fail(self_ptr self, caf::error err);

// -- chief_rejoins.cpp --------------------------------------------------------

/// A worker task that (re)started while the steps run: where it resumes.
caf::result<resume_point> rejoin(self_ptr self, int32_t worker);

/// A worker task asks where it rejoins while the steps cannot go on (a
/// lost role is being brought back): held until they do.
caf::result<resume_point> hold_rejoin(self_ptr self, int32_t worker,
                                      std::string why);

/// The steps go on: every held rejoin is answered where they go on from.
void answer_held_rejoins(self_ptr self);

/// The run ends (or fails) before the steps went on: every held rejoin
/// fails, naming its worker and `why`.
void fail_held_rejoins(self_ptr self, const std::string& why);

// -- chief_faults.cpp ---------------------------------------------------------

/// The supervisor found `task` lost: running to paused.
void lose_task(self_ptr self, const std::string& task);

/// Goes on after a pause from `step` with `shards`, each worker rejoining
/// at its `points` (none: its own positions): a new incarnation, ready.
caf::result<int64_t> roll_back(self_ptr self, int64_t step,
                               std::vector<ps_actor> shards,
                               std::vector<resume_point> points);

/// A node was preempted: the run ends after the global step in flight.
void preempt(self_ptr self, const std::string& why, bool step_in_flight);

/// The step in flight at the preemption did not finish in time.
void preempt_step_timed_out(self_ptr self, int64_t step);

/// The run request of a supervisor that gives a paused run up because
/// it was preempted.
caf::result<sync_summary> end_paused_run(self_ptr self);

// -- chief_checkpoints.cpp ----------------------------------------------------

/// Asks the shards (and covariance actors) for their snapshots of the
/// step now: before the step's tokens go out, so no apply comes between.
void begin_checkpoint(self_ptr self);

/// Takes a worker's data position; the pending checkpoint may go now.
void record_position(self_ptr self, const worker_report& rep);

/// The grace of the checkpoint of `step` is over: written with the
/// positions known.
void checkpoint_grace_over(self_ptr self, int64_t step);

/// Drops the checkpoint whose snapshots are being taken, because `task`,
/// whose snapshot it needs, is lost. Whether there was one.
bool abandon_checkpoint(self_ptr self, const std::string& task);

/// Runs `then` once no checkpoint is in flight (at once if none is).
void when_checkpoints_settled(self_ptr self, std::function<void()> then);

} // namespace chief_parts

} // namespace syncfac
