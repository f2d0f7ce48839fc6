#pragma once

// The flags of the ConvNet/MLP MNIST examples (convnet_mnist_single and
// convnet_mnist_multi_tower). They live in one place so that both programs
// accept the same flags with the same defaults, and a new trainer option
// reaches both at once; the flags every training example shares, the
// autoencoder's too, are in examples/training_options.hpp. Header-only:
// the examples need no library of their own.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/comma_list.hpp"
#include "training_options.hpp"

namespace syncfac::examples {

/// Statistics sub-sampling by default: the first 16 examples of a batch
/// and 4 of a conv layer's output locations per example. The estimate
/// stays unbiased and the factors' moving average over ~20 steps still
/// sees hundreds of rows per step's worth; on Fashion-MNIST it reaches 88%
/// test accuracy in the same ~400 steps as 32 examples and 16 locations
/// (docs/benchmarks-history.md) at a third of the statistics' cost. The full
/// statistics (--stats_examples 0 --stats_locations 0) cost more than the
/// gradient step itself.
inline constexpr int64_t default_stats_examples = 16;
inline constexpr int64_t default_stats_locations = 4;

inline float default_rate(optimizer_kind kind) {
  switch (kind) {
    case optimizer_kind::adam: return 1e-3f;
    case optimizer_kind::kfac: return 1e-4f;
    default: return 0.01f;
  }
}

/// Whether a worker computes on one device actor or splits its batch
/// across towers; only the help texts differ, so that --batch_size and
/// --threads say what they mean in each program.
enum class convnet_devices { one, towers };

inline training_help convnet_help(convnet_devices devices) {
  training_help help;
  if (devices == convnet_devices::towers) {
    help.batch_size = "examples per step, split across the towers";
    help.backend = "compute backend of the towers";
    help.threads = "compute threads in all (0: the CPU share), split "
                   "across the towers";
    help.request_timeout_ms = "longest wait for one device (or tower) "
                              "request";
    help.runtime = "sync (chief, workers, PS shards); plain has no towers";
    help.stats_examples = "kfac: examples per batch used for statistics, "
                          "shared across the towers (0: all, -1: the "
                          "default)";
  }
  return help;
}

/// --mlp_hidden's widths; anything but positive integers is refused,
/// naming the flag and the value.
inline caf::expected<std::vector<int64_t>>
parse_widths(const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : comma_items(text)) {
    char* end = nullptr;
    auto width = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || width < 1)
      return make_error(ec::invalid_config,
                        "--mlp_hidden '" + text + "': width '" + item
                          + "' is not a positive integer");
    out.push_back(width);
  }
  return out;
}

/// The shared flags (examples/training_options.hpp) with the defaults of
/// the seeds, plus the model, epochs, test set and the sync runtime's
/// placement and K-FAC strategy flags.
struct convnet_options : training_options {
  int64_t num_epochs = 2;
  std::string model = "convnet";
  std::string mlp_hidden = "128,64,32";
  bool no_final_eval = false;
  int64_t fake_test_size = 2000;
  int64_t num_tokens = -1;
  std::string placement = "round_robin";
  int64_t step_timeout_ms = 120000;
  float moving_average_decay = 0;
  std::string variables_to_average;
  std::string kfac_momentum = "regular";
  std::string kfac_cadence = "counted";
  int64_t min_cov_updates = 1;
  std::string cov_inv_op_strategy = "chief_worker";
  int32_t covariance_actors = 1;
  int32_t inverse_actors = 1;
  std::string kfac_placement = "round_robin";
  bool whole_pulls = false;

  explicit convnet_options(convnet_devices devices = convnet_devices::one)
    : training_options{convnet_help(devices)} {
    opt_group{custom_options_, "global"}
      .add(num_epochs, "num_epochs", "passes over the training set")
      .add(model, "model",
           "convnet or mlp: the built-in models (examples/models/ has them "
           "as files; --model_file wins)")
      .add(mlp_hidden, "mlp_hidden",
           "--model mlp: comma-separated hidden layer widths (a small one "
           "for the protocol benchmarks, bench/run_scale.sh)")
      .add(no_final_eval, "no_final_eval", "skip the final evaluation")
      .add(fake_test_size, "fake_test_size", "test examples of --fake_data")
      .add(num_tokens, "num_tokens", "initial tokens (-1: R)")
      .add(placement, "placement", "variables on shards: round_robin, by_size")
      .add(step_timeout_ms, "step_timeout_ms",
           "longest wait for one global step")
      .add(moving_average_decay, "moving_average_decay",
           "variable moving averages (0: off); evaluations use them")
      .add(variables_to_average, "variables_to_average",
           "comma-separated variables or layers (fc4) that keep moving "
           "averages (empty: all)")
      .add(kfac_momentum, "kfac_momentum",
           "kfac: regular (v = mu v + F^-1 g, the seeds') or adam "
           "(v = mu v + g, step F^-1 v)")
      .add(kfac_cadence, "kfac_cadence",
           "kfac (sync runtime): counted (skip statistics while the "
           "covariance actor is busy, invert every invert_every updates) or "
           "exact (the seeds': every step's statistics, inverses after step "
           "s with (s + 1) % invert_every == 0)")
      .add(min_cov_updates, "min_cov_updates",
           "kfac: covariance updates before the first inversion")
      .add(cov_inv_op_strategy, "cov_inv_op_strategy",
           "kfac (sync runtime): chief_worker, dedicated_workers or "
           "all_workers")
      .add(covariance_actors, "covariance_actors",
           "kfac: covariance actors the layers are placed on")
      .add(inverse_actors, "inverse_actors",
           "kfac: inverse actors the layers are placed on")
      .add(kfac_placement, "kfac_placement",
           "kfac: layers on covariance/inverse actors: round_robin or "
           "by_cost")
      .add(whole_pulls, "whole_pulls",
           "sync runtime: workers pull an embedding table whole every step "
           "instead of only the rows their next batch looks up (for "
           "comparison; docs/protocol.md, \"Row pulls\")");
    allow_values("model", {"convnet", "mlp"});
    allow_values("placement", {"round_robin", "by_size"});
    allow_values("kfac_momentum", {"adam", "regular"});
    allow_values("cov_inv_op_strategy",
                 {"chief_worker", "dedicated_workers", "all_workers"});
    allow_values("kfac_placement", {"round_robin", "by_cost"});
    limit("num_epochs", at_least(1));
    limit("fake_test_size", at_least(1));
    limit("num_tokens", at_least(-1));
    limit("step_timeout_ms", at_least(1));
    limit("moving_average_decay", decay_fraction());
    limit("min_cov_updates", at_least(1));
    limit("covariance_actors", at_least(1));
    limit("inverse_actors", at_least(1));
  }

  caf::expected<local_training_config> to_training_config() const {
    local_training_config cfg;
    if (auto err = parse_into(cfg.model.arch, parse_model_arch, model))
      return err;
    if (auto err = parse_into(cfg.model.hidden, parse_widths, mlp_hidden))
      return err;
    if (auto err = load_model_file_into(cfg.model))
      return err;
    if (auto err = fill_training_config(cfg, default_rate))
      return err;
    auto& kf = cfg.optimizer.kfac;
    if (stats_examples < 0)
      kf.sampling.max_examples = default_stats_examples;
    if (stats_locations < 0)
      kf.sampling.max_locations = default_stats_locations;
    kf.min_cov_updates = min_cov_updates;
    if (auto err = parse_into(kf.momentum, parse_kfac_momentum,
                              kfac_momentum))
      return err;
    if (auto err = parse_into(kf.cadence, parse_kfac_cadence, kfac_cadence))
      return err;
    cfg.num_epochs = num_epochs;
    cfg.skip_final_eval = no_final_eval;
    if (auto err = cfg.validate())
      return err;
    return cfg;
  }

  /// `num_towers` is an argument rather than a flag here because only the
  /// multi-tower program offers it, and validate() must see it. With
  /// towers, the sync trainer gives each one
  /// max(1, total_threads() / num_towers) threads.
  caf::expected<sync_training_config>
  to_sync_config(int32_t num_towers = 1) const {
    auto base = to_training_config();
    if (!base)
      return base.error();
    auto made = make_sync_config(std::move(*base));
    if (!made)
      return made.error();
    auto& cfg = *made;
    cfg.num_tokens = num_tokens;
    if (auto err = parse_into(cfg.placement, parse_placement_strategy,
                              placement))
      return err;
    cfg.step_timeout = std::chrono::milliseconds{step_timeout_ms};
    cfg.moving_average_decay = moving_average_decay;
    if (!variables_to_average.empty())
      cfg.variables_to_average = comma_items(variables_to_average);
    if (auto err = parse_into(cfg.kfac.strategy, parse_cov_inv_strategy,
                              cov_inv_op_strategy))
      return err;
    cfg.kfac.covariance_actors = covariance_actors;
    cfg.kfac.inverse_actors = inverse_actors;
    if (auto err = parse_into(cfg.kfac.placement, parse_kfac_placement,
                              kfac_placement))
      return err;
    cfg.num_towers = num_towers;
    cfg.whole_pulls = whole_pulls;
    if (auto err = cfg.validate())
      return err;
    return made;
  }
};

/// The training and test sets, shared by the roles that read them.
using shared_splits = std::pair<std::shared_ptr<const dataset>,
                                std::shared_ptr<const dataset>>;

/// The training and test sets of the flags, checked against `model`
/// before anything trains (runtime/model_fit.hpp).
inline caf::expected<shared_splits>
load_data(const convnet_options& opts, const model_spec& model) {
  std::pair<dataset, dataset> data;
  if (opts.fake_data) {
    if (opts.fake_train_size < 1 || opts.fake_test_size < 1)
      return make_error(ec::invalid_config,
                        "fake_train_size and fake_test_size must be positive");
    if (auto err = opts.check_fake_sizes(opts.fake_test_size))
      return err;
    data = std::make_pair(make_fake_dataset(opts.fake_train_size, 1),
                          make_fake_dataset(opts.fake_test_size, 2));
  } else {
    auto train = opts.load_split(split::train, model);
    if (!train)
      return train.error();
    auto test = opts.load_split(split::test, model);
    if (!test)
      return test.error();
    data = std::make_pair(std::move(*train), std::move(*test));
  }
  for (const auto* set : {&data.first, &data.second})
    if (auto err = check_data_fits(model, *set))
      return err;
  return std::make_pair(
    std::make_shared<const dataset>(std::move(data.first)),
    std::make_shared<const dataset>(std::move(data.second)));
}

} // namespace syncfac::examples
