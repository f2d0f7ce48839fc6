#define BOOST_TEST_MODULE bad_input
#include <boost/test/unit_test.hpp>

// Bad input, one case per kind (docs/design.md §6, docs/robustness.md): each
// gets a clear error that names the offending thing, and loses nothing.
// Against the real parts: a PS shard and a covariance actor in a real
// actor system, the real programs for cluster and data files, the real
// checkpoint store on real files. Other suites test pieces of this in
// depth; this one proves the whole list in one place.

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/covariance.hpp"
#include "actors/ps_shard.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/data/idx.hpp"
#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/examples/process.hpp"
#include "tests/helpers.hpp"
#include "tests/kfac_test_utils.hpp"
#include "tests/runtime/data_fixtures.hpp"
#include "tests/temp_dir.hpp"

using namespace syncfac;
using namespace syncfac::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// Every needle must occur in `text`.
void says_all(const std::string& text, const std::vector<std::string>& needles) {
  for (const auto& needle : needles)
    BOOST_TEST(contains(text, needle), "'" << needle << "' not in: " << text);
}

// -- a PS shard ---------------------------------------------------------------

/// Variables 0 and 1 dense (a layer's weight and bias), 2 sparse (rows).
constexpr size_t weight = 0;
constexpr size_t bias = 1;
constexpr size_t embed = 2;

parameter_set shard_variables() {
  return {{"fc/w", mat(2, 2, {1, 2, 3, 4})},
          {"fc/b", vec({0.5f, -0.5f})},
          {"embed", mat(4, 2, {0, 1, 2, 3, 4, 5, 6, 7})}};
}

/// Worker w's gradients at step 0, scaled by k; rows 1 and 3 of embed.
gradient_push good_push(int32_t worker, float k) {
  gradient_push p;
  p.worker = worker;
  p.local_step = 0;
  p.dense = {{"fc/w", mat(2, 2, {k, 2 * k, -k, k / 2})},
             {"fc/b", vec({k, -k})}};
  p.sparse = {{"embed", {1, 3}, mat(2, 2, {k, k, -k, 2 * k})}};
  return p;
}

/// Everything a shard shows of itself.
struct shard_view {
  parameter_set values;
  parameter_set averages;
  shard_status status;
};

/// A shard (SGD, learning rate 1) that holds worker 0's push of step 0
/// when a test starts: a refused push must leave that partial sum alone.
struct shard_fixture : actor_fixture {
  ps_actor ps;

  shard_fixture() {
    ps_shard_config c;
    c.index = 3;
    c.variables = shard_variables();
    c.sparse_variables = {"embed"};
    c.optimizer = test::optimizer_of(optimizer_kind::sgd, 1.0f);
    ps = keep(spawn_ps_shard(sys, std::move(c)));
    BOOST_REQUIRE(require<push_ack>(ps, push_atom::value, good_push(0, 0.25f))
                    .accepted);
  }

  shard_view view() {
    return {require<shard_params>(ps, pull_atom::value).values,
            require<shard_params>(ps, pull_atom::value, average_atom::value)
              .values,
            require<shard_status>(ps, status_atom::value)};
  }

  /// Sends `bad`, which must be refused with `code` and a message holding
  /// every needle; afterwards the shard must look as before except for
  /// the refusal counted (on `variable`, if the message names one).
  void refused(const gradient_push& bad, ec code,
               const std::vector<std::string>& needles,
               std::optional<size_t> variable) {
    auto before = view();
    auto msg = failure(ask<push_ack>(ps, push_atom::value, bad), code);
    BOOST_TEST_MESSAGE("refused: " << msg);
    says_all(msg, needles);
    says_all(msg, {"ps shard 3", "worker " + std::to_string(bad.worker)});
    auto after = view();
    BOOST_TEST(same(after.values, before.values));
    BOOST_TEST(same(after.averages, before.averages));
    auto expected = before.status;
    ++expected.refused_pushes;
    if (variable)
      ++expected.variables.at(*variable).refused;
    // What the shard sent grows with this test's own views of it (their
    // pulls and status requests): traffic, not state.
    expected.sent = after.status.sent;
    BOOST_TEST(caf::deep_to_string(after.status)
               == caf::deep_to_string(expected));
  }

  /// Worker 1's push and the apply of step 0 work, and the update is the
  /// average of the two good pushes only: nothing of a refused push got
  /// into an accumulator, nothing of the first good one was lost.
  void good_round_still_works() {
    BOOST_TEST(require<push_ack>(ps, push_atom::value, good_push(1, 0.75f))
                 .accepted);
    auto done = require<applied>(ps, apply_atom::value, int64_t{0},
                                 int64_t{2});
    BOOST_TEST(done.global_step == 1);
    BOOST_TEST(done.gradients == 2);
    // w - mean(g): the mean of k = 0.25 and 0.75 is k = 0.5, exactly.
    auto mean = good_push(0, 0.5f);
    auto want = shard_variables();
    for (size_t i : {weight, bias})
      for (int64_t j = 0; j < want[i].value.size(); ++j)
        want[i].value[j] -= mean.dense[i].value[j];
    const auto& rows = mean.sparse[0];
    for (size_t r = 0; r < rows.indices.size(); ++r)
      for (int64_t j = 0; j < 2; ++j)
        want[embed].value[rows.indices[r] * 2 + j]
          -= rows.rows[static_cast<int64_t>(r) * 2 + j];
    BOOST_TEST(same(require<shard_params>(ps, pull_atom::value).values, want));
    auto st = require<shard_status>(ps, status_atom::value);
    BOOST_TEST(st.accepted_pushes == 2);
    BOOST_TEST(st.stale_pushes == 0);
  }
};

/// good_push(9, 100) with one entry spoilt: a push whose other entries are
/// fine (and would show in the average if any were kept).
gradient_push spoilt(const std::function<void(gradient_push&)>& spoil) {
  auto p = good_push(9, 100.0f);
  spoil(p);
  return p;
}

// -- a covariance actor -------------------------------------------------------

/// What a recorder saw, shared with the test thread.
using factor_log = shared_log<factor_set>;

/// The covariance actor's only output is the factor sets it hands to its
/// inverse actors: a recorder in that role shows them. get_atom answers
/// after every hand-off sent before it (mailbox order).
using recorder_actor
  = inverse_actor::extend<caf::replies_to<caf::get_atom>::with<int64_t>>;

recorder_actor::behavior_type recorder(std::shared_ptr<factor_log> log) {
  return {
    [=](factors_atom, const factor_set& set) {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->sets.push_back(set);
      return caf::ok_atom::value;
    },
    [=](status_atom) { return inverse_status{}; },
    [](rewire_atom, std::vector<ps_actor>&) {
      // Shards do not matter here: nothing is shipped.
    },
    [=](caf::get_atom) {
      std::lock_guard<std::mutex> guard{log->mtx};
      return static_cast<int64_t>(log->sets.size());
    },
  };
}

/// fc: A 3x3, G 2x2.
kfac_layer fc_layer() {
  return kfac_layer{"fc", layer_kind::dense, "fc/w", "fc/b", 3, 2, 1};
}

tensor a_stat(float k) {
  return mat(3, 3, {2 * k, 0.3f, 0.1f, 0.3f, 1 + k, 0.2f, 0.1f, 0.2f, 1});
}

tensor g_stat(float k) {
  return mat(2, 2, {1 + k, 0.4f * k, 0.4f * k, 0.8f});
}

/// A layer's statistics as matrices (the fields set one by one: the
/// struct may grow).
layer_stats factors(const std::string& layer, tensor a, tensor g) {
  layer_stats x;
  x.layer = layer;
  x.a = std::move(a);
  x.g = std::move(g);
  return x;
}

stats_update stats(int64_t step, layer_stats layer) {
  stats_update u;
  u.worker = 4;
  u.step = step;
  u.examples = 8;
  u.layers = {std::move(layer)};
  return u;
}

stats_update good_stats(int64_t step, float k) {
  return stats(step, factors("fc", a_stat(k), g_stat(k)));
}

/// Two covariance actors (index 2) on the same layer, each with its
/// recorder, inverting after every update: `subject` gets the bad
/// updates, `reference` only the good ones; both got step 0's.
struct covariance_fixture : actor_fixture {
  struct watched {
    covariance_actor actor;
    std::shared_ptr<factor_log> log = std::make_shared<factor_log>();
    recorder_actor rec;
  };

  watched subject;
  watched reference;

  covariance_fixture() {
    for (auto* w : {&subject, &reference}) {
      w->rec = sys.spawn(recorder, w->log);
      spawned.push_back(caf::actor_cast<caf::actor>(w->rec));
      covariance_config c;
      c.index = 2;
      c.layers = {fc_layer()};
      c.kfac.invert_every = 1;
      c.inverses = {w->rec};
      c.inverse_of = {0};
      c.request_timeout = 10s;
      w->actor = keep(spawn_covariance(sys, std::move(c)));
      BOOST_REQUIRE(send(*w, good_stats(0, 1.0f)).accepted);
    }
  }

  stats_ack send(watched& w, const stats_update& u) {
    auto ack = require<stats_ack>(w.actor, stats_atom::value, u);
    require<int64_t>(w.rec, caf::get_atom::value);
    return ack;
  }

  /// Sends `bad` to the subject, which must refuse it with `code` and a
  /// message holding every needle, hand nothing on, and count it.
  void refused(const stats_update& bad, ec code,
               const std::vector<std::string>& needles) {
    auto before = require<covariance_status>(subject.actor, status_atom::value);
    auto msg = failure(ask<stats_ack>(subject.actor, stats_atom::value, bad),
                       code);
    BOOST_TEST_MESSAGE("refused: " << msg);
    says_all(msg, needles);
    says_all(msg, {"covariance actor 2", "worker 4"});
    require<int64_t>(subject.rec, caf::get_atom::value);
    auto after = require<covariance_status>(subject.actor, status_atom::value);
    auto expected = before;
    ++expected.received;
    ++expected.refused;
    expected.last_error = msg;
    BOOST_TEST(caf::deep_to_string(after) == caf::deep_to_string(expected));
    BOOST_TEST(subject.log->get().size() == 1u);
  }

  /// Step 1's update folds into both actors alike: the subject's factors
  /// are bit for bit the reference's, which never saw a bad update.
  void factors_unchanged() {
    BOOST_TEST(send(subject, good_stats(1, 3.0f)).cov_updates == 2);
    BOOST_TEST(send(reference, good_stats(1, 3.0f)).cov_updates == 2);
    auto got = subject.log->get();
    auto want = reference.log->get();
    BOOST_REQUIRE_EQUAL(got.size(), 2u);
    BOOST_REQUIRE_EQUAL(want.size(), 2u);
    for (size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST(got[i].step == want[i].step);
      BOOST_REQUIRE_EQUAL(got[i].layers.size(), 1u);
      BOOST_TEST(got[i].layers[0].cov_updates == want[i].layers[0].cov_updates);
      BOOST_TEST((got[i].layers[0].a == want[i].layers[0].a));
      BOOST_TEST((got[i].layers[0].g == want[i].layers[0].g));
    }
    // The comparison means something: the second update moved them.
    BOOST_TEST((got[1].layers[0].a != got[0].layers[0].a));
  }
};

// -- programs -----------------------------------------------------------------

/// A file's bytes, to show that a program that refused it left it alone.
std::string contents(const std::string& path) {
  return read_file(path);
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, bytes(text.begin(), text.end()));
}

/// A small valid MNIST-format data directory (plain IDX files).
void write_dataset(const temp_dir& dir) {
  auto images = [&](const std::string& name, int64_t n) {
    idx_array x;
    x.dims = {n, 28, 28};
    x.data = pattern(static_cast<size_t>(n * 28 * 28));
    BOOST_REQUIRE(!write_idx(dir.file(name), x, false));
  };
  auto labels = [&](const std::string& name, int64_t n) {
    idx_array x;
    x.dims = {n};
    for (int64_t i = 0; i < n; ++i)
      x.data.push_back(static_cast<uint8_t>(i % 10));
    BOOST_REQUIRE(!write_idx(dir.file(name), x, false));
  };
  images("train-images-idx3-ubyte", 64);
  labels("train-labels-idx1-ubyte", 64);
  images("t10k-images-idx3-ubyte", 32);
  labels("t10k-labels-idx1-ubyte", 32);
}

// -- checkpoints --------------------------------------------------------------

parameter_set model(float salt) {
  return {{"conv1/weights", mat(2, 3, {1, -2, 3.5f, 0, 0.25f, 7})},
          {"conv1/biases", vec({0.25f + salt, -0.5f})}};
}

/// A store with the checkpoints of steps 10 and 20.
checkpoint_store two_checkpoints(const temp_dir& dir) {
  checkpoint_store store{dir.file("ckpt"), 3};
  for (int64_t step : {10, 20}) {
    auto saved = store.save(step, model(static_cast<float>(step)));
    BOOST_REQUIRE_MESSAGE(saved, why(saved));
  }
  return store;
}

/// The newest checkpoint that loads must be `step`, with its tensors.
void latest_is(const checkpoint_store& store, int64_t step) {
  auto loaded = store.load_latest();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_REQUIRE(loaded->latest);
  BOOST_TEST(loaded->latest->global_step == step);
  BOOST_TEST(same(loaded->latest->tensors, model(static_cast<float>(step))));
}

/// What a forked child wrote to a pipe, and how it ended.
struct child_result {
  int status = 0;
  std::string text;
};

/// Runs `body` in a forked child (no actor system is running in this
/// test: only this thread forks) and returns what it reported.
child_result in_child(const std::function<std::string()>& body) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto text = body();
    auto n = ::write(fds[1], text.data(), text.size());
    ::_exit(n == static_cast<ssize_t>(text.size()) ? 0 : 3);
  }
  ::close(fds[1]);
  child_result result;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0)
    result.text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  BOOST_REQUIRE(::waitpid(pid, &result.status, 0) == pid);
  return result;
}

/// Caps this process's address space at what it uses now plus `spare`
/// bytes (in a child: for good); an error text if it cannot.
std::optional<std::string> limit_address_space(size_t spare) {
  size_t pages = 0;
  std::ifstream statm{"/proc/self/statm"};
  if (!(statm >> pages))
    return std::string{"cannot read /proc/self/statm"};
  struct rlimit lim;
  lim.rlim_cur = lim.rlim_max
    = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + spare;
  if (::setrlimit(RLIMIT_AS, &lim) != 0)
    return std::string{"setrlimit failed: "} + std::strerror(errno);
  return std::nullopt;
}

} // namespace

// -- cluster files ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(malformed_cluster_file) {
  temp_dir tmp;
  struct bad_file {
    std::string name;
    std::string text;
    std::string needle;
  };
  std::vector<bad_file> files{
    {"syntax.json", R"({"cluster": {"chief": ["localhost:2222"],})",
     "not JSON"},
    {"port.json",
     R"({"cluster": {"chief": ["localhost:2222"], "worker": )"
     R"(["localhost:2223", "localhost:99999"]}})",
     "cluster.worker[1] \"localhost:99999\": port out of range (1..65535)"},
    {"job.json",
     R"({"cluster": {"chief": ["localhost:2222"], "wrker": ["localhost:2223"]}})",
     "cluster.wrker: unknown job \"wrker\""},
    {"twice.json",
     R"({"cluster": {"chief": ["localhost:2222"], "ps": ["localhost:2222"]}})",
     "cluster.ps[0] \"localhost:2222\": duplicate address"},
    // Without a chief job worker 0 is the chief; without either, no task
    // could be.
    {"chief.json", R"({"cluster": {"ps": ["localhost:2223"]}})",
     "no \"chief\" job and no \"worker\" job"},
    {"chiefs.json",
     R"({"cluster": {"chief": ["localhost:2222", "localhost:2224"]}})",
     "cluster.chief: 2 entries (one chief at most"},
    {"entry.json", R"({"cluster": {"chief": ["localhost:2222"], "ps": [7]}})",
     "cluster.ps[0]: not a \"host:port\" string (found number 7)"},
    // Beyond a double: nlohmann's out_of_range escaped the parser and
    // ended the program (fuzz_cluster_spec found it).
    {"huge.json",
     R"({"cluster": {"chief": ["localhost:2222"], "ps": [1e400]}})",
     "not JSON: number overflow parsing '1e400'"},
  };
  for (const auto& f : files) {
    auto path = tmp.file(f.name);
    write_text(path, f.text);
    auto node = run_program(bin + "convnet_mnist_distributed --cluster " + path
                            + " --job_name chief --task 0 --fake_data");
    BOOST_TEST_MESSAGE(f.name << " (node): " << node.output);
    BOOST_TEST(node.exit_code != 0, f.name << ": " << node.exit_code);
    BOOST_TEST(node.exit_code < 128, f.name << ": killed by a signal");
    says_all(node.output, {"cluster file '" + path + "'", f.needle});
    auto launch = run_program(bin + "syncfac-launch --cluster " + path
                              + " --program " + bin
                              + "convnet_mnist_distributed -- --fake_data");
    BOOST_TEST(launch.exit_code == 2, f.name << ": " << launch.exit_code);
    says_all(launch.output, {"cluster file '" + path + "'", f.needle});
    // Refused before anything started; the file is as it was.
    BOOST_TEST(!contains(launch.output, "started"), launch.output);
    BOOST_TEST(contents(path) == f.text);
  }
  auto missing = tmp.file("missing.json");
  auto node = run_program(bin + "convnet_mnist_distributed --cluster "
                          + missing + " --job_name chief --task 0");
  BOOST_TEST(node.exit_code != 0);
  says_all(node.output, {missing, "cannot be read"});
}

BOOST_AUTO_TEST_CASE(task_names_that_are_not_utf8) {
  // Command-line text goes into messages as JSON strings; nlohmann's
  // dump() threw on invalid UTF-8 and the programs died in
  // std::terminate (fuzz_cluster_spec found it).
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto launch = run_program(bin + "syncfac-launch --cluster " + cluster
                            + " --kill \"$(printf '\\335p@1')\" -- --fake_data");
  BOOST_TEST(launch.exit_code == 2, launch.output);
  // The byte is shown as U+FFFD.
  says_all(launch.output, {"task \"\xEF\xBF\xBDp\""});
  auto node = run_program(bin + "convnet_mnist_distributed --cluster "
                          + cluster + " --job_name \"$(printf '\\377')\" --task 0");
  BOOST_TEST(node.exit_code != 0);
  BOOST_TEST(node.exit_code < 128, "killed by a signal: " << node.output);
  says_all(node.output, {"\"\xEF\xBF\xBD\""});
}

// -- data files ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(missing_data_files) {
  temp_dir tmp;
  auto nowhere = tmp.file("nowhere");
  auto res = run_program(bin + "convnet_mnist_single --data_dir " + nowhere
                         + " --steps 1");
  BOOST_TEST(res.exit_code != 0);
  says_all(res.output, {nowhere, "no such directory"});
  write_dataset(tmp);
  fs::remove(tmp.file("t10k-labels-idx1-ubyte"));
  res = run_program(bin + "convnet_mnist_single --data_dir " + tmp.path()
                    + " --steps 1");
  BOOST_TEST(res.exit_code != 0);
  says_all(res.output, {tmp.file("t10k-labels-idx1-ubyte") + "(.gz): not "
                                                              "found"});
}

BOOST_AUTO_TEST_CASE(corrupt_data_files) {
  struct corruption {
    std::string file;
    std::function<bytes(const bytes&)> spoil;
    std::string needle;
  };
  std::vector<corruption> cases{
    {"train-images-idx3-ubyte",
     [](const bytes& x) { return bytes(x.begin(), x.end() - 100); },
     "truncated: header says 50176 bytes of data, found 50076"},
    {"train-labels-idx1-ubyte",
     [](const bytes& x) {
       auto y = x;
       y[0] = 0x42;
       return y;
     },
     "not an IDX file"},
    {"t10k-images-idx3-ubyte",
     [](const bytes& x) {
       auto z = gzip_bytes(x);
       return bytes(z.begin(), z.begin() + static_cast<long>(z.size() / 2));
     },
     "truncated gzip stream"},
    // A header claiming 2^31 - 1 bytes in a 20-byte file: refused without
    // allocating them (fuzz_idx found the allocation).
    {"t10k-labels-idx1-ubyte",
     [](const bytes&) {
       return concat(idx_header({0x7fffffffu}), bytes(12, 1));
     },
     "truncated: header says 2147483647 bytes of data, found 12"},
    {"t10k-labels-idx1-ubyte",
     [](const bytes& x) {
       auto y = x;
       y.back() = 12;
       return y;
     },
     "label 12 at index 31 is not below 10"},
  };
  for (const auto& c : cases) {
    temp_dir tmp;
    write_dataset(tmp);
    auto path = tmp.file(c.file);
    auto spoilt = c.spoil(read_bytes(path));
    write_bytes(path, spoilt);
    auto res = run_program(bin + "convnet_mnist_single --data_dir "
                           + tmp.path() + " --steps 1 --threads 1");
    BOOST_TEST_MESSAGE(c.file << ": " << res.output);
    BOOST_TEST(res.exit_code != 0);
    BOOST_TEST(res.exit_code < 128, "killed by a signal: " << res.output);
    says_all(res.output, {path, c.needle});
    BOOST_TEST((read_bytes(path) == spoilt), "the program changed " << path);
  }
  // The 20-byte file claiming 2^31 - 1 bytes, read with little memory to
  // spare: sizing the buffer from the header (as the reader did) fails.
  temp_dir small;
  auto claim = small.file("claim-idx1-ubyte");
  write_bytes(claim, concat(idx_header({0x7fffffffu}), bytes(12, 1)));
  auto child = in_child([&] {
    if (auto err = limit_address_space(256 << 20))
      return *err;
    try {
      auto x = read_idx(claim);
      return x ? std::string{"read"} : render(x.error());
    } catch (const std::exception& e) {
      return std::string{"threw "} + e.what();
    }
  });
  BOOST_TEST(child.text.rfind("bad_data", 0) == 0, child.text);
  says_all(child.text, {claim, "found 12"});
  // The same directory, unspoilt, trains: the reader is not the problem.
  temp_dir tmp;
  write_dataset(tmp);
  auto res = run_program(bin + "convnet_mnist_single --data_dir " + tmp.path()
                         + " --steps 2 --batch_size 16 --threads 1");
  BOOST_TEST(res.exit_code == 0, res.output);
}

// -- gradients ----------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(gradient_with_the_wrong_shape, shard_fixture) {
  refused(spoilt([](gradient_push& p) { p.dense[0].value = tensor{tensor_shape{2, 3}}; }),
          ec::shape_mismatch,
          {"variable 'fc/w' gradient has shape [2, 3], expected [2, 2]"},
          weight);
  refused(spoilt([](gradient_push& p) { p.dense[1].value = vec({1}); }),
          ec::shape_mismatch, {"variable 'fc/b'", "[1]", "expected [2]"},
          bias);
  refused(spoilt([](gradient_push& p) {
            p.sparse[0].rows = mat(2, 3, {1, 2, 3, 4, 5, 6});
          }),
          ec::shape_mismatch,
          {"variable 'embed' 2 indices need rows of shape [2, 2], got [2, 3]"},
          embed);
  good_round_still_works();
}

BOOST_FIXTURE_TEST_CASE(non_finite_gradients, shard_fixture) {
  refused(spoilt([](gradient_push& p) {
            p.dense[1].value[1] = std::numeric_limits<float>::quiet_NaN();
          }),
          ec::non_finite,
          {"variable 'fc/b' gradient holds NaN or Inf (first at element 1)"},
          bias);
  refused(spoilt([](gradient_push& p) {
            p.dense[0].value[0] = -std::numeric_limits<float>::infinity();
          }),
          ec::non_finite, {"variable 'fc/w'", "element 0"}, weight);
  refused(spoilt([](gradient_push& p) {
            p.sparse[0].rows[3] = std::numeric_limits<float>::infinity();
          }),
          ec::non_finite,
          {"variable 'embed' row for index 3 at position 1 holds NaN or Inf"},
          embed);
  good_round_still_works();
}

BOOST_FIXTURE_TEST_CASE(message_for_an_unknown_variable, shard_fixture) {
  refused(spoilt([](gradient_push& p) { p.dense[1].name = "fc/bias"; }),
          ec::unknown_name, {"unknown variable 'fc/bias'"}, std::nullopt);
  refused(spoilt([](gradient_push& p) { p.sparse[0].variable = "embedding"; }),
          ec::unknown_name, {"unknown variable 'embedding'"}, std::nullopt);
  // The same variable twice is no better.
  refused(spoilt([](gradient_push& p) { p.dense.push_back(p.dense[0]); }),
          ec::bad_message, {"variable 'fc/w' appears twice"}, weight);
  // An inverse for a layer the shard does not hold.
  auto before = view();
  inverse_set set;
  layer_inverse inv;
  inv.layer = "fc";
  inv.a = identity(3);
  inv.g = identity(2);
  set.layers = {inv};
  auto msg = failure(ask<caf::ok_atom>(ps, inverse_atom::value, set),
                     ec::unknown_name);
  says_all(msg, {"ps shard 3", "inverse for layer 'fc'"});
  auto after = view();
  BOOST_TEST(same(after.values, before.values));
  BOOST_TEST(after.status.refused_inverses == 1);
  BOOST_TEST(after.status.inverse_sets == 0);
  good_round_still_works();
}

BOOST_FIXTURE_TEST_CASE(sparse_push_with_bad_indices, shard_fixture) {
  auto with_indices = [](std::vector<int64_t> indices) {
    return spoilt([&](gradient_push& p) { p.sparse[0].indices = indices; });
  };
  refused(with_indices({1, 4}), ec::invalid_argument,
          {"variable 'embed' index 4 at position 1 is out of range [0, 4)"},
          embed);
  refused(with_indices({-1, 0}), ec::invalid_argument,
          {"index -1 at position 0 is out of range [0, 4)"}, embed);
  refused(with_indices({2, 2}), ec::invalid_argument,
          {"index 2 at position 1 follows index 2: indices must be strictly "
           "increasing"},
          embed);
  refused(with_indices({3, 1}), ec::invalid_argument,
          {"index 1 at position 1 follows index 3"}, embed);
  good_round_still_works();
}

// -- statistics ---------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(stats_update_with_the_wrong_factor_size,
                        covariance_fixture) {
  refused(stats(1, factors("fc", identity(2), g_stat(2))),
          ec::bad_message, {"layer 'fc': A must be 3x3, got [2, 2]"});
  refused(stats(1, factors("fc", a_stat(2), identity(3))),
          ec::bad_message, {"layer 'fc': G must be 2x2, got [3, 3]"});
  refused(stats(1, factors("fc", mat(3, 2, {1, 2, 3, 4, 5, 6}), g_stat(2))),
          ec::bad_message, {"layer 'fc': A must be 3x3, got [3, 2]"});
  refused(stats(1, factors("fc9", a_stat(2), g_stat(2))),
          ec::bad_message, {"unknown layer 'fc9'"});
  factors_unchanged();
}

BOOST_FIXTURE_TEST_CASE(non_finite_statistics, covariance_fixture) {
  auto nan_g = g_stat(2);
  nan_g[3] = std::numeric_limits<float>::quiet_NaN();
  refused(stats(1, factors("fc", a_stat(2), nan_g)), ec::non_finite,
          {"layer 'fc': A or G holds NaN or Inf"});
  auto inf_a = a_stat(2);
  inf_a[0] = std::numeric_limits<float>::infinity();
  refused(stats(1, factors("fc", inf_a, g_stat(2))), ec::non_finite,
          {"layer 'fc'"});
  factors_unchanged();
}

// -- checkpoints --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(corrupt_checkpoint) {
  temp_dir tmp;
  auto store = two_checkpoints(tmp);
  auto path = store.path_of(20);
  auto good = read_bytes(path);
  struct corruption {
    std::string what;
    bytes data;
    std::string needle;
  };
  auto flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;
  std::vector<corruption> cases{
    {"a flipped bit in the data", flipped, "checksum"},
    {"truncated", bytes(good.begin(), good.end() - 5), path},
    {"garbage", bytes(40, 0x7f), "header"},
    {"empty", bytes{}, path},
  };
  for (const auto& c : cases) {
    write_bytes(path, c.data);
    auto direct = store.load(20);
    BOOST_REQUIRE_MESSAGE(!direct, c.what << ": loaded");
    BOOST_TEST_MESSAGE(c.what << ": " << render(direct.error()));
    BOOST_TEST(has_code(direct.error(), ec::bad_data), render(direct.error()));
    says_all(render(direct.error()), {path, c.needle});
    // The previous checkpoint is used, with a warning naming the bad one.
    auto loaded = store.load_latest();
    BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
    BOOST_REQUIRE(loaded->latest);
    BOOST_TEST(loaded->latest->global_step == 10);
    BOOST_TEST(same(loaded->latest->tensors, model(10)));
    BOOST_REQUIRE_EQUAL(loaded->warnings.size(), 1u);
    says_all(loaded->warnings[0], {path});
  }
}

BOOST_AUTO_TEST_CASE(unreadable_checkpoint_directory) {
  temp_dir tmp;
  // A path under a regular file cannot be a directory, whoever asks.
  write_text(tmp.file("plain"), "x");
  checkpoint_store under_file{tmp.file("plain/ckpt")};
  auto loaded = under_file.load_latest();
  BOOST_REQUIRE(!loaded);
  BOOST_TEST(has_code(loaded.error(), ec::io_error));
  says_all(render(loaded.error()), {tmp.file("plain/ckpt"), "Not a directory"});
  // A directory without read permission. Root reads it anyway, so the
  // reader then runs in a child that gives up root (as nobody).
  auto store = two_checkpoints(tmp);
  BOOST_REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);
  BOOST_REQUIRE(::chmod(store.directory().c_str(), 0) == 0);
  auto child = in_child([&] {
    if (::geteuid() == 0
        && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0
            || ::setuid(65534) != 0))
      return std::string{"skip: cannot drop root: "} + std::strerror(errno);
    auto r = store.load_latest();
    return r ? std::string{"loaded"} : render(r.error());
  });
  BOOST_REQUIRE(::chmod(store.directory().c_str(), 0700) == 0);
  BOOST_TEST_MESSAGE("unreadable directory: " << child.text);
  if (child.text.rfind("skip: ", 0) == 0) {
    BOOST_TEST_MESSAGE("the mode-000 case is skipped: " << child.text);
  } else {
    BOOST_TEST(child.text.rfind("io_error", 0) == 0, child.text);
    says_all(child.text, {store.directory(), "Permission denied"});
  }
  // Readable again, nothing is lost.
  latest_is(store, 20);
}

BOOST_AUTO_TEST_CASE(full_disk_during_checkpointing) {
  temp_dir tmp;
  auto store = two_checkpoints(tmp);
  auto before = read_bytes(store.path_of(20));
  // A 64 KiB file-size limit in a child (SIGXFSZ ignored: writes fail
  // with EFBIG, as on a full disk they fail with ENOSPC) saving 1 MiB.
  auto child = in_child([&] {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim;
    lim.rlim_cur = lim.rlim_max = 64 * 1024;
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0)
      return std::string{"setrlimit failed"};
    parameter_set big{{"big", tensor{tensor_shape{256, 1024}}}};
    auto r = store.save(30, big);
    return r ? std::string{"saved"} : render(r.error());
  });
  BOOST_TEST_MESSAGE("full disk: " << child.text);
  BOOST_TEST(child.text.rfind("io_error", 0) == 0, child.text);
  says_all(child.text, {".ckpt-30.safetensors", "File too large"});
  // No temporary left behind, nothing rotated away, the last good
  // checkpoint intact and loaded; the next save works.
  for (const auto& entry : fs::directory_iterator(store.directory()))
    BOOST_TEST(entry.path().filename().string().find("30") == std::string::npos,
               entry.path());
  BOOST_TEST((read_bytes(store.path_of(20)) == before));
  latest_is(store, 20);
  auto saved = store.save(30, model(30));
  BOOST_REQUIRE_MESSAGE(saved, why(saved));
  latest_is(store, 30);
}

BOOST_AUTO_TEST_CASE(bad_model_file_and_numpy_data) {
  // docs/models.md: a model file that does not parse or chain, and a .npz
  // that is corrupt, each refused by name before anything trains or is
  // written. examples_model_files and data_npy test every case.
  temp_dir tmp;
  auto model = tmp.file("m.json");
  std::ofstream{model} << R"({"input_shape": [28, 28, 1], "layers": [
    {"type": "conv2d", "filters": 4, "kernel": 3},
    {"type": "dense", "units": 10}], "loss": "softmax_cross_entropy"})";
  auto out_dir = tmp.file("out");
  auto res = run_program(bin + "convnet_mnist_single --fake_data --steps 1"
                         " --model_file " + model + " --summary " + out_dir
                         + "/s.json");
  BOOST_TEST(res.exit_code != 0);
  says_all(res.output, {model, "layer 1 (dense 'fc1')", "[-1, 26, 26, 4]"});
  BOOST_TEST(!fs::exists(out_dir));
  auto npz = tmp.file("d.npz");
  std::ofstream{npz, std::ios::binary} << "PK\x03\x04 not really a zip";
  res = run_program(bin + "convnet_mnist_single --data " + npz
                    + " --steps 1 --summary " + out_dir + "/s.json");
  BOOST_TEST(res.exit_code != 0);
  says_all(res.output, {npz, "not a .npz file"});
  BOOST_TEST(!fs::exists(out_dir));
}
