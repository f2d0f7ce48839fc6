#include "runtime/checkpoint/checkpoint_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

constexpr const char* file_prefix = "ckpt-";
constexpr const char* file_suffix = ".safetensors";
constexpr const char* temp_prefix = ".ckpt-";
constexpr const char* temp_suffix = ".tmp";

std::string errno_text(int code) {
  return std::strerror(code);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size()
         && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Parses a canonical non-negative decimal (no sign, no leading zeros).
bool parse_step(const std::string& digits, int64_t& out) {
  if (digits.empty() || digits.size() > 18
      || (digits.size() > 1 && digits[0] == '0'))
    return false;
  int64_t x = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return false;
    x = x * 10 + (c - '0');
  }
  out = x;
  return true;
}

// The step of a checkpoint file name, if it is one.
bool step_of(const std::string& name, int64_t& step) {
  std::string p = file_prefix;
  std::string s = file_suffix;
  if (!starts_with(name, p) || !ends_with(name, s)
      || name.size() <= p.size() + s.size())
    return false;
  return parse_step(name.substr(p.size(), name.size() - p.size() - s.size()),
                    step);
}

// Lists the directory's entry names; ENOENT gives `missing`.
caf::error list_names(const std::string& dir, std::vector<std::string>& names,
                      bool& missing) {
  missing = false;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) {
      missing = true;
      return caf::error{};
    }
    return make_error(ec::io_error, "cannot list checkpoint directory " + dir
                                      + ": " + errno_text(errno));
  }
  for (;;) {
    errno = 0;
    auto* e = ::readdir(d);
    if (e == nullptr) {
      auto code = errno;
      ::closedir(d);
      if (code != 0)
        return make_error(ec::io_error, "cannot list checkpoint directory "
                                          + dir + ": " + errno_text(code));
      return caf::error{};
    }
    names.emplace_back(e->d_name);
  }
}

// Writes all of `n` bytes to `fd`.
int write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    auto put = ::write(fd, p, std::min(n, size_t{1} << 30));
    if (put < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return 0;
}

} // namespace

checkpoint_store::checkpoint_store(std::string directory, size_t keep_last)
  : directory_(std::move(directory)), keep_last_(std::max<size_t>(1, keep_last)) {
  while (directory_.size() > 1 && directory_.back() == '/')
    directory_.pop_back();
}

std::string checkpoint_store::path_of(int64_t step) const {
  return directory_ + "/" + file_prefix + std::to_string(step) + file_suffix;
}

std::vector<std::string> checkpoint_store::remove_temporaries() const {
  std::vector<std::string> names;
  bool missing = false;
  std::vector<std::string> removed;
  if (list_names(directory_, names, missing) || missing)
    return removed;
  for (const auto& name : names)
    if (starts_with(name, temp_prefix) && ends_with(name, temp_suffix)) {
      auto path = directory_ + "/" + name;
      if (::unlink(path.c_str()) == 0)
        removed.push_back(path);
    }
  return removed;
}

caf::expected<std::vector<int64_t>> checkpoint_store::list_steps() const {
  std::vector<std::string> names;
  bool missing = false;
  if (auto err = list_names(directory_, names, missing))
    return err;
  std::vector<int64_t> steps;
  for (const auto& name : names) {
    int64_t step = 0;
    if (step_of(name, step))
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

caf::expected<checkpoint_save_result>
checkpoint_store::save(int64_t step, const parameter_set& tensors,
                       tensor_metadata metadata) const {
  auto final_path = path_of(step);
  if (step < 0 || step > 999'999'999'999'999'999)
    return make_error(ec::invalid_argument,
                      "checkpoint step " + std::to_string(step)
                        + " is outside [0, 10^18)");
  if (metadata.count(checkpoint_checksum_key) != 0)
    return make_error(ec::invalid_argument,
                      std::string{"checkpoint metadata may not set '"}
                        + checkpoint_checksum_key
                        + "': the store computes it");
  auto given = metadata.find(checkpoint_step_key);
  if (given != metadata.end() && given->second != std::to_string(step))
    return make_error(ec::invalid_argument,
                      "checkpoint metadata global_step '" + given->second
                        + "' differs from the step saved, "
                        + std::to_string(step));
  for (const auto& x : tensors)
    if (!x.value.all_finite())
      return make_error(ec::non_finite,
                        "refusing to write " + final_path + ": tensor '"
                          + x.name + "' holds NaN or Inf");
  metadata[checkpoint_step_key] = std::to_string(step);
  metadata[checkpoint_checksum_key] = format_crc32c(data_crc32c(tensors));
  // Check the header before creating anything.
  if (auto header = safetensors_header(tensors, metadata); !header)
    return with_context(header.error(), "cannot write " + final_path);
  // Checkpoints hold the parameters: owner-only, a directory this store
  // creates as well as its files (an existing directory keeps its mode, e.g.
  // a volume shared by a cluster's nodes). docs/checkpoints.md.
  std::error_code fs_err;
  bool existed = std::filesystem::is_directory(directory_, fs_err);
  std::filesystem::create_directories(directory_, fs_err);
  if (!fs_err && !existed)
    std::filesystem::permissions(directory_,
                                 std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace,
                                 fs_err);
  if (fs_err)
    return make_error(ec::io_error, "cannot create checkpoint directory "
                                      + directory_ + ": " + fs_err.message());
  checkpoint_save_result result;
  result.path = final_path;
  result.removed = remove_temporaries();
  auto temp_path = directory_ + "/" + temp_prefix + std::to_string(step)
                   + file_suffix + "." + std::to_string(::getpid())
                   + temp_suffix;
  int fd = ::open(temp_path.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(ec::io_error, "cannot create " + temp_path + " (for "
                                      + final_path + "): " + errno_text(errno));
  auto fail = [&](const std::string& what, int code) {
    if (fd >= 0)
      ::close(fd);
    ::unlink(temp_path.c_str());
    return make_error(ec::io_error, "cannot " + what + " " + temp_path
                                      + " (for " + final_path
                                      + "): " + errno_text(code)
                                      + "; the temporary file was removed "
                                        "and older checkpoints are untouched");
  };
  int write_errno = 0;
  auto err = write_safetensors(
    [&](const void* p, size_t n) -> caf::error {
      write_errno = write_all(fd, p, n);
      if (write_errno != 0)
        return make_error(ec::io_error);
      result.bytes += n;
      return caf::error{};
    },
    tensors, metadata);
  if (err) {
    if (write_errno != 0)
      return fail("write", write_errno);
    ::close(fd);
    ::unlink(temp_path.c_str());
    return with_context(err, "cannot write " + final_path);
  }
  if (::fsync(fd) != 0)
    return fail("fsync", errno);
  if (::close(fd) != 0) {
    fd = -1;
    return fail("close", errno);
  }
  fd = -1;
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0)
    return fail("rename", errno);
  int dir_fd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0)
    return make_error(ec::io_error, "wrote " + final_path
                                      + " but cannot open its directory to "
                                        "fsync it: "
                                      + errno_text(errno));
  if (::fsync(dir_fd) != 0 && errno != EINVAL) {
    auto code = errno;
    ::close(dir_fd);
    return make_error(ec::io_error, "wrote " + final_path
                                      + " but cannot fsync its directory: "
                                      + errno_text(code));
  }
  ::close(dir_fd);
  // Rotation: keep `step` and the newest keep_last - 1 below it.
  auto steps = list_steps();
  if (!steps) {
    result.warnings.push_back(render(steps.error()));
    return result;
  }
  size_t kept = 1;
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    if (*it == step)
      continue;
    if (*it < step && kept < keep_last_) {
      ++kept;
      continue;
    }
    auto path = path_of(*it);
    if (::unlink(path.c_str()) == 0)
      result.removed.push_back(path);
    else
      result.warnings.push_back("cannot remove old checkpoint " + path + ": "
                                + errno_text(errno));
  }
  return result;
}

caf::expected<checkpoint> read_checkpoint_file(const std::string& path,
                                               int64_t expected_step) {
  auto contents = read_safetensors_file(path);
  if (!contents)
    return std::move(contents.error());
  auto& meta = contents->metadata;
  auto sum = meta.find(checkpoint_checksum_key);
  if (sum == meta.end())
    return make_error(ec::bad_data, path + ": no checksum in __metadata__: "
                                           "not a syncfac checkpoint");
  auto computed = format_crc32c(contents->data_crc32c);
  if (sum->second != computed)
    return make_error(ec::bad_data, path + ": checksum mismatch (stored "
                                      + sum->second + ", data gives "
                                      + computed + "): the data is corrupt");
  auto step_text = meta.find(checkpoint_step_key);
  int64_t step = 0;
  if (step_text == meta.end() || !parse_step(step_text->second, step))
    return make_error(ec::bad_data,
                      path + ": __metadata__ lacks a valid global_step");
  if (expected_step >= 0 && step != expected_step)
    return make_error(ec::bad_data, path + ": global_step "
                                      + step_text->second
                                      + " differs from the step in its name, "
                                      + std::to_string(expected_step));
  checkpoint result;
  result.global_step = step;
  result.path = path;
  result.tensors = std::move(contents->tensors);
  result.metadata = std::move(meta);
  return result;
}

caf::expected<checkpoint> checkpoint_store::load(int64_t step) const {
  return read_checkpoint_file(path_of(step), step);
}

caf::expected<checkpoint_load_result> checkpoint_store::load_latest() const {
  checkpoint_load_result result;
  std::vector<std::string> names;
  bool missing = false;
  if (auto err = list_names(directory_, names, missing))
    return err;
  if (missing) {
    result.warnings.push_back("checkpoint directory " + directory_
                              + " does not exist: no checkpoint");
    return result;
  }
  for (const auto& path : remove_temporaries())
    result.warnings.push_back("removed " + path
                              + ", the temporary file of an interrupted save");
  auto steps = list_steps();
  if (!steps)
    return std::move(steps.error());
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    auto ckpt = load(*it);
    if (ckpt) {
      result.latest = std::move(*ckpt);
      return result;
    }
    result.warnings.push_back("skipped checkpoint " + path_of(*it) + ": "
                              + render(ckpt.error()));
  }
  if (!steps->empty()) {
    std::string why;
    for (const auto& w : result.warnings)
      why += (why.empty() ? "" : "; ") + w;
    return make_error(ec::bad_data, "no checkpoint in " + directory_
                                      + " reads and verifies: " + why);
  }
  return result;
}

caf::error validate_compatible(const std::vector<expected_variable>& expected,
                               const checkpoint& ckpt, bool allow_extra) {
  std::map<std::string, const tensor*> held;
  for (const auto& x : ckpt.tensors)
    held.emplace(x.name, &x.value);
  std::set<std::string> wanted;
  for (const auto& [name, shape] : expected) {
    wanted.insert(name);
    auto it = held.find(name);
    if (it == held.end())
      return make_error(ec::unknown_name,
                        ckpt.path + " was written by a different model: it "
                                    "lacks variable '"
                          + name + "' " + to_string(shape));
    if (it->second->shape() != shape)
      return make_error(ec::shape_mismatch,
                        ckpt.path + " was written by a different model: "
                                    "variable '"
                          + name + "' has shape "
                          + it->second->shape_string()
                          + " in the checkpoint but " + to_string(shape)
                          + " in the model");
  }
  if (!allow_extra)
    for (const auto& x : ckpt.tensors)
      if (wanted.count(x.name) == 0)
        return make_error(ec::unknown_name,
                          ckpt.path + " was written by a different model: "
                                      "it holds variable '"
                            + x.name + "' " + x.value.shape_string()
                            + ", which the model lacks");
  return caf::error{};
}

caf::error validate_compatible(const parameter_set& expected,
                               const checkpoint& ckpt, bool allow_extra) {
  std::vector<expected_variable> xs;
  xs.reserve(expected.size());
  for (const auto& x : expected)
    xs.emplace_back(x.name, x.value.shape());
  return validate_compatible(xs, ckpt, allow_extra);
}

} // namespace syncfac
