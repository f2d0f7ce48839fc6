// A user's own model, defined in code and trained by syncfac: a small
// ConvNet of its own shape (two 3x3 convolutions, a hidden dense layer;
// none of the built-ins), built with model_builder and handed to the
// synchronous-replica runtime (2 workers, 2 PS shards) as
// described_spec(desc). K-FAC registers its conv2d and dense layers by
// itself (--optimizer kfac).
//
//   own_model                            # synthetic data, 300 steps
//   own_model --data_dir /usr/share/datasets/fashion-mnist --steps 600
//   own_model --optimizer kfac --learning_rate 0.0003

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/config_option_adder.hpp>

#include "actors/stop_on_signal.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/allocator.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/base/error.hpp"
#include "runtime/exit_codes.hpp"
#include "runtime/model_builder.hpp"
#include "runtime/model_fit.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;

namespace {

struct options : program_config {
  std::string data_dir;
  int64_t steps = 300;
  std::string optimizer = "adam";
  float learning_rate = 0.001f;
  uint64_t seed = 1;
  int32_t workers = 2;
  int32_t ps_tasks = 2;

  options() {
    caf::config_option_adder{custom_options_, "global"}
      .add(data_dir, "data_dir",
           "MNIST-format IDX files (empty: the synthetic set)")
      .add(steps, "steps", "training steps")
      .add(optimizer, "optimizer", "sgd, momentum, adam or kfac")
      .add(learning_rate, "learning_rate", "learning rate")
      .add(seed, "seed", "initialisation and shuffling")
      .add(workers, "workers", "workers (R = all of them)")
      .add(ps_tasks, "ps_tasks", "parameter-server shards");
    limit("steps", at_least(1));
    limit("learning_rate", positive());
    limit("seed", at_least(0));
    limit("workers", at_least(1));
    limit("ps_tasks", at_least(1));
  }
};

/// The user's model: what a model file would say, in code.
caf::expected<model_description> my_model() {
  conv2d_options same;
  same.pad = padding::same;
  same.init = "he";
  dense_options hidden;
  hidden.act = activation::relu;
  hidden.name = "hidden";
  return model_builder{"my_convnet", {28, 28, 1}}
    .init("glorot")
    .conv2d(8, 3, same)
    .relu()
    .max_pool(2)
    .conv2d(16, 3, same)
    .relu()
    .max_pool(2)
    .flatten()
    .dense(32, hidden)
    .dense(10)
    .loss(loss_kind::softmax_cross_entropy)
    .build();
}

int fail(const caf::error& err) {
  std::cerr << "own_model: " << render(err) << "\n";
  return EXIT_FAILURE;
}

} // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  options opts;
  if (auto err = opts.parse_cli(argc, argv))
    return fail(err);
  if (opts.help_printed)
    return EXIT_SUCCESS;
  auto desc = my_model();
  if (!desc)
    return fail(desc.error());
  sync_training_config cfg;
  cfg.base.model = described_spec(std::move(*desc));
  auto kind = parse_optimizer_kind(opts.optimizer);
  if (!kind)
    return fail(kind.error());
  cfg.base.optimizer.kind = *kind;
  cfg.base.optimizer.learning_rate = opts.learning_rate;
  cfg.base.batch_size = 64;
  cfg.base.steps = opts.steps;
  cfg.base.seed = opts.seed;
  cfg.base.log_every = 50;
  cfg.base.progress = false;
  cfg.base.device.threads = 1;
  cfg.worker_replicas = opts.workers;
  cfg.replicas_to_aggregate = opts.workers;
  cfg.ps_tasks = opts.ps_tasks;
  if (auto err = cfg.validate())
    return fail(err);
  // SIGTERM, SIGINT or SIGHUP (a scheduler's preemption): the run ends
  // after the global step in flight, exit code 143 (docs/distributed.md,
  // "Preemption"); this run keeps no checkpoints, so the watcher says so.
  auto stop = stop_signal_watcher::install("own_model");
  if (!stop)
    return fail(stop.error());
  stop_on_signal(cfg, **stop);
  (*stop)->say_on_stop(what_a_stop_loses("", false));
  std::shared_ptr<const dataset> train;
  std::shared_ptr<const dataset> test;
  if (opts.data_dir.empty()) {
    train = std::make_shared<const dataset>(make_fake_dataset(6400, 1));
    test = std::make_shared<const dataset>(make_fake_dataset(1000, 2));
  } else {
    auto tr = load_mnist(opts.data_dir, split::train);
    if (!tr)
      return fail(tr.error());
    auto te = load_mnist(opts.data_dir, split::test);
    if (!te)
      return fail(te.error());
    train = std::make_shared<const dataset>(std::move(*tr));
    test = std::make_shared<const dataset>(std::move(*te));
  }
  for (const auto& set : {train, test})
    if (auto err = check_data_fits(cfg.base.model, *set))
      return fail(err);
  caf::actor_system sys{opts};
  auto summary = train_sync(sys, cfg, train, test, std::cout);
  if (!summary)
    return fail(summary.error());
  std::cout << "own_model: test accuracy " << summary->test.accuracy()
            << " after " << summary->global_step << " steps\n"
            << "SUMMARY " << summary->to_json().str() << std::endl;
  if (!summary->preempted.empty()) {
    std::cerr << "own_model: "
              << preempted_line(*summary, "", false) << std::endl;
    return exit_codes::preempted;
  }
  return EXIT_SUCCESS;
}
