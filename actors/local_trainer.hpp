#pragma once

// Single-process training through one device actor: the loop of the seeds'
// train_mnist_single_machine with a first-order optimizer. The driver owns
// the data and the schedule; every kernel runs on the device actor, and
// every request to it has a timeout.

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/device_actor.hpp"
#include "kernels/cpu/isa.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/eval_result.hpp"
#include "runtime/json.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac {

struct local_training_config {
  model_spec model;
  optimizer_config optimizer;
  device_config device;
  int64_t batch_size = 128;
  /// Steps to run; 0 means num_epochs passes over the training set.
  int64_t steps = 0;
  int64_t num_epochs = 2;
  uint64_t seed = 0;
  /// Print "global_step: N | loss: x | accuracy: y" every this many steps.
  int64_t log_every = 100;
  /// Evaluate on the full test set every this many steps (0: only at the
  /// end).
  int64_t eval_every = 0;
  /// Skip the final test-set evaluation (pure throughput runs).
  bool skip_final_eval = false;
  /// Examples per evaluation request (bounds the activation memory).
  int64_t eval_batch = 500;
  /// Steps excluded from the examples/s figure (warm-up).
  int64_t warmup = 20;
  /// JSON-lines metrics file; empty for none.
  std::string metrics_path;
  /// TensorBoard log directory (a new event file per run); empty for none.
  std::string logdir;
  /// The run's flags as Markdown, written to the event file as text.
  std::string hparams;
  /// Serve /metrics (and the chief's status page) on this port; 0: off.
  /// In a cluster, task k of the cluster file listens on this + k.
  int32_t metrics_port = 0;
  /// The address the metrics server listens on.
  std::string metrics_bind = "127.0.0.1";
  /// Draw a progress line on a terminal.
  bool progress = true;
  /// Longest wait for one device request.
  std::chrono::milliseconds request_timeout{60000};
  /// Asked after every step of the plain loop: a non-empty answer (why:
  /// "SIGTERM") ends the run there, preempted (the sync runtime's chief
  /// is told through sync_training_config::on_chief instead). Unset: the
  /// run goes to its end.
  std::function<std::string()> stop_requested;
  /// Called with every metrics line (the JSON object of the --metrics
  /// file) on the logging thread; may be empty. The Python module's
  /// per-line callback (docs/python.md).
  std::function<void(const std::string&)> on_metrics;

  caf::error validate() const;
};

struct training_summary {
  int64_t steps = 0;
  int64_t examples = 0;
  /// Mean batch loss and accuracy over the last log window.
  double last_loss = 0;
  double last_accuracy = 0;
  /// Final test-set result (count 0 if skipped).
  eval_result test;
  double wall_s = 0;
  double train_s = 0;
  /// Training throughput after the warm-up steps.
  double examples_per_s = 0;
  double peak_rss_mib = 0;
  std::string backend;
  int threads = 0;
  /// The instruction-set level of this process's CPU kernels when the
  /// summary was made (kernels/cpu/isa.hpp; --isa).
  std::string isa = cpu::isa_name();
  /// "plain" (one loop, local optimizer) or "sync" (chief, workers, shards).
  std::string runtime;
  /// Sync runtime only: the final global_step, the topology, and the
  /// gradient pushes the shards accepted, dropped as stale or refused.
  int64_t global_step = 0;
  int32_t workers = 1;
  int32_t replicas_to_aggregate = 1;
  int32_t ps_tasks = 0;
  int64_t accepted_pushes = 0;
  int64_t stale_pushes = 0;
  int64_t refused_pushes = 0;
  /// parameter_digest() of the final parameters (sync runtime).
  std::string params_digest;
  /// parameter_digest() of their moving averages (sync runtime, with
  /// --moving_average_decay; empty without).
  std::string averages_digest;
  /// Share of the workers' step time spent waiting for tokens.
  double token_wait_share = 0;
  /// Step time beyond the device's compute time, relative to the latter:
  /// what the runtime (messages, data, optimizer, sync) costs.
  double runtime_overhead = 0;
  /// K-FAC's counters (strategy, statistics, inversions), if it ran.
  json_object kfac;
  /// Checkpoints: restored from, written, failed (sync runtime with a
  /// checkpoint directory).
  json_object checkpoints;
  /// Roles lost and restarted during the run (sync runtime).
  json_object faults;
  /// Messages and payload bytes each role sent, per global step and per
  /// worker step against the minimum (sync runtime; transfer_report.hpp).
  json_object transfers;
  /// Every figure of the roles' status tables but K-FAC's (those are in
  /// `kfac`), folded by role: {"ps": {...}, "worker": {...}, ...} (sync
  /// runtime; actors/role_totals.hpp).
  json_object roles;
  /// Why the run was preempted ("worker:1: SIGTERM"); empty: it ran to its
  /// end. A preempted run ends at the step in flight, checkpointed.
  std::string preempted;

  json_object to_json() const;
};

/// Trains on `train`, evaluates on `test`, logs to `log`.
caf::expected<training_summary>
train_locally(caf::actor_system& sys, const local_training_config& cfg,
              const dataset& train, const dataset& test, std::ostream& log);

} // namespace syncfac
