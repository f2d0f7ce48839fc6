#define BOOST_TEST_MODULE examples_faults
#include <boost/test/unit_test.hpp>

// Fault injection on real multi-process clusters (via syncfac-launch): a
// worker SIGKILLed with and without backups, restarted, frozen with
// SIGSTOP and thawed. (A worker frozen beyond the connection timeout is
// taken for lost, as a killed one; without backups the steps wait for
// that, bounded by --connection_timeout_ms.) Each run must finish, its global_step must only
// grow, its test accuracy must be within 0.1 of an undisturbed run's, and
// its summary must account for every loss, rejoin and stale push.

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

const std::string bin = SYNCFAC_BINARY_DIR "/bin/";

const std::string common = " --fake_data --fake_train_size 2048"
                           " --fake_test_size 500 --batch_size 32"
                           " --threads 1 --seed 3 --no_progress"
                           " --init glorot --log_every 10";

struct outcome {
  std::string output;
  std::string summary;
};

/// Runs a cluster of `jobs` with the launcher's fault flags.
outcome launch(const temp_dir& tmp,
               const std::map<std::string, int>& jobs,
               const std::string& faults, const std::string& flags) {
  auto cluster = write_cluster(tmp, jobs);
  auto summary = tmp.file("summary.json");
  auto res = run_program(bin + "syncfac-launch --cluster " + cluster
                         + " --program " + bin
                         + "convnet_mnist_distributed --max_wall_s 300 "
                         + faults + " -- " + common + flags
                         + " --connect_timeout_ms 60000 --summary "
                         + summary);
  BOOST_TEST_MESSAGE(res.output);
  BOOST_REQUIRE_EQUAL(res.exit_code, 0);
  return {res.output, read_file(summary)};
}

/// The chief's "global_step: N" log lines, in order.
std::vector<long> chief_steps(const std::string& output) {
  std::vector<long> steps;
  std::istringstream in{output};
  std::string line;
  const std::string tag = "[chief:0] global_step: ";
  while (std::getline(in, line))
    if (line.rfind(tag, 0) == 0 && line.find("test_loss") == std::string::npos)
      steps.push_back(std::stol(line.substr(tag.size())));
  return steps;
}

void check_monotonic(const std::string& output, long last) {
  auto steps = chief_steps(output);
  BOOST_REQUIRE(!steps.empty());
  for (size_t i = 1; i < steps.size(); ++i)
    BOOST_TEST(steps[i] > steps[i - 1]);
  BOOST_TEST(steps.back() == last);
}

double number(const std::string& json, const std::string& key) {
  auto xs = json_numbers(json, key);
  BOOST_REQUIRE_MESSAGE(!xs.empty(), "no \"" << key << "\" in " << json);
  return xs.front();
}

/// Test accuracy of the same topology undisturbed, in one process.
double undisturbed(const temp_dir& tmp, const std::string& flags) {
  auto summary = tmp.file("undisturbed.json");
  auto res = run_program(bin + "convnet_mnist_single" + common + flags
                         + " --summary " + summary);
  BOOST_REQUIRE_EQUAL(res.exit_code, 0);
  return number(read_file(summary), "test_accuracy");
}

} // namespace

BOOST_AUTO_TEST_CASE(a_killed_backup_worker_does_not_stop_the_steps) {
  temp_dir tmp;
  auto flags = std::string{" --steps 100 --replicas_to_aggregate 2"};
  auto run = launch(tmp, {{"chief", 1}, {"worker", 3}, {"ps", 1}},
                    "--kill worker:2@20", flags);
  check_monotonic(run.output, 100);
  BOOST_TEST(run.output.find("worker 2 lost at global step")
             != std::string::npos);
  BOOST_TEST(number(run.summary, "workers_lost") == 1);
  BOOST_TEST(number(run.summary, "workers_rejoined") == 0);
  auto reference = undisturbed(tmp, flags + " --worker_replicas 3");
  BOOST_TEST(std::abs(number(run.summary, "test_accuracy") - reference)
               <= 0.1,
             "accuracy " << number(run.summary, "test_accuracy")
                         << ", undisturbed " << reference);
}

BOOST_AUTO_TEST_CASE(a_killed_worker_without_backups_rejoins_when_restarted) {
  temp_dir tmp;
  auto flags = std::string{" --steps 300 --replicas_to_aggregate 2"};
  auto run = launch(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 1}},
                    "--kill worker:1@20 --restart worker:1@200", flags);
  check_monotonic(run.output, 300);
  BOOST_TEST(number(run.summary, "workers_lost") == 1);
  BOOST_TEST(number(run.summary, "workers_rejoined") == 1);
  BOOST_TEST(run.output.find("worker:1: the run is under way; rejoining at "
                             "global step")
             != std::string::npos);
  // The restarted process ended with the run, like the others.
  BOOST_TEST(run.output.find("worker:1 exited with code 0")
             != std::string::npos);
  auto reference = undisturbed(tmp, flags + " --worker_replicas 2");
  BOOST_TEST(std::abs(number(run.summary, "test_accuracy") - reference)
               <= 0.1,
             "accuracy " << number(run.summary, "test_accuracy")
                         << ", undisturbed " << reference);
}

BOOST_AUTO_TEST_CASE(a_frozen_worker_comes_back_with_stale_gradients) {
  // Frozen at step 20 and thawed at 60, well within the connection
  // timeout: the two others carry the steps meanwhile (one is a backup);
  // the frozen worker's gradient of step 20 is dropped as stale and
  // counted, and it goes on from the current step, never taken for lost.
  temp_dir tmp;
  auto flags = std::string{" --steps 120 --replicas_to_aggregate 2"};
  auto run = launch(tmp, {{"chief", 1}, {"worker", 3}, {"ps", 1}},
                    "--kill worker:1@20:STOP --kill worker:1@60:CONT", flags);
  check_monotonic(run.output, 120);
  BOOST_TEST(number(run.summary, "stale_pushes") >= 1);
  BOOST_TEST(number(run.summary, "workers_lost") == 0);
  BOOST_TEST(run.output.find("worker:1 exited with code 0")
             != std::string::npos);
  auto reference = undisturbed(tmp, flags + " --worker_replicas 3");
  BOOST_TEST(std::abs(number(run.summary, "test_accuracy") - reference)
               <= 0.1);
}
