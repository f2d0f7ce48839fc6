#pragma once

// The flags of the ConvNet/MLP MNIST examples (convnet_mnist_single and
// convnet_mnist_multi_tower). They live in one place so that both programs
// accept the same flags with the same defaults, and a new trainer option
// reaches both at once. Header-only: the examples need no library of
// their own.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include <caf/expected.hpp>

#include "actors/local_trainer.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/error.hpp"
#include "runtime/program_config.hpp"

namespace syncfac::examples {

/// Statistics sub-sampling by default: the first 16 examples of a batch
/// and 4 of a conv layer's output locations per example. The estimate
/// stays unbiased and the factors' moving average over ~20 steps still
/// sees hundreds of rows per step's worth; on Fashion-MNIST it reaches 88%
/// test accuracy in the same ~400 steps as 32 examples and 16 locations
/// (docs/benchmarks.md) at a third of the statistics' cost. The full
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

struct convnet_options : program_config {
  std::string data_dir = default_mnist_dir;
  bool fake_data = false;
  int64_t num_epochs = 2;
  int64_t steps = 0;
  int64_t batch_size = 128;
  /// Negative: the optimizer's default (sgd and momentum 0.01, adam 1e-3,
  /// kfac 1e-4 as the seeds).
  float learning_rate = -1;
  float momentum = 0.9f;
  std::string optimizer = "momentum";
  std::string model = "convnet";
  std::string init = "seeds";
  std::string activation_name = "tanh";
  std::string backend = "cpu";
  int threads = 0;
  uint64_t seed = 0;
  int64_t log_every = 100;
  int64_t eval_every = 0;
  bool no_final_eval = false;
  int64_t warmup = 20;
  std::string metrics;
  std::string summary;
  bool no_progress = false;
  int64_t request_timeout_ms = 60000;
  int64_t fake_train_size = 12800;
  int64_t fake_test_size = 2000;
  std::string runtime = "sync";
  int32_t worker_replicas = 1;
  int32_t replicas_to_aggregate = 1;
  int32_t ps_tasks = 1;
  int64_t num_tokens = -1;
  std::string placement = "round_robin";
  int64_t step_timeout_ms = 120000;
  float moving_average_decay = 0;
  float cov_ema_decay = 0.95f;
  float damping = 1e-3f;
  int64_t invert_every = 10;
  std::string fisher = "sampled";
  std::string inverse = "cholesky";
  float kl_clip = 0;
  int64_t stats_examples = -1;
  int64_t stats_locations = -1;
  std::string kfac_momentum = "adam";
  int64_t min_cov_updates = 1;
  std::string cov_inv_op_strategy = "chief_worker";
  int32_t covariance_actors = 1;
  int32_t inverse_actors = 1;
  std::string kfac_placement = "round_robin";

  explicit convnet_options(convnet_devices devices = convnet_devices::one) {
    bool towers = devices == convnet_devices::towers;
    opt_group{custom_options_, "global"}
      .add(data_dir, "data_dir", "directory of the MNIST-format IDX files")
      .add(fake_data, "fake_data", "train on a deterministic synthetic set")
      .add(num_epochs, "num_epochs", "passes over the training set")
      .add(steps, "steps", "training steps (overrides num_epochs if > 0)")
      .add(batch_size, "batch_size",
           towers ? "examples per step, split across the towers"
                  : "examples per step")
      .add(learning_rate, "learning_rate",
           "optimizer learning rate (default: sgd/momentum 0.01, adam 0.001, "
           "kfac 0.0001)")
      .add(momentum, "momentum", "momentum coefficient")
      .add(optimizer, "optimizer", "sgd, momentum, adam or kfac")
      .add(model, "model", "convnet or mlp")
      .add(init, "init", "weight init: seeds, glorot or he")
      .add(activation_name, "activation",
           "MLP hidden activation: tanh, sigmoid, relu")
      .add(backend, "backend",
           towers ? "compute backend of the towers"
                  : "compute backend of the device actor")
      .add(threads, "threads",
           towers ? "compute threads in all (0: all cores), split across "
                    "the towers"
                  : "compute threads (0: all cores)")
      .add(seed, "seed", "seed of initialisation and shuffling")
      .add(log_every, "log_every", "steps between log lines")
      .add(eval_every, "eval_every", "steps between test evaluations (0: end)")
      .add(no_final_eval, "no_final_eval", "skip the final evaluation")
      .add(warmup, "warmup", "steps excluded from the examples/s figure")
      .add(metrics, "metrics", "write metrics as JSON lines to this file")
      .add(summary, "summary", "write a JSON summary to this file")
      .add(no_progress, "no_progress", "no progress line on the terminal")
      .add(request_timeout_ms, "request_timeout_ms",
           towers ? "longest wait for one device (or tower) request"
                  : "longest wait for one device request")
      .add(fake_train_size, "fake_train_size", "examples of --fake_data")
      .add(fake_test_size, "fake_test_size", "test examples of --fake_data")
      .add(runtime, "runtime",
           towers ? "sync (chief, workers, PS shards); plain has no towers"
                  : "sync (chief, workers, PS shards) or plain")
      .add(worker_replicas, "worker_replicas", "N: workers")
      .add(replicas_to_aggregate, "replicas_to_aggregate",
           "R: gradients averaged per update")
      .add(ps_tasks, "ps_tasks", "P: parameter-server shards")
      .add(num_tokens, "num_tokens", "initial tokens (-1: R)")
      .add(placement, "placement", "variables on shards: round_robin, by_size")
      .add(step_timeout_ms, "step_timeout_ms",
           "longest wait for one global step")
      .add(moving_average_decay, "moving_average_decay",
           "variable moving averages (0: off); evaluations use them")
      .add(cov_ema_decay, "cov_ema_decay", "kfac: factor moving-average decay")
      .add(damping, "damping", "kfac: Tikhonov damping lambda")
      .add(invert_every, "invert_every", "kfac: steps between inversions")
      .add(fisher, "fisher", "kfac: sampled (true Fisher) or empirical")
      .add(inverse, "inverse", "kfac: cholesky or eigen")
      .add(kl_clip, "kl_clip", "kfac: KL/norm clip of the step (0: off)")
      .add(stats_examples, "stats_examples",
           towers ? "kfac: examples per batch used for statistics, shared "
                    "across the towers (0: all, -1: the default)"
                  : "kfac: examples per batch used for statistics (0: all, "
                    "-1: the default)")
      .add(stats_locations, "stats_locations",
           "kfac: conv locations per example for statistics (0: all, "
           "-1: the default)")
      .add(kfac_momentum, "kfac_momentum",
           "kfac: adam (v = mu v + g, step F^-1 v) or regular "
           "(v = mu v + F^-1 g)")
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
           "by_cost");
  }

  /// With towers, the sync trainer gives each one
  /// max(1, total_threads() / num_towers) of these.
  int total_threads() const {
    return threads > 0 ? threads
                       : static_cast<int>(std::max(
                         1u, std::thread::hardware_concurrency()));
  }

  caf::expected<local_training_config> to_training_config() const {
    local_training_config cfg;
    auto arch = parse_model_arch(model);
    if (!arch)
      return arch.error();
    cfg.model.arch = *arch;
    auto scheme = parse_init_scheme(init);
    if (!scheme)
      return scheme.error();
    cfg.model.init = *scheme;
    auto act = parse_activation(activation_name);
    if (!act)
      return act.error();
    cfg.model.hidden_activation = *act;
    auto kind = parse_optimizer_kind(optimizer);
    if (!kind)
      return kind.error();
    cfg.optimizer.kind = *kind;
    cfg.optimizer.learning_rate = learning_rate >= 0 ? learning_rate
                                                     : default_rate(*kind);
    cfg.optimizer.momentum = momentum;
    auto& kf = cfg.optimizer.kfac;
    kf.cov_ema_decay = cov_ema_decay;
    kf.damping = damping;
    kf.invert_every = invert_every;
    kf.kl_clip = kl_clip;
    kf.sampling.max_examples = stats_examples >= 0 ? stats_examples
                                                   : default_stats_examples;
    kf.sampling.max_locations = stats_locations >= 0
                                  ? stats_locations
                                  : default_stats_locations;
    kf.sampling.seed = seed;
    kf.min_cov_updates = min_cov_updates;
    auto mt = parse_kfac_momentum(kfac_momentum);
    if (!mt)
      return mt.error();
    kf.momentum = *mt;
    auto ft = parse_fisher_type(fisher);
    if (!ft)
      return ft.error();
    kf.fisher = *ft;
    auto im = parse_inverse_mode(inverse);
    if (!im)
      return im.error();
    kf.mode = *im;
    cfg.device.backend = backend;
    cfg.device.threads = total_threads();
    cfg.batch_size = batch_size;
    cfg.steps = steps;
    cfg.num_epochs = num_epochs;
    cfg.seed = seed;
    cfg.log_every = log_every;
    cfg.eval_every = eval_every;
    cfg.skip_final_eval = no_final_eval;
    cfg.warmup = warmup;
    cfg.metrics_path = metrics;
    cfg.progress = !no_progress;
    cfg.request_timeout = std::chrono::milliseconds{request_timeout_ms};
    if (auto err = cfg.validate())
      return err;
    return cfg;
  }

  /// `num_towers` is an argument rather than a flag here because only the
  /// multi-tower program offers it, and validate() must see it.
  caf::expected<sync_training_config>
  to_sync_config(int32_t num_towers = 1) const {
    auto base = to_training_config();
    if (!base)
      return base.error();
    sync_training_config cfg;
    cfg.base = std::move(*base);
    cfg.worker_replicas = worker_replicas;
    cfg.replicas_to_aggregate = replicas_to_aggregate;
    cfg.ps_tasks = ps_tasks;
    cfg.num_tokens = num_tokens;
    auto strategy = parse_placement_strategy(placement);
    if (!strategy)
      return strategy.error();
    cfg.placement = *strategy;
    cfg.step_timeout = std::chrono::milliseconds{step_timeout_ms};
    cfg.moving_average_decay = moving_average_decay;
    auto cs = parse_cov_inv_strategy(cov_inv_op_strategy);
    if (!cs)
      return cs.error();
    cfg.kfac.strategy = *cs;
    cfg.kfac.covariance_actors = covariance_actors;
    cfg.kfac.inverse_actors = inverse_actors;
    auto kp = parse_kfac_placement(kfac_placement);
    if (!kp)
      return kp.error();
    cfg.kfac.placement = *kp;
    cfg.num_towers = num_towers;
    if (auto err = cfg.validate())
      return err;
    return cfg;
  }
};

inline caf::expected<std::pair<dataset, dataset>>
load_data(const convnet_options& opts) {
  if (opts.fake_data) {
    if (opts.fake_train_size < 1 || opts.fake_test_size < 1)
      return make_error(ec::invalid_config,
                        "fake_train_size and fake_test_size must be positive");
    return std::make_pair(make_fake_dataset(opts.fake_train_size, 1),
                          make_fake_dataset(opts.fake_test_size, 2));
  }
  auto train = load_mnist(opts.data_dir, split::train);
  if (!train)
    return train.error();
  auto test = load_mnist(opts.data_dir, split::test);
  if (!test)
    return test.error();
  return std::make_pair(std::move(*train), std::move(*test));
}

} // namespace syncfac::examples
