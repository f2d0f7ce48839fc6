#pragma once

// Messages to and from device actors. Tensors cross the wire as raw byte
// blocks (see kernels/tensor.hpp); everything else is small.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/eval_result.hpp"
#include "runtime/inspect.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer_config.hpp"
#include "messages/kfac_messages.hpp"
#include "messages/sync_messages.hpp"

namespace syncfac {

SYNCFAC_INSPECT(batch, x.images, x.labels, x.noise_seed)

/// What a device reports about a freshly loaded model replica.
struct model_info {
  std::string summary;
  int64_t parameter_count = 0;
  parameter_set initial;
};

SYNCFAC_INSPECT(model_info, x.summary, x.parameter_count, x.initial)

/// Loss and accuracy of one training batch, with its gradients when asked
/// for through grads_atom (empty after train_atom, which applies them).
struct step_result {
  float loss = 0;
  int64_t correct = 0;
  int64_t count = 0;
  parameter_set gradients;
  /// Gradients of sparse (row-indexed) variables.
  std::vector<sparse_update> sparse_gradients;
  /// Seconds the device spent on the request (what the runtime around it
  /// adds is the step time minus this).
  double compute_s = 0;
  /// K-FAC factor statistics of the batch, when a stats_request came with
  /// the gradient request (one entry per layer of the collection).
  std::vector<layer_stats> stats;
  /// Examples the statistics average over.
  int64_t stats_examples = 0;
};

SYNCFAC_INSPECT(step_result, x.loss, x.correct, x.count, x.gradients,
                x.sparse_gradients, x.compute_s, x.stats, x.stats_examples)

/// A device's self-description.
struct device_info {
  std::string backend;
  int32_t threads = 0;
};

SYNCFAC_INSPECT(device_info, x.backend, x.threads)

} // namespace syncfac
