#include "runtime/observe/run_status.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/json.hpp"
#include "runtime/observe/window_figures.hpp"
#include "runtime/training_log.hpp"

namespace syncfac::observe {

namespace {

/// The newest events the status page lists.
constexpr size_t max_events = 100;

std::string curve_json(const std::deque<curve_point>& curve) {
  std::string out = "[";
  char buf[96];
  for (size_t i = 0; i < curve.size(); ++i) {
    const auto& p = curve[i];
    if (!std::isfinite(p.value)) {
      // JSON has no NaN: a diverged loss shows as a gap.
      std::snprintf(buf, sizeof buf, "%s[%lld,%.6g,null]", i > 0 ? "," : "",
                    static_cast<long long>(p.step), p.wall_s);
      out += buf;
      continue;
    }
    std::snprintf(buf, sizeof buf, "%s[%lld,%.6g,%.8g]", i > 0 ? "," : "",
                  static_cast<long long>(p.step), p.wall_s, p.value);
    out += buf;
  }
  return out + "]";
}

} // namespace

run_status::run_status() : started_unix_(unix_now()) {
}

void run_status::set_total_steps(int64_t steps) {
  std::lock_guard<std::mutex> guard{mtx_};
  total_steps_ = steps;
}

void run_status::set_started(double started_unix) {
  std::lock_guard<std::mutex> guard{mtx_};
  started_unix_ = started_unix;
}

void run_status::add_point(std::deque<curve_point>& curve, curve_point p) {
  curve.push_back(p);
  if (curve.size() <= max_points)
    return;
  // Keep the first and the newest; drop every other one in between.
  std::deque<curve_point> thin;
  for (size_t i = 0; i < curve.size(); ++i)
    if (i % 2 == 0 || i + 1 == curve.size())
      thin.push_back(curve[i]);
  curve.swap(thin);
}

void run_status::train(
  int64_t step, double wall_s,
  const std::vector<std::pair<std::string, double>>& numbers) {
  std::lock_guard<std::mutex> guard{mtx_};
  global_step_ = std::max(global_step_, step);
  if (prev_step_ >= 0 && step > prev_step_ && wall_s > prev_wall_)
    steps_per_s_ = static_cast<double>(step - prev_step_)
                   / (wall_s - prev_wall_);
  prev_step_ = step;
  prev_wall_ = wall_s;
  for (const auto& kvp : numbers) {
    if (kvp.first == "step" || kvp.first == "wall_s")
      continue;
    last_[kvp.first] = kvp.second;
    if (kvp.first == window::loss.key)
      add_point(loss_, {step, wall_s, kvp.second});
    else if (kvp.first == window::train_accuracy.key)
      add_point(accuracy_, {step, wall_s, kvp.second});
  }
}

void run_status::eval(int64_t step, double wall_s, double loss,
                      double accuracy) {
  std::lock_guard<std::mutex> guard{mtx_};
  test_loss_ = loss;
  test_accuracy_ = accuracy;
  ++evaluations_;
  add_point(test_loss_curve_, {step, wall_s, loss});
  add_point(test_accuracy_curve_, {step, wall_s, accuracy});
}

void run_status::step(int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  global_step_ = std::max(global_step_, step);
}

void run_status::checkpoint_written(const std::string& path) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++checkpoints_;
  last_checkpoint_ = path;
  last_checkpoint_unix_ = unix_now();
}

void run_status::checkpoint_failed() {
  std::lock_guard<std::mutex> guard{mtx_};
  ++checkpoint_failures_;
}

void run_status::event(int64_t step, const std::string& what) {
  std::lock_guard<std::mutex> guard{mtx_};
  events_.push_back({unix_now(), step < 0 ? global_step_ : step, what});
  if (events_.size() > max_events)
    events_.erase(events_.begin());
  // A rollback goes back in steps: the rate restarts from there.
  prev_step_ = -1;
}

void run_status::task(const std::string& task, const std::string& state,
                      const std::string& detail) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = tasks_[task];
  if (t.state != state)
    t.since_unix = unix_now();
  t.state = state;
  t.detail = detail;
}

std::vector<metric_family> run_status::families(
  const std::vector<std::pair<std::string, std::string>>& labels) const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<metric_family> out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out.push_back({name, help, metric_type::gauge, {{labels, v}}});
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out.push_back({name, help, metric_type::counter, {{labels, v}}});
  };
  auto now = unix_now();
  gauge("syncfac_global_step", "The run's global step.",
        static_cast<double>(global_step_));
  gauge("syncfac_total_steps", "Global steps the run trains for.",
        static_cast<double>(total_steps_));
  gauge("syncfac_steps_per_second",
        "Global steps per second over the last log window.", steps_per_s_);
  gauge("syncfac_run_seconds", "Seconds since the run first started "
                               "(resumes included).",
        now - started_unix_);
  // The last training line's numbers, each as its table says.
  for (const auto& fig : window::all) {
    auto i = last_.find(fig.key);
    if (i != last_.end())
      out.push_back({fig.metric, fig.help, fig.type, {{labels, i->second}}});
  }
  if (evaluations_ > 0) {
    gauge("syncfac_test_loss", "Test loss of the last evaluation.",
          test_loss_);
    gauge("syncfac_test_accuracy", "Test accuracy of the last evaluation.",
          test_accuracy_);
  }
  counter("syncfac_evaluations_total", "Test-set evaluations so far.",
          static_cast<double>(evaluations_));
  counter("syncfac_checkpoints_written_total",
          "Checkpoints this process wrote.",
          static_cast<double>(checkpoints_));
  counter("syncfac_checkpoint_failures_total",
          "Checkpoints that failed (the previous one stays).",
          static_cast<double>(checkpoint_failures_));
  if (last_checkpoint_unix_ > 0)
    gauge("syncfac_checkpoint_age_seconds",
          "Seconds since the newest checkpoint was written.",
          now - last_checkpoint_unix_);
  counter("syncfac_run_events_total",
          "Faults, rollbacks and resumes the run went through.",
          static_cast<double>(events_.size()));
  if (!tasks_.empty()) {
    metric_family up{"syncfac_task_up",
                     "Whether a task of the run is up (1) or lost (0), as "
                     "the chief sees it.",
                     metric_type::gauge,
                     {}};
    for (const auto& kvp : tasks_) {
      auto l = labels;
      l.emplace_back("peer", kvp.first);
      up.samples.push_back({l, kvp.second.state == "lost" ? 0.0 : 1.0});
    }
    out.push_back(std::move(up));
  }
  return out;
}

std::string run_status::json() const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto now = unix_now();
  json_object obj;
  obj.add("now_unix", now)
    .add("started_unix", started_unix_)
    .add("global_step", global_step_)
    .add("total_steps", total_steps_)
    .add("steps_per_s", steps_per_s_);
  json_object last;
  for (const auto& kvp : last_)
    last.add(kvp.first, kvp.second);
  obj.add("last", last);
  if (evaluations_ > 0)
    obj.add("test_loss", test_loss_).add("test_accuracy", test_accuracy_);
  json_object ckpt;
  ckpt.add("written", checkpoints_)
    .add("failed", checkpoint_failures_)
    .add("newest", last_checkpoint_)
    .add("age_s", last_checkpoint_unix_ > 0 ? now - last_checkpoint_unix_
                                            : -1.0);
  obj.add("checkpoints", ckpt);
  // Curves and lists are arrays, which json_object does not write: the
  // object's text gets them appended before its closing brace.
  auto text = obj.str();
  text.pop_back();
  text += ", \"curves\": {\"loss\": " + curve_json(loss_)
          + ", \"train_accuracy\": " + curve_json(accuracy_)
          + ", \"test_loss\": " + curve_json(test_loss_curve_)
          + ", \"test_accuracy\": " + curve_json(test_accuracy_curve_) + "}";
  text += ", \"events\": [";
  for (size_t i = 0; i < events_.size(); ++i) {
    json_object e;
    e.add("unix_time", events_[i].unix_time)
      .add("step", events_[i].step)
      .add("what", events_[i].what);
    text += (i > 0 ? ", " : "") + e.str();
  }
  // The training line's figures the status page lists (with what "last"
  // has of them), in the table's order.
  text += "], \"figures\": [";
  bool first_figure = true;
  for (const auto& fig : window::all) {
    json_object f;
    f.add("key", fig.key).add("unit", fig.unit).add("help", fig.help);
    text += (first_figure ? "" : ", ") + f.str();
    first_figure = false;
  }
  text += "], \"tasks\": [";
  bool first = true;
  for (const auto& kvp : tasks_) {
    json_object t;
    t.add("task", kvp.first)
      .add("state", kvp.second.state)
      .add("detail", kvp.second.detail)
      .add("since_s", now - kvp.second.since_unix);
    text += (first ? "" : ", ") + t.str();
    first = false;
  }
  return text + "]}";
}

} // namespace syncfac::observe
