#include "actors/run_fingerprint.hpp"

#include <algorithm>
#include <string>

#include "runtime/comma_list.hpp"
#include "runtime/data/content_digest.hpp"
#include "runtime/sync/compute_delay.hpp"

namespace syncfac {

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

/// name(x) of every item, joined by "," with nothing between (a list in a
/// fingerprint's value; runtime/comma_list.hpp's joins messages' lists).
template <class Items, class Name>
std::string joined(const Items& items, Name name) {
  std::string result;
  for (const auto& x : items)
    result += (result.empty() ? "" : ",") + name(x);
  return result;
}

void add_model(config_fingerprint& fp, const model& init) {
  const auto& spec = init.spec();
  fp.add("model.arch", to_string(spec.arch));
  fp.add("model.init", to_string(spec.init));
  fp.add("model.input_shape",
         fingerprint_value({spec.height, spec.width, spec.channels}));
  fp.add("model.num_classes", str(spec.num_classes));
  fp.add("model.hidden", fingerprint_value(spec.hidden));
  fp.add("model.hidden_activation", to_string(spec.hidden_activation));
  fp.add("model.label_smoothing", fingerprint_value(spec.label_smoothing));
  // Every variable's name and shape: a field per variable names the one
  // that differs (two builds of the same architecture could still differ).
  const auto& params = init.parameters();
  fp.add("model.variables.count", str(static_cast<int64_t>(params.size())));
  for (size_t i = 0; i < params.size(); ++i) {
    auto base = "model.variables[" + std::to_string(i) + "]";
    fp.add(base + ".name", params[i].name);
    fp.add(base + ".shape", fingerprint_value(params[i].value.shape()));
  }
  // A described model's layers, one field each, after the variables (they
  // name most differences already): type, sizes, activation, init.
  const auto& desc = init.description();
  fp.add("model.layers.count", str(static_cast<int64_t>(desc.layers.size())));
  fp.add("model.loss", to_string(desc.loss));
  fp.add("model.description.init", desc.init);
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const auto& l = desc.layers[i];
    fp.add("model.layers[" + std::to_string(i) + "]",
           std::string{to_string(l.type)} + " units " + str(l.units)
             + " kernel " + str(l.kernel) + " stride " + str(l.stride)
             + " padding " + to_string(l.pad) + " activation "
             + to_string(l.act) + " init " + l.init + " vocabulary "
             + str(l.vocabulary) + " combiner " + to_string(l.combiner)
             + (l.inputs.empty() ? "" : " inputs " + comma_joined(l.inputs)));
  }
}

void add_optimizer(config_fingerprint& fp, const optimizer_config& opt) {
  fp.add("optimizer.kind", to_string(opt.kind));
  fp.add("optimizer.learning_rate", fingerprint_value(opt.learning_rate));
  fp.add("optimizer.momentum", fingerprint_value(opt.momentum));
  fp.add("optimizer.nesterov", opt.nesterov ? "true" : "false");
  fp.add("optimizer.beta1", fingerprint_value(opt.beta1));
  fp.add("optimizer.beta2", fingerprint_value(opt.beta2));
  fp.add("optimizer.epsilon", fingerprint_value(opt.epsilon));
  // The schedule and the decays: every shard computes the rate itself.
  const auto& sched = opt.schedule;
  fp.add("optimizer.lr_schedule", to_string(sched.kind));
  fp.add("optimizer.lr_warmup_steps", str(sched.warmup_steps));
  fp.add("optimizer.lr_boundaries",
         "[" + joined(sched.boundaries, str) + "]");
  fp.add("optimizer.lr_decay_rate", fingerprint_value(sched.decay_rate));
  fp.add("optimizer.lr_decay_steps", str(sched.decay_steps));
  fp.add("optimizer.lr_end_factor", fingerprint_value(sched.end_factor));
  fp.add("optimizer.lr_power", fingerprint_value(sched.power));
  fp.add("optimizer.weight_decay", fingerprint_value(opt.weight_decay));
  fp.add("optimizer.l2_penalty", fingerprint_value(opt.l2_penalty));
  fp.add("optimizer.clip_norm", fingerprint_value(opt.clip_norm));
  if (opt.kind != optimizer_kind::kfac)
    return; // K-FAC's settings do nothing then: a stray flag is harmless
  const auto& k = opt.kfac;
  fp.add("optimizer.kfac.damping", fingerprint_value(k.damping));
  fp.add("optimizer.kfac.cov_ema_decay", fingerprint_value(k.cov_ema_decay));
  fp.add("optimizer.kfac.invert_every", str(k.invert_every));
  fp.add("optimizer.kfac.min_cov_updates", str(k.min_cov_updates));
  fp.add("optimizer.kfac.fisher", to_string(k.fisher));
  fp.add("optimizer.kfac.inverse_mode", to_string(k.mode));
  // fp32 or bf16 products: other arithmetic, other updates.
  fp.add("optimizer.kfac.precision", to_string(k.precision));
  fp.add("optimizer.kfac.momentum", to_string(k.momentum));
  fp.add("optimizer.kfac.cadence", to_string(k.cadence));
  fp.add("optimizer.kfac.kl_clip", fingerprint_value(k.kl_clip));
  fp.add("optimizer.kfac.max_damping_retries",
         str(static_cast<int64_t>(k.max_damping_retries)));
  fp.add("optimizer.kfac.sampling.max_examples",
         str(k.sampling.max_examples));
  fp.add("optimizer.kfac.sampling.max_locations",
         str(k.sampling.max_locations));
  fp.add("optimizer.kfac.sampling.seed",
         str(static_cast<int64_t>(k.sampling.seed)));
}

void add_topology(config_fingerprint& fp, const sync_training_config& sync,
                  const shard_layout& layout) {
  fp.add("run.seed", str(static_cast<int64_t>(sync.base.seed)));
  fp.add("run.batch_size", str(sync.base.batch_size));
  fp.add("run.worker_replicas", str(int64_t{sync.worker_replicas}));
  fp.add("run.replicas_to_aggregate",
         str(int64_t{sync.replicas_to_aggregate}));
  fp.add("run.num_tokens", str(sync.num_tokens));
  fp.add("run.num_towers", str(int64_t{sync.num_towers}));
  // Whole or row pulls of an embedding table: where some worker pulls
  // whole and another by rows, their steps read the table at other steps
  // (docs/protocol.md, "Row pulls"), so the run is neither's.
  fp.add("run.whole_pulls", sync.whole_pulls ? "true" : "false");
  fp.add("run.moving_average_decay",
         fingerprint_value(sync.moving_average_decay));
  auto averaged = joined(sync.variables_to_average,
                         [](const std::string& name) { return name; });
  fp.add("run.variables_to_average",
         averaged.empty() ? "all" : "[" + averaged + "]");
  // Real or the benchmark-only delay device (zero gradients): a node of
  // the one kind among the other would train silently to a worse model.
  // Which real backend, and the delay's figures, may differ per node.
  fp.add("device.kind",
         is_delay_device(sync.base.device.backend) ? "bench_delay" : "real");
  fp.add("ps.tasks", str(int64_t{sync.ps_tasks}));
  fp.add("ps.placement", to_string(sync.placement));
  // The placement itself, not only the strategy's name: what each shard
  // holds is what a worker pushes to it.
  for (size_t s = 0; s < layout.shards.size(); ++s)
    fp.add("ps.shards[" + std::to_string(s) + "].variables",
           "[" + joined(layout.shards[s].variables,
                        [](const named_tensor& v) { return v.name; })
             + "]");
  if (!uses_kfac(sync))
    return;
  fp.add("kfac.strategy", to_string(sync.kfac.strategy));
  fp.add("kfac.covariance_actors", str(int64_t{sync.kfac.covariance_actors}));
  fp.add("kfac.inverse_actors", str(int64_t{sync.kfac.inverse_actors}));
  fp.add("kfac.placement", to_string(sync.kfac.placement));
}

void add_split(config_fingerprint& fp, const std::string& name,
               const dataset& d) {
  auto base = "data." + name;
  // The kind of source, not its path: two nodes may mount one data set at
  // two places; the counts and the digest tell two data sets apart.
  bool fake = d.source.rfind("fake", 0) == 0;
  fp.add(base + ".source", fake ? "fake" : "files");
  fp.add(base + ".count", str(d.count));
  fp.add(base + ".example_shape",
         fingerprint_value({d.height, d.width, d.channels}));
  fp.add(base + ".num_classes", str(d.num_classes));
  // Every example and label (the loader's digest, computed while it
  // loaded): a node whose data differ anywhere, not only in the first
  // examples, is told apart. A set some other code made without one is
  // digested here.
  auto digest = d.digest != 0 || d.count == 0 ? d.digest : digest_of(d);
  fp.add(base + ".digest", hex64(digest));
}

} // namespace

config_fingerprint make_run_fingerprint(const sync_training_config& sync,
                                        const model& init,
                                        const shard_layout& layout,
                                        const dataset* train,
                                        const dataset* test) {
  config_fingerprint fp;
  add_model(fp, init);
  add_optimizer(fp, sync.base.optimizer);
  add_topology(fp, sync, layout);
  if (train && test) {
    add_split(fp, "train", *train);
    add_split(fp, "test", *test);
  } else {
    fp.omitted.push_back("data.");
  }
  return fp;
}

config_fingerprint make_model_fingerprint(const model& init) {
  config_fingerprint fp;
  add_model(fp, init);
  // Its initialisation and the training target's smoothing are not an
  // evaluator's business: it reads the variables and reports the plain
  // cross-entropy.
  const std::vector<std::string> not_its{"model.init", "model.description.init",
                                         "model.label_smoothing"};
  fp.omitted = not_its;
  for (const char* rest : {"optimizer.", "run.", "device.", "ps.", "kfac.",
                           "data."})
    fp.omitted.emplace_back(rest);
  std::vector<fingerprint_field> kept;
  for (auto& f : fp.fields)
    if (std::find(not_its.begin(), not_its.end(), f.path) == not_its.end())
      kept.push_back(std::move(f));
  fp.fields = std::move(kept);
  return fp;
}

} // namespace syncfac
