#pragma once

// The chief's side of a synchronous run, wherever the other roles live:
// the evaluator and the chief actor with the run's logging, then the run
// itself (start the workers, wait for the chief, bounded), the counters
// every role reports and the final evaluation. The in-process trainer and
// the chief node of a cluster both drive their runs through it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "actors/evaluator.hpp"
#include "actors/local_trainer.hpp"
#include "actors/owned_actors.hpp"
#include "actors/sync_trainer.hpp"
#include "actors/topology.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

/// The roles a run's chief talks to besides the shards it was made with.
struct run_roles {
  /// The PS shards (set by the driver).
  std::vector<ps_actor> shards;
  /// Gradient workers, then statistics workers.
  std::vector<worker_actor> workers;
  std::vector<worker_actor> stats_workers;
  /// K-FAC only (for the summary's counters).
  std::vector<covariance_actor> covariance;
  std::vector<inverse_actor> inverses;
};

class chief_driver {
public:
  /// Spawns the evaluator (on its own device) and the chief of a run of
  /// `steps` global steps over `shards`; logs to `out`, which must outlive
  /// the driver.
  static caf::expected<std::unique_ptr<chief_driver>>
  make(caf::actor_system& sys, owned_actors& top,
       const sync_training_config& cfg, const task_plan& tasks, int64_t steps,
       std::vector<ps_actor> shards, std::shared_ptr<const dataset> test,
       training_log& out);

  chief_actor chief() const {
    return chief_;
  }

  /// The PS shards now (a shard that came back has a new actor).
  const std::vector<ps_actor>& shards() const {
    return shards_;
  }

  /// In a cluster: brings the task hosting a lost role ("ps:1",
  /// "covariance:0", "inverse:0") back (waits for it, bounded) and answers
  /// the run's roles as they are now, so that the run goes on (after a
  /// shard's loss from its newest checkpoint) instead of failing.
  using role_recovery
    = std::function<caf::expected<run_roles>(const std::string& lost)>;

  void recover_roles_with(role_recovery f) {
    recover_ = std::move(f);
  }

  /// The roles of the run now (a role that came back has a new actor).
  const run_roles& roles() const {
    return roles_;
  }

  /// Whether the shards were found at a step of a run already under way
  /// (this chief replaces one that went away): the run goes on from there.
  bool shards_kept() const {
    return kept_step_ >= 0;
  }

  /// Starts every worker, waits for the chief's last round (bounded by
  /// step_timeout per step), collects the roles' counters and evaluates
  /// on the test set.
  caf::expected<training_summary> run(caf::scoped_actor& self,
                                      const run_roles& roles);

private:
  struct warm_mark;

  chief_driver() = default;

  /// parameter_digest() of every shard's variables.
  caf::expected<std::string> final_digest(caf::scoped_actor& self);

  /// Restores the shards from the newest good checkpoint of the run's
  /// directory, if there is one (only the covariance factors when the
  /// shards kept the run), and spawns the checkpoint writer.
  caf::error prepare_checkpoints(caf::actor_system& sys, owned_actors& top);

  /// The newest good checkpoint of the run's directory (none: nullptr).
  caf::expected<std::shared_ptr<const restored_run>> newest_checkpoint();

  /// Restores every shard from `run`.
  caf::error restore_shards(caf::scoped_actor& self, const restored_run& run);

  /// Restores the covariance actors' factors from the checkpoint.
  caf::error restore_covariance(caf::scoped_actor& self,
                                const std::vector<covariance_actor>& cov);

  /// Starts the workers, each at its resume point.
  void start_workers(caf::scoped_actor& self, const run_roles& roles);

  /// Rebinds the workers to this chief and the shards, each at its resume
  /// point (the shards' step when they kept the run, else the restored
  /// checkpoint's).
  void rebind_workers(caf::scoped_actor& self, const run_roles& roles,
                      int64_t incarnation, int64_t step = -1);

  /// The step every shard is at, when they agree on one above 0 (the
  /// run's previous chief went away), else -1; shards that disagree are
  /// an error unless a checkpoint can bring them back in line.
  caf::expected<int64_t> kept_step(caf::scoped_actor& self);

  /// After the loss of a PS shard: brings it back, restores every shard
  /// and covariance actor from the newest checkpoint and rolls the chief
  /// back to it. After a K-FAC role's: brings it back (a covariance actor
  /// with the checkpoint's factors) and goes on from the step it was lost
  /// at. Then rebinds the workers.
  caf::error recover(caf::scoped_actor& self);

  /// The roles of `roles` that do not answer a status request within the
  /// probe timeout (or the request timeout), by name ("ps:0").
  std::vector<std::string> silent_roles(caf::scoped_actor& self,
                                        const run_roles& roles);

  /// The checkpoint a shard lost (`lost` says which, and when) is
  /// restored from: the newest good one; an error naming the flag when
  /// the run writes none, or before the first.
  caf::expected<std::shared_ptr<const restored_run>>
  checkpoint_for_shard(const std::string& lost);

  /// The summary's "checkpoints" object.
  json_object checkpoint_report(const sync_summary& run) const;

  sync_training_config cfg_;
  task_plan tasks_;
  int64_t steps_ = 0;
  std::vector<ps_actor> shards_;
  evaluator_actor evaluator_;
  chief_actor chief_;
  training_log* out_ = nullptr;
  std::shared_ptr<warm_mark> warm_;
  /// The checkpoint the run continues from, if any.
  std::shared_ptr<const restored_run> restored_;
  /// The checkpoint only the covariance factors come from (the shards
  /// kept the run).
  std::shared_ptr<const restored_run> factors_from_;
  checkpointer_actor checkpointer_;
  role_recovery recover_;
  run_roles roles_;
  int64_t kept_step_ = -1;
  /// This chief replaced one that went away (the shards kept the run).
  bool restarted_ = false;
  int64_t resumed_at_ = -1;
  int64_t shards_lost_ = 0;
  int64_t kfac_roles_lost_ = 0;
  int64_t rolled_back_steps_ = 0;
};

} // namespace syncfac
