#pragma once

// The flags every MNIST training example shares (convnet_mnist_single,
// convnet_mnist_multi_tower through examples/convnet_options.hpp, and
// autoencoder_mnist): data, steps and batch, the optimizer and its K-FAC
// flags, threads, seed, logging, metrics and summary, the runtime and the
// sync topology, with their conversion into local_training_config and
// sync_training_config. A program derives from training_options, registers
// its own flags, sets its own defaults in its constructor (the help texts
// print no defaults, so assigning after registration is fine) and passes
// the help texts that differ. Header-only: the examples need no library of
// their own.

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include <caf/error.hpp>

#include "actors/local_trainer.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "runtime/host_limits.hpp"
#include "runtime/model_file.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/cpu_share.hpp"
#include "runtime/stop_signals.hpp"
#include "runtime/sync/replica_counts.hpp"

namespace syncfac::examples {

/// `out` set to `parse(text)`, or the parser's refusal: a flag's value read
/// into the configuration (an enumeration by its name, a list).
template <class T, class Parse>
caf::error parse_into(T& out, Parse parse, const std::string& text) {
  auto value = parse(text);
  if (!value)
    return value.error();
  out = std::move(*value);
  return caf::none;
}

/// The help texts of the shared flags that differ between the programs;
/// the defaults are those of convnet_mnist_single.
struct training_help {
  const char* steps = "training steps (overrides num_epochs if > 0)";
  const char* batch_size = "examples per step";
  const char* learning_rate = "optimizer learning rate (default: sgd/momentum "
                              "0.01, adam 0.001, kfac 0.0001)";
  const char* momentum = "momentum coefficient";
  const char* init = "weight init: seeds, glorot or he";
  const char* activation = "MLP hidden activation: tanh, sigmoid, relu";
  const char* backend = "compute backend of the device actor";
  const char* threads = "compute threads (0: the CPU share: affinity, "
                        "cgroup cpu.max, SLURM_CPUS_PER_TASK, "
                        "OMP_NUM_THREADS)";
  const char* seed = "seed of initialisation and shuffling";
  const char* eval_every = "steps between test evaluations (0: end)";
  const char* request_timeout_ms = "longest wait for one device request";
  const char* runtime = "sync (chief, workers, PS shards) or plain";
  const char* worker_replicas = "N: workers (0: R, or 1)";
  const char* replicas_to_aggregate = "R: gradients averaged per update (0: "
                                      "N; under kfac ceil(0.6 N))";
  const char* ps_tasks = "P: parameter-server shards";
  const char* stats_examples = "kfac: examples per batch used for statistics "
                               "(0: all, -1: the default)";
  const char* stats_locations = "kfac: conv locations per example for "
                                "statistics (0: all, -1: the default)";
};

struct training_options : program_config {
  std::string data_dir = default_mnist_dir;
  /// A NumPy .npz file (x_train, y_train, x_test, y_test); wins over
  /// --data_dir.
  std::string data;
  bool fake_data = false;
  int64_t steps = 0;
  int64_t batch_size = 128;
  /// Negative: the program's default rate of the optimizer.
  float learning_rate = -1;
  float momentum = 0.9f;
  bool nesterov = false;
  std::string optimizer = "momentum";
  /// The learning-rate schedule (runtime/lr_schedule.hpp).
  std::string lr_schedule = "constant";
  int64_t lr_warmup_steps = 0;
  std::string lr_boundaries;
  float lr_decay_rate = 0.1f;
  int64_t lr_decay_steps = 0;
  float lr_end_factor = 0.0f;
  float lr_power = 1.0f;
  float weight_decay = 0.0f;
  float l2_penalty = 0.0f;
  float clip_norm = 0.0f;
  float label_smoothing = 0.0f;
  std::string init = "seeds";
  std::string activation_name = "tanh";
  std::string backend = "cpu";
  /// cpu, gpu:N or auto; empty: --backend (kernels/backend_factory.hpp).
  std::string device;
  int threads = 0;
  /// CAF's scheduler threads (0: from the CPU share).
  int caf_threads = 0;
  /// The CPU kernels' instruction-set level: auto (the best this CPU has)
  /// or one of kernels/cpu/isa.hpp's built_isas(); example_main selects it.
  std::string isa = "auto";
  uint64_t seed = 0;
  int64_t log_every = 100;
  int64_t eval_every = 0;
  int64_t warmup = 20;
  std::string metrics;
  std::string logdir;
  int64_t metrics_port = 0;
  std::string metrics_bind = "127.0.0.1";
  std::string summary;
  bool no_progress = false;
  int64_t request_timeout_ms = 60000;
  int64_t fake_train_size = 12800;
  std::string runtime = "sync";
  /// 0: not given; resolve_replica_counts fills it in.
  int32_t worker_replicas = 0;
  /// 0: not given; resolve_replica_counts fills it in.
  int32_t replicas_to_aggregate = 0;
  int32_t ps_tasks = 1;
  float cov_ema_decay = 0.95f;
  float damping = 1e-3f;
  int64_t invert_every = 10;
  std::string fisher = "sampled";
  std::string inverse = "cholesky";
  std::string kfac_precision = "fp32";
  float kl_clip = 0;
  int64_t stats_examples = -1;
  int64_t stats_locations = -1;
  /// A model description (docs/models.md); wins over --model.
  std::string model_file;
  /// A model given in code rather than by flag (the Python module's
  /// syncfac.train, docs/python.md); wins over --model_file and --model.
  /// Not a flag.
  std::shared_ptr<const model_description> given_model;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int32_t keep_checkpoints = 3;
  /// The signal besides SIGTERM, SIGINT and SIGHUP that stops the run
  /// without loss (runtime/stop_signals.hpp).
  std::string requeue_signal = "TERM";
  /// The program's stop signals while it runs (examples/example_main.hpp
  /// installs them); not a flag.
  stop_signal_watcher* stop_signals = nullptr;

  /// The threads of the run: --threads and --caf_threads where given,
  /// else planned on the CPU share this process was given
  /// (runtime/cpu_share.hpp; `ignored`: environment values that are no
  /// count, for the log).
  thread_plan threads_in_use(std::string* ignored = nullptr) const {
    return plan_threads(resolve_cpu_budget(read_cpu_share(), ignored),
                        threads, caf_threads);
  }

  /// The compute threads: --threads, or the CPU share's.
  int total_threads() const {
    return threads_in_use().compute;
  }

  /// --fake_data's sets (--fake_train_size and `test_examples`) against
  /// the memory this process may use: refused naming the flag and the
  /// figure before any example is made (docs/robustness.md).
  caf::error check_fake_sizes(int64_t test_examples) const {
    if (!fake_data)
      return caf::none;
    if (fake_train_size < 1 || test_examples < 0)
      return make_error(ec::invalid_config,
                        "--fake_train_size must be positive, got "
                          + std::to_string(fake_train_size));
    // An example: 28 x 28 floats and its label (make_fake_dataset).
    constexpr uint64_t example_bytes = 28 * 28 * sizeof(float)
                                       + sizeof(int32_t);
    auto count = saturating_add(static_cast<uint64_t>(fake_train_size),
                                static_cast<uint64_t>(test_examples));
    return check_memory(saturating_mul(count, example_bytes),
                        "--fake_train_size "
                          + std::to_string(fake_train_size)
                          + (test_examples > 0
                               ? " and " + std::to_string(test_examples)
                                   + " test examples"
                               : std::string{}),
                        usable_memory());
  }

  /// The `which` split of --data (a .npz file, its integers read as
  /// `model` takes them) or else --data_dir.
  caf::expected<dataset> load_split(split which,
                                    const model_spec& model) const {
    if (!data.empty())
      return load_npz(data, which, npz_inputs_for(model));
    return load_mnist(data_dir, which);
  }

protected:
  explicit training_options(const training_help& help = {}) {
    opt_group{custom_options_, "global"}
      .add(data_dir, "data_dir", "directory of the MNIST-format IDX files")
      .add(data, "data",
           "a NumPy .npz file with x_train, y_train, x_test, y_test (as "
           "Keras's mnist.npz; docs/models.md); instead of --data_dir")
      .add(fake_data, "fake_data", "train on a deterministic synthetic set")
      .add(fake_data, "use_fake_data", "the seeds' spelling of --fake_data")
      .add(steps, "steps", help.steps)
      .add(batch_size, "batch_size", help.batch_size)
      .add(learning_rate, "learning_rate", help.learning_rate)
      .add(momentum, "momentum", help.momentum)
      .add(nesterov, "nesterov",
           "momentum: Nesterov's momentum (TF's use_nesterov), the step "
           "g + momentum v")
      .add(optimizer, "optimizer", "sgd, momentum, adam or kfac")
      .add(lr_schedule, "lr_schedule",
           "the learning rate over the global steps: constant, step "
           "(--lr_boundaries, --lr_decay_rate), cosine or polynomial "
           "(--lr_decay_steps, --lr_end_factor, --lr_power); computed by "
           "the PS shards from the global step (docs/models.md)")
      .add(lr_warmup_steps, "lr_warmup_steps",
           "the rate rises linearly over this many first global steps")
      .add(lr_warmup_steps, "warmup_steps",
           "--lr_warmup_steps (not --warmup, the steps left out of the "
           "timing)")
      .add(lr_boundaries, "lr_boundaries",
           "step schedule: global steps, comma-separated, from which the "
           "rate is multiplied by --lr_decay_rate once more")
      .add(lr_decay_rate, "lr_decay_rate", "step schedule: the factor")
      .add(lr_decay_steps, "lr_decay_steps",
           "cosine and polynomial schedules: the global step where the "
           "decay ends (warm-up included)")
      .add(lr_end_factor, "lr_end_factor",
           "cosine and polynomial schedules: the final rate as a fraction "
           "of --learning_rate")
      .add(lr_power, "lr_power", "polynomial schedule: the power")
      .add(weight_decay, "weight_decay",
           "decoupled weight decay: weights shrink by rate x this before "
           "each update, outside the gradient and K-FAC (biases do not)")
      .add(label_smoothing, "label_smoothing",
           "the training target: (1 - e) one-hot + e / classes (softmax "
           "cross-entropy; the reported losses stay unsmoothed)")
      .add(l2_penalty, "l2_penalty",
           "the L2 form: this x weight added to the averaged gradient, "
           "before K-FAC's preconditioning (biases not)")
      .add(clip_norm, "clip_norm",
           "clip the averaged gradient to this global norm (over every "
           "variable on every PS shard), before the L2 penalty and K-FAC's "
           "preconditioning; 0: off")
      .add(init, "init", help.init)
      .add(activation_name, "activation", help.activation)
      .add(backend, "backend", help.backend)
      .add(device, "device", "cpu, gpu:N or auto (a GPU if present); "
                             "overrides --backend")
      .add(threads, "threads", help.threads)
      .add(caf_threads, "caf_threads",
           "CAF's scheduler threads, counted in the CPU share (0: a "
           "quarter of it, 2 to 4, at most the share)")
      .add(isa, "isa", "CPU kernels' instruction set: auto, avx2, avx512 "
                       "(refused where the CPU lacks it)")
      .add(seed, "seed", help.seed)
      .add(log_every, "log_every", "steps between log lines")
      .add(eval_every, "eval_every", help.eval_every)
      .add(eval_every, "eval_every_steps",
           "--eval_every, spelt as the evaluator's (syncfac_evaluator)")
      .add(warmup, "warmup", "steps excluded from the examples/s figure")
      .add(metrics, "metrics", "write metrics as JSON lines to this file")
      .add(logdir, "logdir", "write TensorBoard event files into this "
                             "directory")
      .add(metrics_port, "metrics_port",
           "serve Prometheus /metrics (and the chief's status page /) on "
           "this port (0: off; in a cluster task k listens on this + k)")
      .add(metrics_bind, "metrics_bind",
           "address the metrics server listens on")
      .add(summary, "summary", "write a JSON summary to this file")
      .add(no_progress, "no_progress", "no progress line on the terminal")
      .add(request_timeout_ms, "request_timeout_ms", help.request_timeout_ms)
      .add(fake_train_size, "fake_train_size", "examples of --fake_data")
      .add(runtime, "runtime", help.runtime)
      .add(worker_replicas, "worker_replicas", help.worker_replicas)
      .add(replicas_to_aggregate, "replicas_to_aggregate",
           help.replicas_to_aggregate)
      .add(ps_tasks, "ps_tasks", help.ps_tasks)
      .add(cov_ema_decay, "cov_ema_decay", "kfac: factor moving-average decay")
      .add(damping, "damping", "kfac: Tikhonov damping lambda")
      .add(invert_every, "invert_every", "kfac: steps between inversions")
      .add(fisher, "fisher", "kfac: sampled (true Fisher) or empirical")
      .add(inverse, "inverse",
           "kfac: cholesky, eigen or explicit (cholesky's damping, the "
           "inverses formed: faster for layers with many outputs)")
      .add(kfac_precision, "kfac_precision",
           "kfac: fp32 or bf16 (the preconditioning products in bfloat16 "
           "on the CPU's AMX tiles or AVX512-BF16; with --inverse explicit)")
      .add(kl_clip, "kl_clip", "kfac: KL/norm clip of the step (0: off)")
      .add(stats_examples, "stats_examples", help.stats_examples)
      .add(stats_locations, "stats_locations", help.stats_locations)
      .add(model_file, "model_file",
           "train the model this JSON file describes (docs/models.md; "
           "instead of the program's built-in model)")
      .add(checkpoint_dir, "checkpoint_dir",
           "sync: checkpoint into this directory and resume from its "
           "newest good checkpoint")
      .add(checkpoint_every, "checkpoint_every",
           "sync: global steps between checkpoints (0: only at the end)")
      .add(keep_checkpoints, "keep_checkpoints",
           "sync: checkpoints kept in --checkpoint_dir")
      .add(requeue_signal, "requeue_signal",
           "the scheduler's stop signal besides TERM, INT and HUP: the "
           "first ends the run after the step in flight, checkpointed; "
           "exit code 143");
    allow_values("optimizer", {"sgd", "momentum", "adam", "kfac"});
    allow_values("lr_schedule", {"constant", "step", "cosine", "polynomial"});
    allow_values("init", {"seeds", "glorot", "he", "sparse"});
    allow_values("activation", {"tanh", "sigmoid", "relu"});
    allow_values("runtime", {"sync", "plain"});
    allow_values("fisher", {"sampled", "empirical"});
    allow_values("inverse", {"cholesky", "eigen", "explicit"});
    allow_values("kfac_precision", {"fp32", "bf16"});
    allow_values("requeue_signal", {std::begin(requeue_signal_names),
                                    std::end(requeue_signal_names)});
    // Every numeric flag's range: --help shows it, a value outside it is
    // refused naming the flag (actors/program_config.hpp).
    limit("steps", at_least(0));
    limit("batch_size", at_least(1));
    limit("learning_rate", positive());
    limit("momentum", decay_fraction());
    limit("lr_warmup_steps", at_least(0));
    limit("warmup_steps", at_least(0));
    limit("lr_decay_steps", at_least(0));
    limit("lr_decay_rate", positive());  // <= 1 checked by the schedule
    limit("lr_end_factor", between(0, 1));
    limit("lr_power", positive());
    limit("weight_decay", at_least(0));
    limit("l2_penalty", at_least(0));
    limit("clip_norm", at_least(0));
    limit("label_smoothing", decay_fraction());
    limit("threads", at_least(0));
    limit("caf_threads", at_least(0));
    limit("seed", at_least(0));
    limit("log_every", at_least(1));
    limit("eval_every", at_least(0));
    limit("eval_every_steps", at_least(0));
    limit("warmup", at_least(0));
    limit("metrics_port", between(0, 65535));
    limit("request_timeout_ms", at_least(1));
    limit("fake_train_size", at_least(1));
    limit("worker_replicas", at_least(0));
    limit("replicas_to_aggregate", at_least(0));
    limit("ps_tasks", at_least(1));
    limit("cov_ema_decay", decay_fraction());
    limit("damping", positive());
    limit("invert_every", at_least(1));
    limit("kl_clip", at_least(0));
    limit("stats_examples", at_least(-1));
    limit("stats_locations", at_least(-1));
    limit("checkpoint_every", at_least(0));
    limit("keep_checkpoints", at_least(1));
  }

  /// The model of --model_file, if given, into `model` (which keeps the
  /// program's built-in one otherwise). Bad descriptions fail here, before
  /// data is read or anything written.
  caf::error load_model_file_into(model_spec& model) const {
    if (given_model != nullptr) {
      model = described_spec(*given_model);
      return caf::none;
    }
    if (model_file.empty())
      return caf::none;
    auto desc = load_model_file(model_file);
    if (!desc)
      return desc.error();
    model = described_spec(std::move(*desc));
    return caf::none;
  }

  /// Fills in the shared part of a local_training_config: init and
  /// activation of `cfg.model` (the program sets the rest of the model),
  /// the optimizer (`rate` gives the learning rate when --learning_rate is
  /// negative), K-FAC with the statistics sub-sampling as given, device,
  /// steps and logging. The caller validates.
  caf::error fill_training_config(local_training_config& cfg,
                                  float (*rate)(optimizer_kind)) const {
    if (auto err = parse_into(cfg.model.init, parse_init_scheme, init))
      return err;
    if (auto err = parse_into(cfg.model.hidden_activation, parse_activation,
                              activation_name))
      return err;
    cfg.model.label_smoothing = label_smoothing;
    if (auto err = parse_into(cfg.optimizer.kind, parse_optimizer_kind,
                              optimizer))
      return err;
    cfg.optimizer.learning_rate = learning_rate >= 0
                                    ? learning_rate
                                    : rate(cfg.optimizer.kind);
    cfg.optimizer.momentum = momentum;
    cfg.optimizer.nesterov = nesterov;
    auto& sched = cfg.optimizer.schedule;
    if (auto err = parse_into(sched.kind, parse_lr_schedule_kind, lr_schedule))
      return err;
    sched.warmup_steps = lr_warmup_steps;
    if (auto err = parse_into(sched.boundaries, parse_lr_boundaries,
                              lr_boundaries))
      return err;
    sched.decay_rate = lr_decay_rate;
    sched.decay_steps = lr_decay_steps;
    sched.end_factor = lr_end_factor;
    sched.power = lr_power;
    cfg.optimizer.weight_decay = weight_decay;
    cfg.optimizer.l2_penalty = l2_penalty;
    cfg.optimizer.clip_norm = clip_norm;
    auto& kf = cfg.optimizer.kfac;
    kf.cov_ema_decay = cov_ema_decay;
    kf.damping = damping;
    kf.invert_every = invert_every;
    kf.kl_clip = kl_clip;
    kf.sampling.max_examples = stats_examples;
    kf.sampling.max_locations = stats_locations;
    kf.sampling.seed = seed;
    if (auto err = parse_into(kf.fisher, parse_fisher_type, fisher))
      return err;
    if (auto err = parse_into(kf.mode, parse_inverse_mode, inverse))
      return err;
    if (auto err = parse_into(kf.precision, parse_product_precision,
                              kfac_precision))
      return err;
    cfg.device.backend = device.empty() ? backend : device;
    if (kf.precision == product_precision::bf16
        && cfg.optimizer.kind == optimizer_kind::kfac) {
      // Refused here, before data is read, rather than at the first step;
      // a mistake in the flags is named before what the machine lacks, so
      // that the same flags get the same answer on every CPU.
      if (auto err = kf.validate())
        return err;
      if (cfg.device.backend != "cpu")
        return make_error(ec::invalid_config,
                          "--kfac_precision bf16: its products run on the "
                          "CPU (AMX or AVX512-BF16), and the device is "
                            + in_quotes(cfg.device.backend));
      // --isa takes effect after the flags are read: a level below avx512
      // is refused here by name, as the kernels would refuse it later.
      if (isa != "auto" && isa != "avx512")
        return make_error(ec::unavailable,
                          "--kfac_precision bf16: bfloat16 products need the "
                          "avx512 level, and --isa "
                            + in_quotes(isa) + " runs the kernels below it");
      if (auto backend = cpu::bf16_products_backend(); !backend)
        return with_context(backend.error(), "--kfac_precision bf16");
    }
    cfg.device.threads = total_threads();
    cfg.batch_size = batch_size;
    cfg.steps = steps;
    cfg.seed = seed;
    cfg.log_every = log_every;
    cfg.eval_every = eval_every;
    cfg.warmup = warmup;
    cfg.metrics_path = metrics;
    cfg.logdir = logdir;
    if (metrics_port < 0 || metrics_port > 65535)
      return make_error(ec::invalid_config,
                        "--metrics_port " + std::to_string(metrics_port)
                          + ": a port is 0 (off) to 65535");
    cfg.metrics_port = static_cast<int32_t>(metrics_port);
    cfg.metrics_bind = metrics_bind;
    if (!logdir.empty())
      cfg.hparams = flag_table();
    cfg.progress = !no_progress;
    cfg.request_timeout = std::chrono::milliseconds{request_timeout_ms};
    return {};
  }

  /// The sync runtime's config around `base` with the shared topology
  /// (workers, replicas to aggregate, PS shards; N and R by the one rule
  /// of runtime/sync/replica_counts.hpp). The caller validates.
  caf::expected<sync_training_config>
  make_sync_config(local_training_config base) const {
    sync_training_config cfg;
    auto counts = resolve_replica_counts(
      worker_replicas, replicas_to_aggregate,
      base.optimizer.kind == optimizer_kind::kfac);
    if (!counts)
      return counts.error();
    cfg.base = std::move(base);
    cfg.worker_replicas = counts->workers;
    cfg.replicas_to_aggregate = counts->replicas_to_aggregate;
    cfg.ps_tasks = ps_tasks;
    cfg.checkpoint.directory = checkpoint_dir;
    cfg.checkpoint.every = checkpoint_every;
    cfg.checkpoint.keep = keep_checkpoints;
    return cfg;
  }
};

} // namespace syncfac::examples
