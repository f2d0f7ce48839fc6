#pragma once

// A worker: its shard of the data and its local_step. One step is the
// seeds' train_op: pull the variables from every PS shard, compute
// gradients of one batch on the device actor, push them to the shards
// tagged with local_step, then take a token from the chief and set
// local_step to it. The barrier is at the end of the step.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model_spec.hpp"

namespace syncfac {

struct worker_config {
  int32_t index = 0;
  /// Workers sharing the training set (the data shards).
  int32_t num_workers = 1;
  model_spec model;
  /// Seed of the model replica (its initial values are overwritten by the
  /// first pull) and of this worker's data order.
  uint64_t seed = 0;
  int64_t batch_size = 128;
  std::shared_ptr<const dataset> data;
  device_actor device;
  std::vector<ps_actor> shards;
  chief_actor chief;
  /// Longest wait for a device, pull or push answer.
  std::chrono::milliseconds request_timeout{60000};
  /// Longest wait for a token (the slowest worker of the step sets it).
  std::chrono::milliseconds token_timeout{120000};

  caf::error validate() const;
};

struct worker_state {
  static inline const char* name = "worker";

  worker_config cfg;
  std::optional<batcher> batches;
  batch current;
  /// The model's parameter names in order, and which shard holds each.
  parameter_set params;
  std::map<std::string, size_t> slot_of;
  std::vector<size_t> shard_of;
  bool initialised = false;
  /// Whether params hold the variables at local_step already.
  bool params_ready = false;
  int64_t local_step = 0;
  int64_t steps = 0;
  int64_t stale_pushes = 0;
  double step_s = 0;
  double token_wait_s = 0;
  double compute_s = 0;
  std::chrono::steady_clock::time_point step_started;
  bool running = false;
  bool stopped = false;
  caf::typed_response_promise<worker_status> promise;
};

worker_actor::behavior_type
worker(worker_actor::stateful_pointer<worker_state> self, worker_config cfg);

caf::expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                         worker_config cfg);

} // namespace syncfac
