// Multi-tower training (TF kfac/examples/convnet_mnist_multi_tower_main.py,
// convnet.train_mnist_multitower): one worker whose batch is split across
// N device actors ("towers", actors/tower_device.hpp); their gradients and
// K-FAC statistics are averaged, the variables live (by default) on one PS
// shard, and training runs through the synchronous-replica runtime.
//
//   build/bin/convnet_mnist_multi_tower --num_towers 2 --fake_data --steps 200
//   build/bin/convnet_mnist_multi_tower --num_towers 4 --threads 8
//   build/bin/convnet_mnist_multi_tower --num_towers 2 --optimizer kfac
//
// --batch_size is the worker's whole batch (split across the towers; the
// seeds instead give every tower 128 examples: --batch_size 256 with two
// towers is their setting). --threads is the total: each tower computes
// with max(1, threads / num_towers).
//
// The flags are those of convnet_mnist_single (examples/convnet_options.hpp)
// plus --num_towers: one worker and one PS shard by default, but the
// topology and K-FAC strategy flags work too, since the sync trainer gives
// every worker its own towers. Only the sync runtime has towers, so
// --runtime plain is refused.

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include <caf/actor_system.hpp>

#include "actors/sync_trainer.hpp"
#include "convnet_options.hpp"
#include "example_main.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::examples;

namespace {

constexpr const char* program_name = "convnet_mnist_multi_tower";

struct options : convnet_options {
  int32_t num_towers = 2;

  options() : convnet_options{convnet_devices::towers} {
    opt_group{custom_options_, "global"}
      .add(num_towers, "num_towers",
           "device actors each worker's batch is split across");
    limit("num_towers", at_least(1));
  }

  caf::expected<sync_training_config> to_config() const {
    // Checked first: every later message would be about the wrong thing.
    if (num_towers < 1)
      return make_error(ec::invalid_config,
                        "num_towers must be at least 1, got "
                          + std::to_string(num_towers));
    if (batch_size >= 1 && num_towers > batch_size)
      return make_error(ec::invalid_config,
                        "num_towers " + std::to_string(num_towers)
                          + " exceeds batch_size "
                          + std::to_string(batch_size)
                          + ": some towers would have no examples");
    if (runtime != "sync")
      return make_error(ec::invalid_config,
                        "runtime '" + runtime + "': only sync has towers");
    return to_sync_config(num_towers);
  }
};

/// "43/43/42": the towers' shares of a batch (actors/tower_device.hpp).
std::string split_of(int64_t batch, int32_t towers) {
  std::string out;
  for (int32_t k = 0; k < towers; ++k) {
    auto n = batch / towers + (k < batch % towers ? 1 : 0);
    out += (k > 0 ? "/" : "") + std::to_string(n);
  }
  return out;
}

caf::expected<training_summary> train(options& opts) {
  auto cfg = opts.to_config();
  if (!cfg)
    return cfg.error();
  stop_on_signals(*cfg, opts);
  auto data = load_data(opts, cfg->base.model);
  if (!data)
    return data.error();
  std::cout << program_name << ": " << opts.num_towers << " tower(s) of "
            << std::max(1, opts.total_threads() / opts.num_towers)
            << " thread(s), each batch of " << opts.batch_size
            << " split " << split_of(opts.batch_size, opts.num_towers)
            << std::endl;
  caf::actor_system sys{opts};
  return train_sync(sys, *cfg, data->first, data->second, std::cout);
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  return summary_main(program_name, argc, argv, opts, train);
}
