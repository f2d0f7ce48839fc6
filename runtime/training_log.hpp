#pragma once

// Where a training run reports: the seeds' log lines
// ("global_step: N | loss: x | accuracy: y"), JSON-lines metrics, and a
// progress line on a terminal. Thread-safe: the sync loop and the evaluator
// report from different actors.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <mutex>
#include <string>

#include <caf/error.hpp>

#include "runtime/eval_result.hpp"
#include "runtime/json.hpp"
#include "runtime/progress.hpp"

namespace syncfac {

class training_log {
public:
  /// Logs to `out`; writes metrics to `metrics_path` unless it is empty.
  training_log(std::ostream& out, int64_t total_steps, bool progress);

  /// Opens (truncates) the metrics file; an error names it.
  caf::error open_metrics(const std::string& path);

  /// A training window ending at `step`: mean loss and accuracy, plus any
  /// extra metrics fields.
  void train(int64_t step, double loss, double accuracy,
             const json_object& extra = {});

  /// A test-set evaluation at `step`.
  void eval(int64_t step, const eval_result& res);

  /// Any other line of the log.
  void line(const std::string& text);

  /// A line of the log and a metrics object with `fields` (after "wall_s"):
  /// what other roles report through the chief's metrics sink.
  void record(const std::string& text, const json_object& fields);

  /// Advances the progress display.
  void progress(int64_t step);

  /// Seconds since the log was made.
  double elapsed() const;

private:
  void write_metrics(const json_object& obj);

  std::mutex mtx_;
  std::ostream& out_;
  std::ofstream metrics_;
  progress_line progress_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace syncfac
