#define BOOST_TEST_MODULE bad_input_limits
#include <boost/test/unit_test.hpp>

// Inputs that asked for more than the machine has, or were not what their
// flag names (docs/robustness.md, "Sizes before allocation", "JSON input",
// "Refuse before writing"): each is refused by a real program, run as a
// child capped by RLIMIT_AS (set in the child before exec, so that a
// regression fails here instead of taking the test machine down), within
// seconds, with an exit code of 1..123, a message naming the thing, and
// no file written.

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/fatal_exception.hpp"
#include "tests/temp_dir.hpp"

using namespace syncfac::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string bin = SYNCFAC_BINARY_DIR "/bin/";

/// The address space each program may use: far below what the refused
/// inputs ask for, well above what a refusing program needs.
constexpr rlim_t address_space_cap = rlim_t{6} << 30;

/// The longest a refusal may take on a busy two-core machine (a refused
/// run is killed then, and fails).
constexpr auto refusal_deadline = 30s;

struct outcome {
  int exit_code = -1; // 128 + signal when killed
  std::string output;
  std::chrono::duration<double> took{};
};

/// Runs `child` in a forked process whose stdout and stderr come back,
/// and collects them; killed (and the case failed) past refusal_deadline.
template <class Child>
outcome run_child(Child child) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    child();
    ::_exit(127);
  }
  ::close(fds[1]);
  outcome result;
  char buf[4096];
  for (;;) {
    auto left = refusal_deadline
                - (std::chrono::steady_clock::now() - start);
    if (left <= 0s) {
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left);
    if (::poll(&p, 1, static_cast<int>(ms.count())) <= 0)
      continue;
    auto n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0)
      break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.took = std::chrono::steady_clock::now() - start;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                       : 128 + WTERMSIG(status);
  return result;
}

/// Runs `program` with `args` under the cap, in `cwd` (run_child).
outcome run_capped(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::string& cwd) {
  return run_child([&] {
    if (::chdir(cwd.c_str()) != 0)
      ::_exit(126);
    rlimit cap{address_space_cap, address_space_cap};
    if (::setrlimit(RLIMIT_AS, &cap) != 0)
      ::_exit(125);
    std::vector<char*> argv;
    auto path = bin + program;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
  });
}

/// A scratch directory for one refused run: its inputs, and the paths it
/// would write its metrics, events, summary and checkpoints to.
struct scratch {
  temp_dir tmp;
  std::string out = tmp.file("out");

  scratch() {
    fs::create_directory(out);
  }

  std::vector<std::string> output_flags() const {
    return {"--metrics", out + "/metrics.jsonl", "--logdir", out + "/events",
            "--summary", out + "/summary.json", "--no_progress"};
  }

  std::string write(const std::string& name, const std::string& text) const {
    auto path = tmp.file(name);
    std::ofstream{path} << text;
    return path;
  }
};

/// `program` with `args` (plus the output flags) must be refused in time,
/// with an exit code of 1..123, every needle said, and nothing written.
void refused(const std::string& program, std::vector<std::string> args,
             const std::vector<std::string>& needles) {
  scratch s;
  auto outputs = s.output_flags();
  args.insert(args.end(), outputs.begin(), outputs.end());
  auto r = run_capped(program, args, s.tmp.path());
  std::string line = program;
  for (const auto& a : args)
    line += " " + a.substr(0, 80);
  BOOST_TEST_MESSAGE(line << " -> " << r.exit_code << " in " << r.took.count()
                          << " s: " << r.output);
  BOOST_TEST((r.exit_code >= 1 && r.exit_code <= 123),
             line << ": exit code " << r.exit_code << "; " << r.output);
  BOOST_TEST(r.took.count() < 30.0, line << " took " << r.took.count());
  for (const auto& needle : needles)
    BOOST_TEST(r.output.find(needle) != std::string::npos,
               "'" << needle << "' not in: " << r.output);
  BOOST_TEST(fs::is_empty(s.out), line << " wrote into " << s.out);
  // A refusal quotes excerpts, never a whole input.
  BOOST_TEST(r.output.size() < 4000, line << ": " << r.output.size()
                                          << " bytes of output");
}

/// A model file of `layers` on `input_shape`.
std::string model_json(const std::string& input_shape,
                       const std::string& layers) {
  return R"({"input_shape": )" + input_shape + R"(, "layers": [)" + layers
         + R"(], "loss": "softmax_cross_entropy"})";
}

std::string dense(const std::string& units) {
  return R"({"type": "dense", "units": )" + units + "}";
}

const std::string flatten = R"({"type": "flatten"})";

std::string conv(const std::string& filters, const std::string& kernel) {
  return R"({"type": "conv2d", "filters": )" + filters + R"(, "kernel": )"
         + kernel + R"(, "padding": "SAME"})";
}

/// An MLP on 28x28 images with one hidden layer of `units`.
std::string hidden_layer(const std::string& units) {
  return model_json("[28, 28, 1]",
                    flatten + ", " + dense(units) + ", " + dense("10"));
}

/// A model of `first` layers on `input_shape`, then flatten and 10 units.
std::string classifier(const std::string& input_shape,
                       const std::string& first) {
  return model_json(input_shape, first + ", " + flatten + ", "
                                   + dense("10"));
}

/// Writes `text` as a model file in a directory of its own and runs the
/// single-process program on it with fake data.
void model_refused(const std::string& text,
                   const std::vector<std::string>& needles) {
  temp_dir files;
  auto path = files.file("model.json");
  std::ofstream{path} << text;
  refused("convnet_mnist_single",
          {"--model_file", path, "--fake_data", "--steps", "1",
           "--fake_train_size", "256", "--fake_test_size", "64"},
          needles);
}

} // namespace

BOOST_AUTO_TEST_SUITE(sizes)

// A typo'd size in a description: refused by the layer, the figure and the
// limit, before any weight is allocated.
BOOST_AUTO_TEST_CASE(huge_layers_in_a_description) {
  model_refused(hidden_layer("1000000000000"),
                {"layer 1 (dense 'fc0')", "this process may use"});
  model_refused(hidden_layer("1099511627776"),
                {"dense 'fc0'", "more than"});
  // Fits physical memory on many machines: only the cap refuses it.
  model_refused(hidden_layer("1048576"),
                {"dense 'fc0'", "RLIMIT_AS"});
  // The conv's 2^39 filters make the dense layer after it the largest.
  model_refused(classifier("[28, 28, 1]", conv("549755813888", "3")),
                {"layer 2 (dense 'fc1') holds 4310085580881930",
                 "more than"});
  model_refused(classifier("[28, 28, 1]", conv("8", "1048576")),
                {"layer 0 (conv2d 'conv0')", "more than"});
}

// Products that wrap 64 bits were accepted before: an input shape and the
// layers after it.
BOOST_AUTO_TEST_CASE(sizes_that_overflow) {
  model_refused(model_json("[1073741824, 1073741824, 1073741824]",
                           flatten + ", " + dense("10")),
                {"input_shape", "more than 2^62"});
  model_refused(model_json("[1073741824, 1073741824, 4]",
                           flatten + ", " + dense("1099511627776")),
                {"layer 1 (dense 'fc0')", "more than 2^62"});
  model_refused(classifier("[65536, 65536, 1]",
                           conv("1099511627776", "4096")),
                {"conv2d 'conv0'", "more than 2^62"});
}

BOOST_AUTO_TEST_CASE(flags_beyond_the_machine) {
  for (auto size : {"1000000000000", "100000000000000000"})
    refused("convnet_mnist_single",
            {"--fake_data", "--steps", "1", "--fake_train_size", size},
            {"--fake_train_size " + std::string{size},
             "this process may use"});
  for (auto workers : {"100000", "2000000"})
    refused("convnet_mnist_single",
            {"--fake_data", "--steps", "1", "--fake_train_size", "256",
             "--fake_test_size", "64", "--worker_replicas", workers},
            {"--worker_replicas " + std::string{workers}, "more than"});
}

// A node of a cluster (each task its own process) refuses the same sizes
// before it listens or writes its metrics, event files or summary: its
// peers need not be there.
BOOST_AUTO_TEST_CASE(a_cluster_node_refuses_before_it_writes) {
  temp_dir files;
  auto cluster = files.file("cluster.json");
  std::ofstream{cluster}
    << R"({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],)"
       R"( "ps": ["localhost:3"]}})";
  auto model = files.file("model.json");
  std::ofstream{model} << hidden_layer("1000000000000");
  // No chief runs here: a refused worker tells the chief why before it
  // exits, waiting for it up to its connect timeout (docs/distributed.md,
  // "One configuration across every node"), which is kept short.
  for (const char* task : {"chief", "worker", "ps"}) {
    refused("convnet_mnist_distributed",
            {"--cluster", cluster, "--job_name", task, "--task", "0",
             "--fake_data", "--model_file", model},
            {"layer 1 (dense 'fc0')", "this process may use"});
    // A PS shard holds no data: only the tasks that load it refuse.
    if (std::string{task} != "ps")
      refused("convnet_mnist_distributed",
              {"--cluster", cluster, "--job_name", task, "--task", "0",
               "--fake_data", "--fake_train_size", "1000000000000",
               "--connect_timeout_ms", "3000"},
              {"--fake_train_size 1000000000000", "this process may use"});
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(files)

// A device, a FIFO or a directory where a file belongs: refused by name at
// once instead of read for gigabytes (or for ever).
BOOST_AUTO_TEST_CASE(not_regular_files) {
  temp_dir tmp;
  auto fifo = tmp.file("fifo");
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto dir = tmp.file("dir");
  fs::create_directory(dir);
  struct form {
    std::string path;
    std::string kind;
  };
  std::vector<form> forms{{"/dev/zero", "is a character device"},
                          {"/dev/urandom", "is a character device"},
                          {fifo, "is a FIFO"},
                          {dir, "is a directory"}};
  for (const auto& f : forms) {
    refused("convnet_mnist_single",
            {"--model_file", f.path, "--fake_data", "--steps", "1"},
            {"model file '" + f.path + "'", f.kind});
    refused("convnet_mnist_single", {"--data", f.path, "--steps", "1"},
            {f.path, f.kind});
    refused("convnet_mnist_single", {"--config-file", f.path},
            {"--config-file '" + f.path + "'", f.kind});
    refused("convnet_mnist_distributed",
            {"--cluster", f.path, "--job_name", "chief", "--task", "0",
             "--fake_data", "--steps", "1"},
            {f.path, f.kind});
  }
}

BOOST_AUTO_TEST_CASE(files_too_large) {
  temp_dir tmp;
  // 17 MiB of spaces around a valid description.
  auto path = tmp.file("padded.json");
  {
    std::ofstream out{path};
    out << std::string(size_t{17} << 20, ' ')
        << model_json("[28, 28, 1]", flatten + ", " + dense("10"));
  }
  refused("convnet_mnist_single",
          {"--model_file", path, "--fake_data", "--steps", "1"},
          {"model file '" + path + "'", "more than the 16777216 bytes"});
  auto cluster = tmp.file("cluster.json");
  std::ofstream{cluster} << std::string(size_t{17} << 20, ' ') << "{}";
  refused("convnet_mnist_distributed",
          {"--cluster", cluster, "--job_name", "chief", "--task", "0",
           "--fake_data", "--steps", "1"},
          {cluster, "more than the 16777216 bytes"});
  auto flags = tmp.file("flags.ini");
  {
    std::ofstream out{flags};
    for (int i = 0; i < 100000; ++i)
      out << "# a comment line that pads the file past its limit\n";
  }
  refused("convnet_mnist_single", {"--config-file", flags},
          {"--config-file '" + flags + "'", "more than the 1048576 bytes"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(json)

// The rules of the one JSON reader, in a model file and in a cluster file.
BOOST_AUTO_TEST_CASE(duplicate_keys_depth_and_excerpts) {
  model_refused(R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},)"
                R"( {"type": "dense", "units": 10, "units": 100000}],)"
                R"( "loss": "softmax_cross_entropy"})",
                {"key \"units\" appears twice in \"layers[1]\""});
  model_refused(R"({"input_shape": [28, 28, 1], "loss": "x", "layers": [],)"
                R"( "loss": "softmax_cross_entropy"})",
                {"key \"loss\" appears twice at the top level"});
  std::string deep(100, '[');
  model_refused(R"({"input_shape": )" + deep,
                {"nested deeper than 64 levels"});
  // A megabyte-long field name and type: quoted as an excerpt.
  std::string long_name(1 << 20, 'x');
  model_refused(R"({"input_shape": [28, 28, 1], ")" + long_name
                  + R"(": 1, "layers": [], "loss": "softmax_cross_entropy"})",
                {"unknown field 'xxxx", "x...'"});
  model_refused(model_json("[28, 28, 1]",
                           R"({"type": ")" + long_name + R"("})"),
                {"unknown layer type 'xxxx", "x...'"});
  temp_dir tmp;
  auto cluster = tmp.file("cluster.json");
  std::ofstream{cluster}
    << R"({"cluster": {"chief": ["localhost:2222"]}, "task": )"
       R"({"type": "chief", "index": 0, "index": 1}})";
  refused("convnet_mnist_distributed",
          {"--cluster", cluster, "--job_name", "chief", "--task", "0",
           "--fake_data", "--steps", "1"},
          {"key \"index\" appears twice in \"task\""});
}

// Validation is linear in the layers: 20000 of them, the last one's name
// taken by the first, refused within the deadline (minutes before).
BOOST_AUTO_TEST_CASE(many_layers_validate_in_linear_time) {
  std::string layers = R"({"type": "flatten"}, {"type": "dense", "units": 2, "name": "same"})";
  for (int i = 0; i < 20000; ++i)
    layers += R"(, {"type": "dense", "units": 2})";
  layers += R"(, {"type": "dense", "units": 2, "name": "same"})";
  model_refused(model_json("[28, 28, 1]", layers),
                {"layer 20002 (dense 'same')", "used by an earlier layer"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(exceptions)

// An actor that dies of an exception ends the program with its role and
// the exception's text (before, its peers waited on it and the process
// hung): a real actor system in a child process, an actor throwing
// std::bad_alloc and std::system_error.
BOOST_AUTO_TEST_CASE(an_actor_dying_of_an_exception_ends_the_program) {
  struct form {
    const char* role;
    int which;
    const char* needle;
  };
  for (auto f : {form{"device", 0, "the device actor died of out of memory"},
                 form{"worker", 1, "the worker actor died of "
                                   "std::system_error: "}}) {
    auto r = run_child([&] {
      caf::actor_system_config cfg;
      caf::actor_system sys{cfg};
      auto role = f.role;
      auto which = f.which;
      auto a = sys.spawn([role, which](caf::event_based_actor* self) {
        syncfac::end_program_on_exception(self, role);
        return caf::behavior{[which](int) {
          if (which == 0)
            throw std::bad_alloc{};
          throw std::system_error{EAGAIN, std::generic_category(),
                                  "thread creation failed"};
        }};
      });
      caf::scoped_actor self{sys};
      self->send(a, 1);
      // Without the handler the actor would end quietly and this wait
      // would run out: exit 99 says so.
      std::this_thread::sleep_for(20s);
      ::_exit(99);
    });
    BOOST_TEST_CONTEXT(f.role) {
      BOOST_TEST(r.exit_code == 1, r.output);
      BOOST_TEST(r.output.find(f.needle) != std::string::npos, r.output);
      BOOST_TEST(r.took.count() < 15.0);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
