// Multi-tower training (TF kfac/examples/convnet_mnist_multi_tower_main.py,
// convnet.train_mnist_multitower): one worker whose batch is split across
// N device actors ("towers", actors/tower_device.hpp); their gradients and
// K-FAC statistics are averaged, the variables live on one PS shard, and
// training runs through the synchronous-replica runtime.
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
// The flags are those of convnet_mnist_single without its topology flags
// (one worker, one PS shard here); they are duplicated rather than shared
// because that program's flags are being reworked.

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>

#include "actors/local_trainer.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/error.hpp"
#include "runtime/program_config.hpp"

using namespace syncfac;

namespace {

constexpr const char* program_name = "convnet_mnist_multi_tower";

/// K-FAC statistics sub-sampling by default (as convnet_mnist_single): the
/// first 32 examples of a batch, shared across the towers, and 16 conv
/// output locations per example; the full statistics cost more than the
/// gradient step itself.
constexpr int64_t default_stats_examples = 32;
constexpr int64_t default_stats_locations = 16;

float default_rate(optimizer_kind kind) {
  switch (kind) {
    case optimizer_kind::adam: return 1e-3f;
    case optimizer_kind::kfac: return 1e-4f;
    default: return 0.01f;
  }
}

struct options : program_config {
  int32_t num_towers = 2;
  std::string data_dir = default_mnist_dir;
  bool fake_data = false;
  int64_t num_epochs = 2;
  int64_t steps = 0;
  int64_t batch_size = 128;
  /// Negative: the optimizer's default.
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
  int64_t step_timeout_ms = 120000;
  int64_t fake_train_size = 12800;
  int64_t fake_test_size = 2000;
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

  options() {
    opt_group{custom_options_, "global"}
      .add(num_towers, "num_towers",
           "device actors the worker's batch is split across")
      .add(data_dir, "data_dir", "directory of the MNIST-format IDX files")
      .add(fake_data, "fake_data", "train on a deterministic synthetic set")
      .add(num_epochs, "num_epochs", "passes over the training set")
      .add(steps, "steps", "training steps (overrides num_epochs if > 0)")
      .add(batch_size, "batch_size",
           "examples per step, split across the towers")
      .add(learning_rate, "learning_rate",
           "optimizer learning rate (default: sgd/momentum 0.01, adam 0.001, "
           "kfac 0.0001)")
      .add(momentum, "momentum", "momentum coefficient")
      .add(optimizer, "optimizer", "sgd, momentum, adam or kfac")
      .add(model, "model", "convnet or mlp")
      .add(init, "init", "weight init: seeds, glorot or he")
      .add(activation_name, "activation",
           "MLP hidden activation: tanh, sigmoid, relu")
      .add(backend, "backend", "compute backend of the towers")
      .add(threads, "threads",
           "compute threads in all (0: all cores), split across the towers")
      .add(seed, "seed", "seed of initialisation and shuffling")
      .add(log_every, "log_every", "steps between log lines")
      .add(eval_every, "eval_every", "steps between test evaluations (0: end)")
      .add(no_final_eval, "no_final_eval", "skip the final evaluation")
      .add(warmup, "warmup", "steps excluded from the examples/s figure")
      .add(metrics, "metrics", "write metrics as JSON lines to this file")
      .add(summary, "summary", "write a JSON summary to this file")
      .add(no_progress, "no_progress", "no progress line on the terminal")
      .add(request_timeout_ms, "request_timeout_ms",
           "longest wait for one device (or tower) request")
      .add(step_timeout_ms, "step_timeout_ms",
           "longest wait for one global step")
      .add(fake_train_size, "fake_train_size", "examples of --fake_data")
      .add(fake_test_size, "fake_test_size", "test examples of --fake_data")
      .add(cov_ema_decay, "cov_ema_decay", "kfac: factor moving-average decay")
      .add(damping, "damping", "kfac: Tikhonov damping lambda")
      .add(invert_every, "invert_every", "kfac: steps between inversions")
      .add(fisher, "fisher", "kfac: sampled (true Fisher) or empirical")
      .add(inverse, "inverse", "kfac: cholesky or eigen")
      .add(kl_clip, "kl_clip", "kfac: KL/norm clip of the step (0: off)")
      .add(stats_examples, "stats_examples",
           "kfac: examples per batch used for statistics, shared across the "
           "towers (0: all, -1: the default)")
      .add(stats_locations, "stats_locations",
           "kfac: conv locations per example for statistics (0: all, "
           "-1: the default)")
      .add(kfac_momentum, "kfac_momentum",
           "kfac: adam (v = mu v + g, step F^-1 v) or regular "
           "(v = mu v + F^-1 g)")
      .add(min_cov_updates, "min_cov_updates",
           "kfac: covariance updates before the first inversion");
  }

  int total_threads() const {
    return threads > 0 ? threads
                       : static_cast<int>(std::max(
                         1u, std::thread::hardware_concurrency()));
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
    local_training_config base;
    auto arch = parse_model_arch(model);
    if (!arch)
      return arch.error();
    base.model.arch = *arch;
    auto scheme = parse_init_scheme(init);
    if (!scheme)
      return scheme.error();
    base.model.init = *scheme;
    auto act = parse_activation(activation_name);
    if (!act)
      return act.error();
    base.model.hidden_activation = *act;
    auto kind = parse_optimizer_kind(optimizer);
    if (!kind)
      return kind.error();
    base.optimizer.kind = *kind;
    base.optimizer.learning_rate = learning_rate >= 0 ? learning_rate
                                                      : default_rate(*kind);
    base.optimizer.momentum = momentum;
    auto& kf = base.optimizer.kfac;
    kf.cov_ema_decay = cov_ema_decay;
    kf.damping = damping;
    kf.invert_every = invert_every;
    kf.kl_clip = kl_clip;
    kf.min_cov_updates = min_cov_updates;
    kf.sampling.max_examples = stats_examples >= 0 ? stats_examples
                                                   : default_stats_examples;
    kf.sampling.max_locations = stats_locations >= 0
                                  ? stats_locations
                                  : default_stats_locations;
    kf.sampling.seed = seed;
    auto ft = parse_fisher_type(fisher);
    if (!ft)
      return ft.error();
    kf.fisher = *ft;
    auto im = parse_inverse_mode(inverse);
    if (!im)
      return im.error();
    kf.mode = *im;
    auto mt = parse_kfac_momentum(kfac_momentum);
    if (!mt)
      return mt.error();
    kf.momentum = *mt;
    base.device.backend = backend;
    // The total: the sync trainer gives each of the worker's towers
    // max(1, threads / num_towers) of them.
    base.device.threads = total_threads();
    base.batch_size = batch_size;
    base.steps = steps;
    base.num_epochs = num_epochs;
    base.seed = seed;
    base.log_every = log_every;
    base.eval_every = eval_every;
    base.skip_final_eval = no_final_eval;
    base.warmup = warmup;
    base.metrics_path = metrics;
    base.progress = !no_progress;
    base.request_timeout = std::chrono::milliseconds{request_timeout_ms};
    sync_training_config cfg;
    cfg.base = std::move(base);
    cfg.worker_replicas = 1;
    cfg.replicas_to_aggregate = 1;
    cfg.ps_tasks = 1;
    cfg.num_towers = num_towers;
    cfg.step_timeout = std::chrono::milliseconds{step_timeout_ms};
    if (auto err = cfg.validate())
      return err;
    return cfg;
  }
};

caf::expected<std::pair<dataset, dataset>> load_data(const options& opts) {
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
  auto data = load_data(opts);
  if (!data)
    return data.error();
  auto train_set = std::make_shared<const dataset>(std::move(data->first));
  auto test_set = std::make_shared<const dataset>(std::move(data->second));
  std::cout << program_name << ": " << opts.num_towers << " tower(s) of "
            << std::max(1, opts.total_threads() / opts.num_towers)
            << " thread(s), each batch of " << opts.batch_size
            << " split " << split_of(opts.batch_size, opts.num_towers)
            << std::endl;
  caf::actor_system sys{opts};
  return train_sync(sys, *cfg, train_set, test_set, std::cout);
}

int run(options& opts) {
  auto summary = train(opts);
  if (!summary) {
    std::cerr << program_name << ": " << render(summary.error()) << "\n";
    return EXIT_FAILURE;
  }
  std::cout << "examples/sec (training steps only, after " << opts.warmup
            << " warm-up steps): " << summary->examples_per_s << "\n"
            << "peak RSS: " << summary->peak_rss_mib << " MiB\n"
            << "SUMMARY " << summary->to_json().str() << std::endl;
  if (!opts.summary.empty()) {
    std::ofstream out{opts.summary, std::ios::trunc};
    out << summary->to_json().str() << "\n";
    if (!out.flush()) {
      std::cerr << program_name << ": cannot write summary file '"
                << opts.summary << "'\n";
      return EXIT_FAILURE;
    }
  }
  return EXIT_SUCCESS;
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  if (auto err = opts.parse_cli(argc, argv)) {
    std::cerr << program_name << ": " << render(err) << "\n";
    return EXIT_FAILURE;
  }
  if (opts.help_printed)
    return EXIT_SUCCESS;
  return run(opts);
}
