#pragma once

// Where a training run reports: the seeds' log lines
// ("global_step: N | loss: x | accuracy: y"), JSON-lines metrics, TensorBoard
// event files (every number of a metrics line as a scalar at its step) and
// a progress line on a terminal. Thread-safe: the sync loop and the
// evaluator report from different actors. docs/observability.md describes
// the outputs.

#include <cstdint>
#include <fstream>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <caf/error.hpp>

#include "runtime/eval_result.hpp"
#include "runtime/json.hpp"
#include "runtime/progress.hpp"
#include "runtime/progress_record.hpp"

namespace syncfac {

namespace tensorboard {
class event_file;
}

namespace observe {
class run_status;
}

class training_log {
public:
  /// Logs to `out`; metrics and event files once opened. Everything it
  /// logs also goes into `status` (a new one if null), what the metrics
  /// server shows (runtime/observe).
  training_log(std::ostream& out, int64_t total_steps, bool progress,
               std::shared_ptr<observe::run_status> status = nullptr);

  ~training_log();

  /// Opens the metrics file (unless `path` is empty) for appending; an
  /// error names it. The first metrics line of a run that is not resumed
  /// truncates the file, so a fresh run starts it anew while a resumed one
  /// continues it.
  caf::error open_metrics(const std::string& path);

  /// Creates a new TensorBoard event file in `logdir` (unless empty) and
  /// writes `hparams` (Markdown: the run's flags) into it as text; an error
  /// names the directory.
  caf::error open_events(const std::string& logdir,
                         const std::string& hparams);

  /// Hands every metrics line (the JSON object a --metrics file gets,
  /// whether or not one is open) to `sink` as well, on the logging
  /// thread: the Python module's callback (docs/python.md).
  void metrics_sink(std::function<void(const std::string&)> sink) {
    sink_ = std::move(sink);
  }

  /// Both of the above.
  caf::error open_outputs(const std::string& metrics_path,
                          const std::string& logdir,
                          const std::string& hparams) {
    if (auto err = open_metrics(metrics_path))
      return err;
    return open_events(logdir, hparams);
  }

  /// Names the outputs that open_named_outputs() opens later, creating
  /// nothing now: the chief of a cluster opens them only once every node
  /// agreed to the run, so that a refusal leaves no file behind
  /// (docs/robustness.md, "Refuse before writing"). A resume() before
  /// then reads the metrics file's records already and marks its restart
  /// in the event file once that is created.
  void name_outputs(const std::string& metrics_path, const std::string& logdir,
                    const std::string& hparams);

  /// Opens what name_outputs() named; an error names the file or directory.
  caf::error open_named_outputs();

  /// Writes a progress record (runtime/progress_record.hpp) at every
  /// progress() from now on, to the descriptor SYNCFAC_PROGRESS_FD names
  /// (none when unset: the chief was not started by the launcher); a bad
  /// value is an error naming the variable.
  caf::error open_progress_record();

  /// The run continues one that started at `started_unix` (seconds since
  /// the epoch, from its checkpoint; 0: unknown, keep this start) from
  /// global step `step`: the metrics file is appended to, wall_s counts
  /// from the recorded start, and the event file marks a restart after
  /// `step` (TensorBoard then drops the events of earlier files after
  /// `step`, which the run logs again, so the curves stay one).
  void resume(double started_unix, int64_t step);

  /// The run goes back to global step `step` (a rollback after a lost PS
  /// shard): the event file marks a restart there, as resume() does.
  void restart_at(int64_t step);

  /// When the run started, in seconds since the epoch (recorded in
  /// checkpoints so that a resumed run's wall_s continues).
  double started_unix() const;

  /// A training window ending at `step`: mean loss and accuracy, plus any
  /// extra metrics fields.
  void train(int64_t step, double loss, double accuracy,
             const json_object& extra = {});

  /// A test-set evaluation at `step`.
  void eval(int64_t step, const eval_result& res);

  /// Any other line of the log.
  void line(const std::string& text);

  /// A line of the log and a metrics object with `fields` (after "wall_s",
  /// with a "step"): what other roles report through the chief's metrics
  /// sink. Their TensorBoard tags are "<source>/<field>".
  void record(const std::string& text, const json_object& fields,
              const std::string& source = "");

  /// A line of the log that tells of a fault (a task lost, back,
  /// rejoining): the status page lists it and keeps the task's health.
  void fault(const std::string& text);

  /// A checkpoint of global step `step` was written to `path` / failed.
  /// A written one is where a restart resumes: the progress record says
  /// so at once.
  void checkpoint_written(const std::string& path, int64_t step);
  void checkpoint_failed();

  /// The run continues from the checkpoint of global step `step`: a
  /// restart resumes there until this run writes a newer one.
  void checkpoint_restored(int64_t step);

  /// The run as the metrics server shows it.
  const std::shared_ptr<observe::run_status>& status() const noexcept {
    return status_;
  }

  /// Advances the progress display and writes the progress record.
  void progress(int64_t step);

  /// Seconds since the run started.
  double elapsed() const;

private:
  /// Writes `obj` (which starts with "step" and "wall_s") as a metrics line
  /// and its other numbers as scalars at `step`, tagged `prefix` + name.
  void mark_restart(int64_t step);

  /// A resumed run's status gets the curves so far from the metrics file
  /// (its lines up to `step`).
  void reload_status(int64_t step);

  /// The status's fault list and task health for a fault line.
  void note_fault(const std::string& text, int64_t step);

  void write_metrics(const json_object& obj, int64_t step,
                     const std::string& prefix = "");

  std::mutex mtx_;
  std::ostream& out_;
  std::string metrics_path_;
  std::ofstream metrics_;
  std::function<void(const std::string&)> sink_;
  /// A fresh run's first metrics line truncates the file.
  bool metrics_started_ = false;
  bool resumed_ = false;
  std::unique_ptr<tensorboard::event_file> events_;
  /// What name_outputs() named, for open_named_outputs().
  std::string named_logdir_;
  std::string named_hparams_;
  /// A restart marked before the event file was created (a resume before
  /// open_named_outputs()): marked in the file once it is.
  std::optional<int64_t> pending_restart_;
  /// The first failure to write the event file (reported once).
  bool events_failed_ = false;
  progress_line progress_;
  progress_record_writer progress_record_;
  int64_t total_steps_ = 0;
  /// The newest step progress() was given, and the checkpoint a restart
  /// resumes from (-1: none): what the progress record says.
  int64_t last_step_ = 0;
  int64_t checkpoint_step_ = -1;
  double started_unix_ = 0;
  std::shared_ptr<observe::run_status> status_;
};

/// Seconds since the epoch, now.
double unix_now();

} // namespace syncfac
