#include "runtime/training_log.hpp"

#include <iomanip>
#include <ostream>

#include "runtime/error.hpp"

namespace syncfac {

training_log::training_log(std::ostream& out, int64_t total_steps,
                           bool progress)
  : out_(out),
    progress_(total_steps, progress),
    start_(std::chrono::steady_clock::now()) {
}

caf::error training_log::open_metrics(const std::string& path) {
  if (path.empty())
    return caf::none;
  metrics_.open(path, std::ios::out | std::ios::trunc);
  if (!metrics_)
    return make_error(ec::io_error,
                      "cannot open metrics file '" + path + "' for writing");
  return caf::none;
}

double training_log::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - start_)
    .count();
}

void training_log::write_metrics(const json_object& obj) {
  if (metrics_.is_open()) {
    metrics_ << obj.str() << '\n';
    metrics_.flush();
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
    .add("loss", loss)
    .add("train_accuracy", accuracy);
  obj.merge(extra);
  write_metrics(obj);
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
  write_metrics(obj);
}

void training_log::line(const std::string& text) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << text << "\n";
  out_.flush();
}

void training_log::record(const std::string& text,
                          const json_object& fields) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.clear();
  out_ << text << "\n";
  out_.flush();
  json_object obj;
  obj.add("wall_s", elapsed());
  obj.merge(fields);
  write_metrics(obj);
}

void training_log::progress(int64_t step) {
  std::lock_guard<std::mutex> guard{mtx_};
  progress_.update(step);
}

} // namespace syncfac
