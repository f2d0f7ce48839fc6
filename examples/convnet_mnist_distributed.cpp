// Trains the seeds' ConvNet with one process per task of a cluster file
// (TF kfac/examples/convnet_mnist_distributed_main.py): the chief, the
// workers, the PS shards and, for K-FAC, covariance and inverse tasks, each
// its own actor system, talking through CAF's middleman (optionally over
// TLS with mutual authentication). Every node takes the same flags; the
// cluster file says who listens where and which task this process is.
//
//   build/bin/syncfac-launch --cluster examples/topologies/momentum_2w_1ps.json
//       -- --fake_data --steps 200           # the whole cluster, locally
//   build/bin/convnet_mnist_distributed --cluster cluster.json
//       --job_name worker --task 1            # one node, by hand
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}'
//       build/bin/convnet_mnist_distributed --steps 1000
//   srun -n 6 build/bin/convnet_mnist_distributed --layout chief=1,ps=2
//   mpirun -np 4 build/bin/convnet_mnist_distributed --layout chief=1,ps=1
//       (the cluster derived from the launcher's environment)
//
// The chief logs the run, writes --summary FILE at the end and tells every
// node that the run is over; the other nodes exit 0 then. SIGTERM, SIGINT,
// SIGHUP or --requeue_signal to any node ends the run after the global step in flight, checkpointed
// with --checkpoint_dir, and every node exits 143 (exit_codes::preempted);
// a second signal exits at once (docs/distributed.md, "Preemption").

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "distributed_options.hpp"
#include "example_main.hpp"
#include "runtime/base/error.hpp"
#include "runtime/exit_codes.hpp"

using namespace syncfac;
using namespace syncfac::examples;

namespace {

constexpr const char* program_name = "convnet_mnist_distributed";

/// --print_cluster: the cluster as the tasks will derive it. In a Slurm
/// job's batch script (SLURM_PROCID without SLURM_STEP_ID) that is the
/// job's allocation, as srun's tasks will see it; elsewhere what this
/// task resolves.
int print_cluster(const distributed_options& opts) {
  auto launcher = launcher_options(opts);
  auto env = current_environment();
  bool batch_script = opts.cluster.empty() && env.count("TF_CONFIG") == 0
                      && env.count("SLURM_PROCID") > 0
                      && env.count("SLURM_STEP_ID") == 0
                      && env.count("SLURM_STEPID") == 0;
  auto cluster = batch_script
                   ? slurm_job_cluster(env, launcher)
                   : resolve_cluster(opts.cluster, opts.job_name, opts.task,
                                     launcher);
  if (!cluster)
    return fail(program_name, cluster.error());
  std::cout << cluster->to_json() << std::endl;
  return EXIT_SUCCESS;
}

int run(distributed_options& opts) {
  if (opts.print_cluster)
    return print_cluster(opts);
  auto cfg = make_config(opts);
  if (!cfg)
    return fail(program_name, cfg.error());
  if (auto err = configure_system(opts, *cfg))
    return fail(program_name, err);
  data_loader load = [&opts, &cfg] {
    return load_data(opts, cfg->sync.base.model);
  };
  // SIGTERM, SIGINT, SIGHUP or --requeue_signal (a scheduler's
  // preemption; example_main watches them) end the run after the step in
  // flight; a second signal exits at once (docs/distributed.md).
  if (opts.stop_signals == nullptr)
    return fail(program_name, make_error(ec::internal,
                                         "no stop signal watcher"));
  return run_node(opts, *cfg, load, std::cout,
                  [&opts](caf::expected<node_outcome>& outcome) {
                    if (!outcome)
                      // Stopped by a signal before the run could end in
                      // order (e.g. still connecting to its peers),
                      // example_main exits preempted instead.
                      return fail(program_name, outcome.error());
                    if (!outcome->summary)
                      return outcome->exit_code;
                    auto json = outcome->summary->to_json();
                    json.add("cluster", outcome->cluster);
                    // A preempted run's report says where it stopped and
                    // exits preempted.
                    auto code = report(program_name, opts,
                                       *outcome->summary, json);
                    return code != EXIT_SUCCESS ? code : outcome->exit_code;
                  });
}

} // namespace

int main(int argc, char** argv) {
  distributed_options opts;
  return example_main(program_name, argc, argv, opts, run);
}
