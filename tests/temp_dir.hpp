#pragma once

// A scratch directory for the runtime suites (data, checkpoints).

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <stdlib.h>

namespace syncfac::test {

/// A fresh directory (mkdtemp) removed with everything in it on scope exit.
class temp_dir {
public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string{base != nullptr ? base : "/tmp"}
                          + "/syncfac-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }

  ~temp_dir() {
    // A test may have taken the owner's rights away (an unreadable
    // directory); give them back so that everything can be removed.
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::string& path() const {
    return path_;
  }

  std::string file(const std::string& name) const {
    return path_ + "/" + name;
  }

private:
  std::string path_;
};

} // namespace syncfac::test
