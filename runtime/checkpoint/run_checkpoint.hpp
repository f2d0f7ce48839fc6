#pragma once

// A training run's checkpoint as tensors and metadata, and back (docs/design.md
// §5, docs/checkpoints.md "What a run saves"). The names say what a tensor
// is, so the file reads well in any safetensors tool:
//
//   variables/<var>                  the model's variables
//   averages/<var>                   their moving averages (if kept)
//   slots/first/<var>, slots/second/<var>   optimizer slots
//   kfac/inverse/<layer>/{a,g,a_values,g_values}   shards' inverses
//   kfac/factors/<layer>/{a,g}       covariance actors' EMA numerators
//
// The metadata holds the global step, what the run was (model, optimizer,
// topology), the optimizer's step count, each inverse's and factor's
// scalars, and the workers' data order, JSON-encoded where structured.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/checkpoint/checkpoint_contents.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac {

/// What a run is, as far as a checkpoint must agree with it. Topology
/// (workers, shards, aggregation) is recorded but may change on restore.
struct run_identity {
  /// A restore refuses a checkpoint of another model or optimizer.
  std::string model;
  std::string optimizer;
  int32_t workers = 1;
  int32_t replicas_to_aggregate = 1;
  int32_t ps_tasks = 1;
  std::string strategy;
  /// Whether the variables' moving averages are kept (and saved).
  bool averages = false;
  /// When the run first started (seconds since the epoch; 0: unknown).
  /// Recorded, never compared: a resumed run's metrics count wall time
  /// from it (runtime/training_log.hpp).
  double started_unix = 0;
};

/// "convnet 28x28x1->10" and the like: what must match to restore.
std::string describe_model(const model_spec& spec);

run_identity make_run_identity(const model_spec& spec,
                               const optimizer_config& opt, int32_t workers,
                               int32_t replicas_to_aggregate, int32_t ps_tasks,
                               const std::string& strategy, bool averages);

/// The tensors and metadata of one checkpoint. ec::invalid_argument when
/// the contents contradict themselves (two shards with one variable).
caf::error encode_run_checkpoint(const checkpoint_contents& contents,
                                 const run_identity& run,
                                 parameter_set& tensors,
                                 tensor_metadata& metadata);

/// A checkpoint read back, by name, ready to be handed out to whatever
/// shards and covariance actors the restored run has.
struct restored_run {
  int64_t global_step = 0;
  std::string path;
  /// The identity it was written under.
  run_identity written_under;
  std::map<std::string, tensor> variables;
  std::map<std::string, tensor> averages;
  std::map<std::string, tensor> first_slots;
  std::map<std::string, tensor> second_slots;
  int64_t optimizer_step = 0;
  std::map<std::string, layer_inverse> inverses;
  /// Per layer: the EMA numerators and their weight.
  std::map<std::string, layer_factors> factors;
  std::map<std::string, float> factor_weights;
  int64_t last_folded = -1;
  std::vector<worker_position> data_order;
};

/// Decodes `ckpt` for a run that is `now`: ec::invalid_config naming the
/// file when the model or the optimizer differ, ec::bad_data when a
/// tensor or a metadata entry is malformed or missing.
caf::expected<restored_run> decode_run_checkpoint(const checkpoint& ckpt,
                                                  const run_identity& now);

/// The model's variables of a run's checkpoint ("variables/<name>" as
/// <name>), e.g. to evaluate them.
parameter_set checkpoint_variables(const checkpoint& ckpt);

/// Fills a shard's snapshot (taken from the live shard, so it names the
/// shard's variables and K-FAC layers) with the checkpoint's values; an
/// error names the first variable the checkpoint lacks or shapes wrong.
caf::error fill_snapshot(const restored_run& run, shard_snapshot& snap);

/// The same for a covariance actor's layers.
caf::error fill_snapshot(const restored_run& run, covariance_snapshot& snap);

/// Where worker `index` of `workers` resumes: its recorded position when
/// the checkpoint was written with as many workers (the data shards are
/// the same), otherwise the start of the epoch after the newest recorded
/// one (the shards differ, so positions do not carry over).
resume_point resume_of(const restored_run& run, int32_t index,
                       int32_t workers);

} // namespace syncfac
