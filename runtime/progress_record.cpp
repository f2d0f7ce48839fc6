#include "runtime/progress_record.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/json.hpp"

namespace syncfac {

std::string progress_record::to_line() const {
  json_object obj;
  obj.add("record", std::string{"progress"})
    .add("global_step", global_step)
    .add("total_steps", total_steps)
    .add("wall_s", wall_s)
    .add("checkpoint_step", checkpoint_step);
  return obj.str() + "\n";
}

caf::expected<progress_record>
progress_record::parse(const std::string& line) {
  auto text = line;
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  auto fail = [&](const std::string& why) {
    return make_error(ec::bad_message,
                      "progress record '" + text + "': " + why);
  };
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return fail("not a JSON object");
  auto kind = doc.find("record");
  if (kind == doc.end() || !kind->is_string() || *kind != "progress")
    return fail("no \"record\": \"progress\"");
  progress_record r;
  for (auto [key, field] :
       {std::pair{"global_step", &r.global_step},
        std::pair{"total_steps", &r.total_steps}}) {
    auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
      return fail(std::string{"no \""} + key + "\" integer >= 0");
    *field = it->get<int64_t>();
  }
  auto wall = doc.find("wall_s");
  if (wall == doc.end() || !wall->is_number()
      || !std::isfinite(wall->get<double>()))
    return fail("no finite \"wall_s\" number");
  r.wall_s = wall->get<double>();
  auto ckpt = doc.find("checkpoint_step");
  if (ckpt != doc.end()) {
    if (!ckpt->is_number_integer() || ckpt->get<int64_t>() < -1)
      return fail("\"checkpoint_step\" is not an integer >= -1");
    r.checkpoint_step = ckpt->get<int64_t>();
  }
  return r;
}

bool operator==(const progress_record& x, const progress_record& y) {
  return x.global_step == y.global_step && x.total_steps == y.total_steps
         && x.wall_s == y.wall_s && x.checkpoint_step == y.checkpoint_step;
}

progress_record_writer::progress_record_writer(int fd) : fd_(fd) {
  if (fd_ >= 0)
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

progress_record_writer::~progress_record_writer() {
  if (fd_ >= 0)
    ::close(fd_);
}

progress_record_writer::progress_record_writer(
  progress_record_writer&& other) noexcept
  : fd_(std::exchange(other.fd_, -1)) {
}

progress_record_writer&
progress_record_writer::operator=(progress_record_writer&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

caf::expected<progress_record_writer>
progress_record_writer::from_environment() {
  const char* value = std::getenv(progress_fd_variable);
  if (value == nullptr || *value == '\0')
    return progress_record_writer{};
  std::string text = value;
  auto fail = [&](const std::string& why) {
    return make_error(ec::invalid_config, std::string{progress_fd_variable}
                                            + "='" + text + "': " + why);
  };
  char* end = nullptr;
  errno = 0;
  auto fd = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size() || fd < 3
      || fd > 1 << 20)
    return fail("not a file descriptor number >= 3 (the launcher sets it "
                "to the pipe of the chief's progress records)");
  auto flags = ::fcntl(static_cast<int>(fd), F_GETFL);
  if (flags < 0)
    return fail("not an open file descriptor");
  if ((flags & O_ACCMODE) == O_RDONLY)
    return fail("open for reading only");
  // Not inherited by what this process starts.
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return progress_record_writer{static_cast<int>(fd)};
}

void progress_record_writer::write(const progress_record& r) {
  if (fd_ < 0)
    return;
  auto line = r.to_line();
  for (;;) {
    auto n = ::write(fd_, line.data(), line.size());
    if (n >= 0)
      return; // all of it: shorter than PIPE_BUF
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return; // the reader is behind; the next record says more
    // The descriptor broke (EPIPE would need the reader gone, but the
    // launcher keeps its end open until this process exited, and dies
    // only with its children: PR_SET_PDEATHSIG): stop writing.
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

} // namespace syncfac
