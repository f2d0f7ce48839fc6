#include "runtime/input_file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode))
    return {};
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

caf::error cannot_read(const std::string& label) {
  return make_error(ec::io_error,
                    label + ": cannot be read: " + std::strerror(errno));
}

caf::error too_large(const std::string& label, uint64_t size,
                     uint64_t max_bytes) {
  return make_error(ec::invalid_config,
                    label + ": " + std::to_string(size)
                      + " bytes, more than the " + std::to_string(max_bytes)
                      + " bytes such a file may have");
}

/// The size `st` gives, or why it is no input: not a regular file, or
/// larger than `max_bytes`.
caf::expected<uint64_t> checked_size(const struct stat& st,
                                     const std::string& label,
                                     uint64_t max_bytes) {
  if (auto kind = kind_of(st.st_mode); !kind.empty())
    return make_error(ec::invalid_config,
                      label + ": is " + kind + ", not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    return too_large(label, size, max_bytes);
  return size;
}

/// Closes the descriptor however the reader returns.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return {};
  return kind_of(st.st_mode);
}

caf::expected<uint64_t> input_file_size(const std::string& path,
                                        const std::string& label,
                                        uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return cannot_read(label);
  return checked_size(st, label, max_bytes);
}

caf::expected<std::string> read_input_file(const std::string& path,
                                           const std::string& label,
                                           uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO without a writer must not wait; the fstat
  // below refuses it, as it refuses whatever replaced the checked path.
  fd_closer file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  struct stat st {};
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0)
    return cannot_read(label);
  auto size = checked_size(st, label, max_bytes);
  if (!size)
    return size.error();
  std::string text;
  text.reserve(static_cast<size_t>(*size));
  char buf[65536];
  for (;;) {
    auto n = ::read(file.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return make_error(ec::io_error,
                        label + ": read failed: " + std::strerror(errno));
    if (n == 0)
      return text;
    if (text.size() + static_cast<uint64_t>(n) > max_bytes)
      return too_large(label, text.size() + static_cast<uint64_t>(n),
                       max_bytes);
    text.append(buf, static_cast<size_t>(n));
  }
}

} // namespace syncfac
