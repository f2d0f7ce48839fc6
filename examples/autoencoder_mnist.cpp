// The classic K-FAC benchmark (Martens & Grosse 2015, after Hinton &
// Salakhutdinov 2006): a deep autoencoder 784-1000-500-250-30 and its
// mirror 30-250-500-1000-784 with sigmoid hidden units, a linear code layer
// and a sigmoid output, trained on MNIST-format images to reconstruct its
// input under the Bernoulli likelihood (sigmoid cross-entropy against the
// pixels in [0, 1]; the labels are ignored). Reports the training loss and,
// every --eval_every steps, the classic "training reconstruction error": the
// mean over examples of sum_pixels (x - sigmoid(logit))^2, on the first
// --eval_examples training images (10,000 by default, a fixed subset), or
// with --eval_split validation|test on held-out training images or on the
// test split's (how bench/autoencoder_race.py tunes and reports).
//
// By default one loop around one device actor (--runtime plain), where
// K-FAC (--optimizer kfac) runs through the device's K-FAC step; --runtime
// sync trains through chief, workers and PS shards.
//
//   build/bin/autoencoder_mnist --optimizer momentum --learning_rate 0.001
//   build/bin/autoencoder_mnist --optimizer kfac --steps 2000
//   build/bin/autoencoder_mnist --fake_data --steps 100 --hidden 64,16

#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/local_trainer.hpp"
#include "actors/sync_trainer.hpp"
#include "runtime/data/content_digest.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_preconditioner.hpp"
#include "example_main.hpp"
#include "training_options.hpp"

using namespace syncfac;
using namespace syncfac::examples;

namespace {

constexpr const char* program_name = "autoencoder_mnist";

/// The learning rate when --learning_rate is not given: the best of small
/// grids on Fashion-MNIST (bench/run_autoencoder.sh). The loss sums 784
/// pixel cross-entropies per example, so first-order rates are small.
float default_rate(optimizer_kind kind) {
  switch (kind) {
    case optimizer_kind::kfac: return 0.01f;
    case optimizer_kind::momentum: return 0.003f;
    default: return 1e-3f;
  }
}

/// "1000,500,250,30" -> {1000, 500, 250, 30}.
caf::expected<std::vector<int64_t>> parse_widths(const std::string& str) {
  std::vector<int64_t> result;
  std::istringstream in{str};
  std::string item;
  auto bad = [&] {
    return make_error(ec::invalid_config,
                      "hidden: '" + str
                        + "' is not a comma-separated list of positive "
                          "widths (e.g. 1000,500,250,30)");
  };
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t width = 0;
    try {
      width = std::stoll(item, &used);
    } catch (const std::exception&) {
      return bad();
    }
    if (used != item.size() || width < 1)
      return bad();
    result.push_back(width);
  }
  if (result.empty())
    return bad();
  return result;
}

/// The shared flags (examples/training_options.hpp) with the autoencoder's
/// defaults and help texts, plus --hidden and --eval_examples.
examples::training_help autoencoder_help() {
  examples::training_help help;
  help.steps = "training steps";
  help.learning_rate = "learning rate (default: momentum 0.003, kfac 0.01, "
                       "sgd and adam 0.001)";
  help.momentum = "momentum coefficient (momentum, kfac)";
  help.init = "weight init: sparse, glorot, he or seeds";
  help.activation = "hidden activation: sigmoid, tanh, relu";
  help.seed = "seed of initialisation, shuffling and sampling";
  help.eval_every = "steps between reconstruction-error evaluations (0: end)";
  help.runtime = "plain (one loop) or sync (chief, workers, PS shards)";
  help.worker_replicas = "sync: N workers";
  help.replicas_to_aggregate = "sync: R gradients averaged per update";
  help.ps_tasks = "sync: P parameter-server shards";
  help.stats_examples = "kfac: examples per batch used for statistics "
                        "(0: all)";
  help.stats_locations = "kfac: locations per example for statistics (0: "
                         "all; dense layers have one)";
  return help;
}

struct options : examples::training_options {
  std::string hidden = "1000,500,250,30";
  int64_t eval_examples = 10000;
  /// Which images the reconstruction error is measured on: train (the
  /// first --eval_examples training images, the classic figure),
  /// validation (the last --eval_examples training images, held out of
  /// training: what a tuning sweep selects on) or test (the first
  /// --eval_examples images of the test split: what a sweep reports).
  std::string eval_split = "train";
  int64_t stats_every = 1;
  std::string kfac_momentum = "regular";

  options() : training_options{autoencoder_help()} {
    steps = 1000;
    batch_size = 256;
    init = "sparse";
    activation_name = "sigmoid";
    request_timeout_ms = 120000;
    runtime = "plain";
    // Larger than the classifier's 1e-3: the summed per-pixel loss has a
    // large Fisher, and 1e-3 or 1e-2 let the first K-FAC steps diverge.
    damping = 0.1f;
    stats_examples = 0;
    stats_locations = 0;
    opt_group{custom_options_, "global"}
      .add(hidden, "hidden",
           "encoder widths down to the linear code layer; the decoder "
           "mirrors them")
      .add(eval_examples, "eval_examples",
           "images evaluated (0: all of the --eval_split)")
      .add(eval_split, "eval_split",
           "train (the first training images), validation (the last "
           "training images, held out of training) or test (the first "
           "test images)")
      .add(stats_every, "stats_every",
           "kfac: fold statistics into the factors every N steps (plain "
           "runtime)")
      .add(kfac_momentum, "kfac_momentum",
           "kfac: regular (v = mu v + F^-1 g) or adam (v = mu v + g, "
           "step F^-1 v)");
    allow_values("kfac_momentum", {"adam", "regular"});
    allow_values("eval_split", {"train", "validation", "test"});
    limit("steps", at_least(1));
    limit("eval_examples", at_least(0));
    limit("stats_every", at_least(1));
  }

  caf::expected<local_training_config> to_training_config() const {
    local_training_config cfg;
    cfg.model = autoencoder_spec();
    if (auto err = parse_into(cfg.model.hidden, parse_widths, hidden))
      return err;
    if (auto err = load_model_file_into(cfg.model))
      return err;
    if (auto err = fill_training_config(cfg, default_rate))
      return err;
    if (stats_every < 1)
      return make_error(ec::invalid_config,
                        "stats_every must be at least 1, got "
                          + std::to_string(stats_every));
    cfg.optimizer.kfac.stats_every = stats_every;
    if (auto err = parse_into(cfg.optimizer.kfac.momentum,
                              parse_kfac_momentum, kfac_momentum))
      return err;
    if (steps < 1)
      return make_error(ec::invalid_config,
                        "steps must be at least 1, got "
                          + std::to_string(steps));
    if (eval_examples < 0)
      return make_error(ec::invalid_config,
                        "eval_examples must not be negative, got "
                          + std::to_string(eval_examples));
    if (auto err = cfg.validate())
      return err;
    return cfg;
  }

  caf::expected<sync_training_config> to_sync_config() const {
    auto base = to_training_config();
    if (!base)
      return base.error();
    auto cfg = make_sync_config(std::move(*base));
    if (!cfg)
      return cfg.error();
    if (auto err = cfg->validate())
      return err;
    return cfg;
  }
};

caf::expected<dataset> load_train(const options& opts,
                                  const model_spec& model) {
  if (opts.fake_data && opts.fake_train_size < 1)
    return make_error(ec::invalid_config,
                      "fake_train_size must be positive, got "
                        + std::to_string(opts.fake_train_size));
  if (auto err = opts.check_fake_sizes(0))
    return err;
  auto data = opts.fake_data
                ? caf::expected<dataset>{make_fake_dataset(
                  opts.fake_train_size, 1)}
                : opts.load_split(split::train, model);
  if (!data)
    return data;
  if (auto err = check_data_fits(model, *data))
    return err;
  return data;
}

/// The training set and the evaluation set as --eval_split and
/// --eval_examples say (a validation split's images are left out of the
/// training set).
struct train_and_eval {
  dataset train;
  dataset eval;
};

caf::expected<train_and_eval> split_for_eval(const options& opts,
                                             const model_spec& model,
                                             dataset data) {
  auto n = opts.eval_examples;
  auto first_n = [n](const dataset& d) {
    return examples_range(d, 0, n <= 0 || n >= d.count ? d.count : n);
  };
  if (opts.eval_split == "train") {
    auto eval = first_n(data);
    if (!eval)
      return eval.error();
    return train_and_eval{std::move(data), std::move(*eval)};
  }
  if (opts.eval_split == "validation") {
    if (n <= 0 || n >= data.count)
      return make_error(ec::invalid_config,
                        "--eval_split validation holds --eval_examples "
                        "training images out of training: it needs 0 < "
                        "--eval_examples < "
                          + std::to_string(data.count) + " (the training "
                          "images of " + data.source + "), got "
                          + std::to_string(n));
    auto eval = examples_range(data, data.count - n, n);
    auto train = examples_range(data, 0, data.count - n);
    if (!eval)
      return eval.error();
    if (!train)
      return train.error();
    return train_and_eval{std::move(*train), std::move(*eval)};
  }
  auto test = opts.fake_data
                ? caf::expected<dataset>{make_fake_dataset(
                  n > 0 ? n : opts.fake_train_size, 2)}
                : opts.load_split(split::test, model);
  if (!test)
    return test.error();
  if (auto err = check_data_fits(model, *test))
    return err;
  auto eval = first_n(*test);
  if (!eval)
    return eval.error();
  return train_and_eval{std::move(data), std::move(*eval)};
}

caf::expected<training_summary> train(options& opts) {
  auto cfg = runtime_config(opts);
  if (!cfg)
    return cfg.error();
  auto data = load_train(opts, cfg->base.model);
  if (!data)
    return data.error();
  auto sets = split_for_eval(opts, cfg->base.model, std::move(*data));
  if (!sets)
    return sets.error();
  auto eval_set = std::make_shared<const dataset>(std::move(sets->eval));
  auto train_set = std::make_shared<const dataset>(std::move(sets->train));
  caf::actor_system sys{opts};
  if (opts.runtime == "plain")
    return train_locally(sys, cfg->base, *train_set, *eval_set, std::cout);
  // K-FAC through the sync runtime: whatever it says (it may refuse).
  return train_sync(sys, *cfg, train_set, eval_set, std::cout);
}

int run(options& opts) {
  auto summary = train(opts);
  if (!summary)
    return fail(program_name, summary.error());
  const auto& final_eval = summary->test;
  auto json = summary->to_json();
  json.add("model", opts.model_file.empty() ? "autoencoder" : opts.model_file)
    .add("optimizer", opts.optimizer)
    .add("train_loss", summary->last_loss)
    .add("eval_split", opts.eval_split)
    .add("eval_examples", final_eval.count)
    .add("reconstruction_error", final_eval.reconstruction_error())
    .add("eval_cross_entropy", final_eval.mean_loss());
  std::ostringstream lines;
  lines << opts.eval_split << " reconstruction error: "
        << final_eval.reconstruction_error() << " (" << final_eval.count
        << (opts.eval_split == "test" ? " test" : " training")
        << " images)\n";
  return report(program_name, opts, *summary, json, lines.str());
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  return example_main(program_name, argc, argv, opts, run);
}
