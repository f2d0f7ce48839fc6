#include "runtime/tensorboard/event_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "runtime/base/error.hpp"

namespace syncfac::tensorboard {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

} // namespace

std::string event_file_name(double wall_time, const std::string& host) {
  return "events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time))
         + "." + host;
}

caf::expected<std::unique_ptr<event_file>>
event_file::create(const std::string& logdir, double wall_time) {
  namespace fs = std::filesystem;
  std::error_code ec_fs;
  fs::create_directories(logdir, ec_fs);
  if (ec_fs || !fs::is_directory(logdir))
    return make_error(ec::io_error, "--logdir '" + logdir
                                      + "': cannot create the directory"
                                      + (ec_fs ? ": " + ec_fs.message()
                                               : std::string{}));
  // A second file within the same second (a quick resume) gets a suffix;
  // TensorBoard reads a directory's files in name order, so the suffixed
  // one comes after the first.
  auto base = (fs::path{logdir} / event_file_name(wall_time, host_name()))
                .string();
  auto path = base;
  for (int n = 1; fs::exists(path); ++n)
    path = base + "." + std::to_string(n);
  // Owner-only, as checkpoints: the summaries describe the parameters
  // (docs/observability.md). O_EXCL: as fopen's "x", never an existing file.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  auto* f = fd < 0 ? nullptr : ::fdopen(fd, "wb");
  if (f == nullptr && fd >= 0)
    ::close(fd);
  if (f == nullptr)
    return make_error(ec::io_error, "--logdir '" + logdir
                                      + "': cannot create event file '" + path
                                      + "': " + std::strerror(errno));
  std::unique_ptr<event_file> out{new event_file(f, path)};
  if (auto err = out->append(file_version_event(wall_time)))
    return err;
  return out;
}

event_file::~event_file() {
  std::fclose(file_);
}

caf::error event_file::append(const std::string& event) {
  auto rec = frame_record(event);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size()
      || std::fflush(file_) != 0)
    return make_error(ec::io_error, "cannot write event file '" + path_
                                      + "': " + std::strerror(errno));
  return caf::none;
}

} // namespace syncfac::tensorboard
