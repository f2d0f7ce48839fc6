// Trains the seeds' ConvNet (or MLP) on Fashion-MNIST in one process: by
// default through the synchronous-replica runtime (chief, N workers with
// their device actors, P PS shards), or with --runtime plain as one loop
// around one device actor (TF kfac/examples/convnet_mnist_single_main.py
// with a first-order optimizer).
//
//   build/bin/convnet_mnist_single --worker_replicas 3 --replicas_to_aggregate 2
//       --ps_tasks 2                                    # one backup worker
//   build/bin/convnet_mnist_single                       # Fashion-MNIST, 2 epochs
//   build/bin/convnet_mnist_single --fake_data --steps 200
//   build/bin/convnet_mnist_single --data_dir ~/mnist --optimizer adam
//       --learning_rate 0.001 --eval_every 250 --metrics run.jsonl
//   build/bin/convnet_mnist_single --optimizer kfac     # the seeds' K-FAC
//   build/bin/convnet_mnist_single --optimizer kfac --worker_replicas 5
//       --cov_inv_op_strategy dedicated_workers

#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include <caf/actor_system.hpp>

#include "actors/local_trainer.hpp"
#include "actors/sync_trainer.hpp"
#include "convnet_options.hpp"
#include "example_main.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::examples;

namespace {

constexpr const char* program_name = "convnet_mnist_single";

caf::expected<training_summary> train(convnet_options& opts) {
  auto cfg = runtime_config(opts);
  if (!cfg)
    return cfg.error();
  auto data = load_data(opts, cfg->base.model);
  if (!data)
    return data.error();
  const auto& [train_set, test_set] = *data;
  caf::actor_system sys{opts};
  if (opts.runtime == "plain")
    return train_locally(sys, cfg->base, *train_set, *test_set, std::cout);
  return train_sync(sys, *cfg, train_set, test_set, std::cout);
}

} // namespace

int main(int argc, char** argv) {
  convnet_options opts;
  return summary_main(program_name, argc, argv, opts, train);
}
