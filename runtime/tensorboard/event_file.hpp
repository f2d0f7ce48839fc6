#pragma once

// One TensorBoard event file of a log directory
// (events.out.tfevents.<unix seconds>.<host>), written record by record and
// flushed after each so a TensorBoard reading the directory sees the run as
// it goes. Every process start makes a new file; a resumed run's new file
// continues the steps of the earlier ones, and TensorBoard joins the files
// of a directory into one curve per tag.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/tensorboard/event_record.hpp"

namespace syncfac::tensorboard {

class event_file {
public:
  /// Creates `logdir` if needed and a new event file in it, starting with
  /// the file_version event. ec::io_error names the directory or the file.
  static caf::expected<std::unique_ptr<event_file>>
  create(const std::string& logdir, double wall_time);

  ~event_file();

  event_file(const event_file&) = delete;
  event_file& operator=(const event_file&) = delete;

  /// The file's path.
  const std::string& path() const noexcept {
    return path_;
  }

  /// Appends one event (encoded by event_record.hpp); ec::io_error naming
  /// the file when it cannot be written (a full disk).
  caf::error append(const std::string& event);

  caf::error scalars(double wall_time, int64_t step,
                     const std::vector<scalar_value>& values) {
    return append(scalars_event(wall_time, step, values));
  }

  caf::error text(double wall_time, int64_t step, const std::string& tag,
                  const std::string& text) {
    return append(text_event(wall_time, step, tag, text));
  }

private:
  event_file(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {
  }

  std::FILE* file_;
  std::string path_;
};

/// "events.out.tfevents.<seconds>.<host>" for a file made at `wall_time`.
std::string event_file_name(double wall_time, const std::string& host);

} // namespace syncfac::tensorboard
