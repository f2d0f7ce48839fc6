#include "runtime/training_log.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>

#include <nlohmann/json.hpp>
#include <ostream>

#include "runtime/base/error.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/observe/window_figures.hpp"
#include "runtime/tensorboard/event_file.hpp"

namespace syncfac {

namespace {

/// The task and its new state a chief's fault line tells of ("chief:
/// worker 1 lost at ...", "chief: ps:0 is back; ..."), if any. The lines
/// are the chief's (actors/chief.cpp, actors/chief_driver.cpp).
std::pair<std::string, std::string> task_change(const std::string& text) {
  const std::string prefix = "chief: ";
  if (text.compare(0, prefix.size(), prefix) != 0)
    return {};
  auto rest = text.substr(prefix.size());
  auto sp = rest.find(' ');
  if (sp == std::string::npos)
    return {};
  auto task = rest.substr(0, sp);
  auto after = rest.substr(sp + 1);
  if (task == "worker") {
    auto sp2 = after.find(' ');
    if (sp2 == std::string::npos)
      return {};
    task += ":" + after.substr(0, sp2);
    after = after.substr(sp2 + 1);
  }
  if (task.find(':') == std::string::npos)
    return {};
  if (after.compare(0, 4, "lost") == 0)
    return {task, "lost"};
  if (after.compare(0, 7, "is back") == 0
      || after.compare(0, 7, "rejoins") == 0)
    return {task, "back"};
  return {};
}

} // namespace

double unix_now() {
  return std::chrono::duration<double>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

training_log::training_log(std::ostream& out, int64_t total_steps,
                           bool progress,
                           std::shared_ptr<observe::run_status> status)
  : out_(out),
    progress_(total_steps, progress),
    total_steps_(total_steps),
    started_unix_(unix_now()),
    status_(status ? std::move(status)
                   : std::make_shared<observe::run_status>()) {
  status_->set_started(started_unix_);
  status_->set_total_steps(total_steps);
}

training_log::~training_log() = default;

caf::error training_log::open_metrics(const std::string& path) {
  if (path.empty())
    return caf::none;
  // The chief opens it once every node agreed, while other threads log.
  std::lock_guard<std::mutex> guard{mtx_};
  metrics_.open(path, std::ios::out | std::ios::app);
  if (!metrics_)
    return make_error(ec::io_error,
                      "cannot open metrics file '" + path + "' for writing");
  metrics_path_ = path;
  return caf::none;
}

caf::error training_log::open_events(const std::string& logdir,
                                     const std::string& hparams) {
  if (logdir.empty())
    return caf::none;
  auto now = unix_now();
  auto file = tensorboard::event_file::create(logdir, now);
  if (!file)
    return file.error();
  if (!hparams.empty())
    if (auto err = (*file)->text(now, 0, "hparams", hparams))
      return err;
  std::lock_guard<std::mutex> guard{mtx_};
  events_ = std::move(*file);
  if (pending_restart_) {
    auto step = *pending_restart_;
    pending_restart_.reset();
    mark_restart(step);
  }
  return caf::none;
}

void training_log::name_outputs(const std::string& metrics_path,
                                const std::string& logdir,
                                const std::string& hparams) {
  std::lock_guard<std::mutex> guard{mtx_};
  metrics_path_ = metrics_path;
  named_logdir_ = logdir;
  named_hparams_ = hparams;
}

caf::error training_log::open_named_outputs() {
  std::string metrics_path;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    metrics_path = metrics_path_;
  }
  return open_outputs(metrics_path, named_logdir_, named_hparams_);
}

caf::error training_log::open_progress_record() {
  auto writer = progress_record_writer::from_environment();
  if (!writer)
    return writer.error();
  std::lock_guard<std::mutex> guard{mtx_};
  progress_record_ = std::move(*writer);
  return caf::none;
}

void training_log::resume(double started_unix, int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  resumed_ = true;
  if (started_unix > 0 && started_unix <= unix_now())
    started_unix_ = started_unix;
  status_->set_started(started_unix_);
  reload_status(step);
  status_->step(step);
  status_->event(step, "resumed at global step " + std::to_string(step));
  mark_restart(step);
}

void training_log::reload_status(int64_t step) {
  if (metrics_path_.empty())
    return;
  std::ifstream in{metrics_path_};
  for (std::string text; std::getline(in, text);) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("step") || j.contains("source")
        || !j["step"].is_number_integer())
      continue;
    auto at = j["step"].get<int64_t>();
    if (at > step)
      continue;
    auto wall = j.value("wall_s", 0.0);
    if (j.contains("test_loss") && j["test_loss"].is_number()
        && j.contains("test_accuracy") && j["test_accuracy"].is_number()) {
      status_->eval(at, wall, j["test_loss"].get<double>(),
                    j["test_accuracy"].get<double>());
      continue;
    }
    if (!j.contains(observe::window::loss.key))
      continue;
    std::vector<std::pair<std::string, double>> numbers;
    for (const auto& kv : j.items())
      if (kv.value().is_number())
        numbers.emplace_back(kv.key(), kv.value().get<double>());
    status_->train(at, wall, numbers);
  }
}

void training_log::restart_at(int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  status_->event(step, "rolled back to global step " + std::to_string(step));
  mark_restart(step);
}

void training_log::mark_restart(int64_t step) {
  if (!events_ && !named_logdir_.empty()) {
    pending_restart_ = step; // the event file is created later
    return;
  }
  if (!events_ || events_failed_)
    return;
  // Step `step` is done; what is logged again starts at the next one, and
  // TensorBoard drops the earlier events from the START event's step on.
  if (auto err = events_->append(
        tensorboard::session_start_event(unix_now(), step + 1))) {
    events_failed_ = true;
    out_ << "tensorboard: " << render(err) << " (no more events written)\n";
    out_.flush();
  }
}

double training_log::started_unix() const {
  return started_unix_;
}

double training_log::elapsed() const {
  return unix_now() - started_unix_;
}

void training_log::write_metrics(const json_object& obj, int64_t step,
                                 const std::string& prefix) {
  if (sink_)
    sink_(obj.str());
  if (metrics_.is_open()) {
    if (!metrics_started_ && !resumed_) {
      metrics_.close();
      metrics_.open(metrics_path_, std::ios::out | std::ios::trunc);
    }
    metrics_started_ = true;
    metrics_ << obj.str() << '\n';
    metrics_.flush();
  }
  if (!events_ || events_failed_)
    return;
  std::vector<tensorboard::scalar_value> values;
  for (const auto& kvp : obj.numbers())
    if (kvp.first != "step" && kvp.first != "wall_s")
      values.push_back({prefix + kvp.first, static_cast<float>(kvp.second)});
  if (values.empty())
    return;
  if (auto err = events_->scalars(unix_now(), step, values)) {
    // A full disk should not end the run; say so once and stop writing.
    events_failed_ = true;
    out_ << "tensorboard: " << render(err) << " (no more events written)\n";
    out_.flush();
  }
}

void training_log::train(int64_t step, double loss, double accuracy,
                         const json_object& extra) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << "global_step: " << step << " | loss: " << std::setprecision(6)
       << loss << " | accuracy: " << accuracy << "\n";
  out_.flush();
  json_object obj;
  obj.add("step", step)
    .add("wall_s", elapsed())
    .add(observe::window::loss.key, loss)
    .add(observe::window::train_accuracy.key, accuracy);
  obj.merge(extra);
  status_->train(step, elapsed(), obj.numbers());
  write_metrics(obj, step);
}

void training_log::eval(int64_t step, const eval_result& res) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << "global_step: " << step << " | test_loss: " << res.mean_loss()
       << " | test_accuracy: " << res.accuracy() << " (" << res.count
       << " examples)\n";
  out_.flush();
  json_object obj;
  obj.add("step", step)
    .add("wall_s", elapsed())
    .add("test_loss", res.mean_loss())
    .add("test_accuracy", res.accuracy());
  status_->eval(step, elapsed(), res.mean_loss(), res.accuracy());
  write_metrics(obj, step);
}

void training_log::line(const std::string& text) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << text << "\n";
  out_.flush();
}

void training_log::record(const std::string& text, const json_object& fields,
                          const std::string& source) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << text << "\n";
  out_.flush();
  json_object obj;
  obj.add("wall_s", elapsed());
  obj.merge(fields);
  int64_t step = 0;
  for (const auto& kvp : fields.numbers())
    if (kvp.first == "step")
      step = static_cast<int64_t>(kvp.second);
  // The run's own records (not a role's measurements) are its faults.
  if (source.empty())
    note_fault(text, step);
  write_metrics(obj, step, source.empty() ? std::string{} : source + "/");
}

void training_log::fault(const std::string& text) {
  line(text);
  note_fault(text, -1);
}

void training_log::note_fault(const std::string& text, int64_t step) {
  auto change = task_change(text);
  if (!change.first.empty())
    status_->task(change.first, change.second, text);
  status_->event(step, text);
}

void training_log::checkpoint_written(const std::string& path,
                                      int64_t step) {
  status_->checkpoint_written(path);
  std::lock_guard<std::mutex> guard{mtx_};
  checkpoint_step_ = std::max(checkpoint_step_, step);
  if (progress_record_.active())
    progress_record_.write(progress_record{last_step_, total_steps_,
                                           elapsed(), checkpoint_step_});
}

void training_log::checkpoint_restored(int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  checkpoint_step_ = step;
}

void training_log::checkpoint_failed() {
  status_->checkpoint_failed();
}

void training_log::progress(int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  status_->step(step);
  progress_.update(step);
  last_step_ = step;
  if (progress_record_.active())
    progress_record_.write(
      progress_record{step, total_steps_, elapsed(), checkpoint_step_});
}

} // namespace syncfac
