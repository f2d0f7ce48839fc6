#pragma once

// The chief's side of a synchronous run, wherever the other roles live:
// the evaluator and the chief actor with the run's logging and the restore
// of the newest checkpoint at the start; then the run is handed to the
// chief's supervisor (actors/chief_supervisor.hpp), which starts the
// workers and owns the fault path, and its end is awaited with one
// timeout; then, as a plain sequence outside the fault path, the counters
// every role reports, the final digest and the final evaluation. The
// in-process trainer and the chief node of a cluster both drive their runs
// through it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "actors/chief_supervisor.hpp"
#include "actors/evaluator.hpp"
#include "actors/local_trainer.hpp"
#include "actors/owned_actors.hpp"
#include "actors/sync_trainer.hpp"
#include "actors/topology.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/training_log.hpp"

namespace syncfac {

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

  /// The roles of the run now (a role that came back has a new actor).
  const run_roles& roles() const {
    return roles_;
  }

  /// Whether the shards were found at a step of a run already under way
  /// (this chief replaces one that went away): the run goes on from there.
  bool shards_kept() const {
    return kept_step_ >= 0;
  }

  /// In one process: hands the run to a supervisor of its own (no role
  /// can come back there: a lost one ends the run naming it), then
  /// collects the roles' counters and evaluates on the test set.
  caf::expected<training_summary> run(caf::scoped_actor& self,
                                      const run_roles& roles);

  /// In a cluster: hands the run to the chief's node supervisor `sup`
  /// (actors/chief_supervisor.hpp), which owns its fault path, and waits
  /// for its end, bounded by the start, every step's step_timeout and
  /// `slack` (the supervisor's own waits for lost roles); then the same
  /// end-of-run sequence.
  caf::expected<training_summary> run(caf::scoped_actor& self,
                                      const chief_supervisor_actor& sup,
                                      chief_run wiring,
                                      std::chrono::milliseconds slack);

  /// After run: the nodes' answers and the latest hellos, by task (the
  /// end of the run goes to each).
  const std::map<std::string, node_info>& nodes() const {
    return nodes_;
  }
  const std::map<std::string, caf::actor>& hellos() const {
    return hellos_;
  }

private:
  struct warm_mark;

  chief_driver() = default;

  /// What final_digest reads of the shards.
  enum class shard_values { variables, moving_averages };

  /// parameter_digest() of every shard's variables or of their moving
  /// averages.
  caf::expected<std::string> final_digest(caf::scoped_actor& self,
                                          shard_values what);

  /// Restores the shards from the newest good checkpoint of the run's
  /// directory, if there is one (only the covariance factors when the
  /// shards kept the run), and spawns the checkpoint writer.
  caf::error prepare_checkpoints(caf::actor_system& sys, owned_actors& top);

  /// The newest good checkpoint of the run's directory (none: nullptr).
  caf::expected<std::shared_ptr<const restored_run>> newest_checkpoint();

  /// Restores every shard from `run`.
  caf::error restore_shards(caf::scoped_actor& self, const restored_run& run);

  /// The step every shard is at, when they agree on one above 0 (the
  /// run's previous chief went away), else -1; a round the previous chief
  /// applied on some shards only is completed on the others first
  /// (actors/shard_steps.hpp). Shards that disagree otherwise are an
  /// error unless a checkpoint can bring them back in line.
  caf::expected<int64_t> kept_step(caf::scoped_actor& self);

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
  run_roles roles_;
  std::map<std::string, node_info> nodes_;
  std::map<std::string, caf::actor> hellos_;
  int64_t kept_step_ = -1;
  /// This chief replaced one that went away (the shards kept the run).
  bool restarted_ = false;
  int64_t resumed_at_ = -1;
  /// The shards on which this chief completed a round its predecessor
  /// applied on the others only.
  int64_t round_completed_on_shards_ = 0;
  int64_t shards_lost_ = 0;
  int64_t kfac_roles_lost_ = 0;
  int64_t rolled_back_steps_ = 0;
};

} // namespace syncfac
