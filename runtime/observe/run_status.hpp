#pragma once

// What a run looks like right now, for the metrics server's /metrics and
// the status page's /status.json: the global step and rates, the last
// loss and accuracy and their curves so far, the test evaluations, the
// checkpoints, the faults and restarts, and the tasks with their health.
// The training log feeds it (runtime/training_log.hpp); a cluster's chief
// adds its tasks. Thread-safe: the log writes from the actors' threads,
// the server reads from its own.

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/observe/prometheus_text.hpp"

namespace syncfac::observe {

/// One point of a curve.
struct curve_point {
  int64_t step = 0;
  double wall_s = 0;
  double value = 0;
};

/// A fault, restart or resume, as the status page lists them.
struct run_event {
  double unix_time = 0;
  int64_t step = 0;
  std::string what;
};

/// A task of the run and how it is.
struct task_health {
  /// "up", "lost", "back", "done".
  std::string state;
  /// What is known besides (its roles, when it was lost).
  std::string detail;
  double since_unix = 0;
};

class run_status {
public:
  /// The most points each curve keeps; older ones are thinned (every
  /// other one dropped) so a long run still shows its whole curve.
  static constexpr size_t max_points = 1000;

  run_status();

  void set_total_steps(int64_t steps);
  void set_started(double started_unix);

  /// A train line of the log: every number of it (loss, train_accuracy,
  /// stale_pushes, examples_per_s, ...).
  void train(int64_t step, double wall_s,
             const std::vector<std::pair<std::string, double>>& numbers);

  /// A test evaluation.
  void eval(int64_t step, double wall_s, double loss, double accuracy);

  /// The global step now (progress, between log lines).
  void step(int64_t step);

  void checkpoint_written(const std::string& path);
  void checkpoint_failed();

  /// A fault, restart or resume at `step` (-1: the global step now).
  void event(int64_t step, const std::string& what);

  /// Sets how `task` ("worker:1") is.
  void task(const std::string& task, const std::string& state,
            const std::string& detail = "");

  /// The run's figures as Prometheus families, labelled `labels`.
  std::vector<metric_family>
  families(const std::vector<std::pair<std::string, std::string>>& labels)
    const;

  /// The whole state as one JSON object (the status page's data).
  std::string json() const;

private:
  static void add_point(std::deque<curve_point>& curve, curve_point p);

  mutable std::mutex mtx_;
  double started_unix_;
  int64_t total_steps_ = 0;
  int64_t global_step_ = 0;
  /// The last train line's numbers by name.
  std::map<std::string, double> last_;
  double steps_per_s_ = 0;
  int64_t prev_step_ = -1;
  double prev_wall_ = 0;
  double test_loss_ = -1;
  double test_accuracy_ = -1;
  int64_t evaluations_ = 0;
  std::deque<curve_point> loss_;
  std::deque<curve_point> accuracy_;
  std::deque<curve_point> test_loss_curve_;
  std::deque<curve_point> test_accuracy_curve_;
  int64_t checkpoints_ = 0;
  int64_t checkpoint_failures_ = 0;
  double last_checkpoint_unix_ = 0;
  std::string last_checkpoint_;
  std::vector<run_event> events_;
  std::map<std::string, task_health> tasks_;
};

} // namespace syncfac::observe
