#pragma once

// Runs a program of this build as a real child process and captures its
// combined output and exit status.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include <boost/test/unit_test.hpp>

namespace syncfac::test {

struct process_result {
  int exit_code = -1;
  std::string output;
};

inline process_result run_program(const std::string& command_line) {
  process_result result;
  std::string cmd = command_line + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0)
    result.output.append(buf.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Every number that follows `"key": ` in `text`, in order.
inline std::vector<double> json_numbers(const std::string& text,
                                        const std::string& key) {
  std::vector<double> result;
  auto needle = "\"" + key + "\": ";
  for (auto pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + 1))
    result.push_back(std::stod(text.substr(pos + needle.size())));
  return result;
}

/// Checks that a metrics file holds `lines` training lines and that the
/// loss of the last is below `factor` times the first's.
inline void check_loss_fell(const std::string& metrics, size_t lines,
                            double factor = 0.5) {
  auto losses = json_numbers(read_file(metrics), "loss");
  BOOST_REQUIRE_EQUAL(losses.size(), lines);
  BOOST_TEST(losses.back() < factor * losses.front(),
             "loss fell from " << losses.front() << " to " << losses.back());
}

/// A fresh directory under the system's temp directory, removed with
/// everything in it at the end of the scope.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    auto tmpl = (std::filesystem::temp_directory_path() / "syncfac-XXXXXX")
                  .string();
    path = mkdtemp(tmpl.data());
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string file(const std::string& name) const {
    return (path / name).string();
  }
};

} // namespace syncfac::test
