#pragma once

// Runs a program of this build as a real child process and captures its
// combined output and exit status; loopback cluster files for the cluster
// tests (examples, roles). Scratch directories: tests/temp_dir.hpp.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "tests/examples/case_output.hpp"
#include "tests/temp_dir.hpp"

namespace syncfac::test {

/// Where this build's programs are (syncfac-launch, the examples).
inline const std::string bin = SYNCFAC_BINARY_DIR "/bin/";

/// The programs most suites start: the launcher, the distributed example
/// (what it starts once per task) and the single-process example.
inline const std::string launcher = bin + "syncfac-launch";
inline const std::string distributed = bin + "convnet_mnist_distributed";
inline const std::string single = bin + "convnet_mnist_single";

/// One worker without initial tokens on the synthetic data, one thread
/// per device and no final evaluation: a deterministic run, whose every
/// step takes the worker's next batch (docs/distributed.md, "Who hosts
/// what").
inline const std::string deterministic_flags =
  " --fake_data --fake_train_size 2048 --fake_test_size 500"
  " --batch_size 32 --seed 3 --threads 1 --no_progress --num_tokens 0"
  " --no_final_eval";

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

/// Whether `output` contains `text`.
inline bool said(const std::string& output, const std::string& text) {
  return output.find(text) != std::string::npos;
}

/// A scratch directory with the paths a run writes its metrics and its
/// summary to.
struct run_files {
  temp_dir tmp;
  std::string metrics = tmp.file("metrics.jsonl");
  std::string summary = tmp.file("summary.json");
};

/// The last `count` lines of `output`: what a failure shows of a process.
inline std::string last_lines(const std::string& output, size_t count = 30) {
  auto end = output.size();
  while (end > 0 && output[end - 1] == '\n')
    --end;
  auto begin = end;
  for (size_t lines = 0; begin > 0 && lines < count; --begin)
    if (output[begin - 1] == '\n' && ++lines == count)
      break;
  return output.substr(begin, end - begin);
}

/// `res` (a process_result, or any result with its exit_code and output)
/// exited 0; else the case ends showing the process's last lines.
template <class Result>
void require_success(const Result& res) {
  BOOST_REQUIRE_MESSAGE(res.exit_code == 0,
                        "exited " << res.exit_code << "; its last lines:\n"
                                  << last_lines(res.output));
}

/// Runs `command_line`, which must succeed; a failure names the command
/// with the last lines it printed, and a failed case shows its output
/// (tests/examples/case_output.hpp).
inline process_result run_ok(const std::string& command_line) {
  auto res = run_program(command_line);
  case_output::keep(command_line, res.output);
  BOOST_TEST_CONTEXT(command_line) {
    require_success(res);
  }
  return res;
}

/// Debian's Fashion-MNIST (dataset-fashion-mnist, from
/// scripts/install-deps.sh) is there; a case that trains on it fails
/// without it rather than skip.
inline void require_fashion_mnist() {
  BOOST_REQUIRE_MESSAGE(std::filesystem::is_directory(
                          "/usr/share/datasets/fashion-mnist"),
                        "Debian's dataset-fashion-mnist is not installed "
                        "(scripts/install-deps.sh installs it)");
}

/// Runs `command_line`, which must fail (exit status not 0) with an output
/// that says every one of `needles`.
inline void check_refused(const std::string& command_line,
                          const std::vector<std::string>& needles) {
  auto res = run_program(command_line);
  BOOST_TEST(res.exit_code != 0, command_line);
  for (const auto& needle : needles)
    BOOST_TEST(res.output.find(needle) != std::string::npos,
               "no '" << needle << "' in: " << res.output);
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

/// The first number that follows `"key": ` in a JSON text, which must
/// have one.
inline double number(const std::string& json, const std::string& key) {
  auto xs = json_numbers(json, key);
  BOOST_REQUIRE_MESSAGE(!xs.empty(), "no \"" << key << "\" in " << json);
  return xs.front();
}

/// Each counter of the summary named in `expected` has its value there.
inline void
check_counters(const std::string& summary,
               const std::vector<std::pair<std::string, double>>& expected) {
  for (const auto& [name, value] : expected)
    BOOST_TEST(number(summary, name) == value, name);
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

/// The lowest port of the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range), 32768 where it cannot be read.
inline int ephemeral_port_low() {
  std::ifstream range{"/proc/sys/net/ipv4/ip_local_port_range"};
  int low = 0;
  return range >> low && low > 0 ? low : 32768;
}

/// Whether port can be bound on 0.0.0.0 and on 127.0.0.1 now (without
/// SO_REUSEADDR, so that a port some socket still lingers on counts as
/// taken).
inline bool port_bindable(uint16_t port) {
  for (auto address : {INADDR_ANY, INADDR_LOOPBACK}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(address);
    addr.sin_port = htons(port);
    bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (!ok)
      return false;
  }
  return true;
}

/// A port nobody listens on right now, chosen at random below the kernel's
/// ephemeral range and never one this process was handed before, as
/// scripts/free_ports.py chooses them. Never the kernel's own choice (bind
/// to port 0): that lies inside the ephemeral range, where an outgoing
/// connection of any process, the cluster's own tasks included, may take
/// it before the task binds it (a worker failed so in CI: "cannot publish
/// this node on 127.0.0.1 port 50493").
inline uint16_t free_port() {
  static std::set<uint16_t> handed;
  static std::mt19937 pick{std::random_device{}()};
  constexpr int lowest = 10000;
  int highest = ephemeral_port_low() - 1;
  BOOST_REQUIRE_MESSAGE(highest - lowest >= 1000,
                        "free_port: the ephemeral range starts at "
                          << highest + 1 << ": no room below it");
  std::uniform_int_distribution<int> ports{lowest, highest};
  for (int tries = 0; tries < 5000; ++tries) {
    auto port = static_cast<uint16_t>(ports(pick));
    if (handed.count(port) == 0 && port_bindable(port)) {
      handed.insert(port);
      return port;
    }
  }
  BOOST_FAIL("free_port: no free port in 5000 tries ("
             << lowest << "-" << highest << ")");
  return 0;
}

/// The string value of the first "key" in a JSON text ("" if none).
inline std::string json_string(const std::string& text,
                               const std::string& key) {
  auto needle = "\"" + key + "\": \"";
  auto pos = text.find(needle);
  if (pos == std::string::npos)
    return {};
  pos += needle.size();
  return text.substr(pos, text.find('"', pos) - pos);
}

/// A loopback cluster file with `counts` tasks per job; returns its path.
inline std::string write_cluster(const temp_dir& tmp,
                                 const std::map<std::string, int>& counts) {
  std::string json = "{\"cluster\": {";
  bool first_job = true;
  for (const auto& [job, n] : counts) {
    json += std::string{first_job ? "" : ", "} + "\"" + job + "\": [";
    first_job = false;
    for (int i = 0; i < n; ++i)
      json += std::string{i == 0 ? "" : ", "} + "\"127.0.0.1:"
              + std::to_string(free_port()) + "\"";
    json += "]";
  }
  json += "}}";
  auto path = tmp.file("cluster.json");
  std::ofstream{path} << json << "\n";
  return path;
}

/// One certificate per task of `cluster` and their CA
/// (scripts/make-cluster-certs.sh), in tmp's "certs"; returns that
/// directory.
inline std::string write_cluster_certs(const temp_dir& tmp,
                                       const std::string& cluster) {
  auto certs = tmp.file("certs");
  run_ok("bash " SYNCFAC_SOURCE_DIR "/scripts/make-cluster-certs.sh --cluster "
         + cluster + " " + certs);
  return certs;
}

} // namespace syncfac::test
