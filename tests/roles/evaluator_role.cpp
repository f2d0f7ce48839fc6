#define BOOST_TEST_MODULE roles_evaluator
#include <boost/test/unit_test.hpp>

// The evaluator role (examples/evaluator_role, a program built only on the
// public headers) in real loopback clusters: its reports reach the chief's
// metrics stream and summary and match the chief's own evaluation of the
// same final parameters; it survives a shard and the chief restarting; and
// a process whose actor system registered a message type the others do
// not know is refused at connect, the error naming the type.

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/roles/cluster_processes.hpp"

using namespace syncfac::test;
using namespace std::chrono_literals;

namespace {

const std::string rogue = SYNCFAC_BINARY_DIR "/tests/test_rogue_member";
const std::string common = quick_run_flags("60000");
const std::string eval_flags = " --task 0" + quick_eval_flags("60000");

std::string task(const std::string& cluster, const std::string& job,
                 int index) {
  return node + " --cluster " + cluster + " --job_name " + job + " --task "
         + std::to_string(index) + common;
}

/// The lines of `text` that contain `needle`.
std::vector<std::string> lines_with(const std::string& text,
                                    const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos)
      out.push_back(line);
  return out;
}

/// A chief, a worker, a PS task and the evaluator.
const std::map<std::string, int> evaluated_cluster{
  {"chief", 1}, {"worker", 1}, {"ps", 1}, {"evaluator", 1}};

/// A scratch directory with a cluster file of evaluated_cluster and the
/// paths of the chief's summary and the evaluator's own metrics.
struct evaluated_files {
  temp_dir tmp;
  std::string cluster = write_cluster(tmp, evaluated_cluster);
  std::string summary = tmp.file("summary.json");
  std::string own = tmp.file("evaluator.jsonl");
};

/// What the chief and the evaluator of a run said.
struct run_output {
  std::string chief;
  std::string evaluator;
};

/// A run of `cluster` (evaluated_cluster): the shard, the evaluator with
/// `eval_args` and the chief with `chief_args` start, and once the
/// evaluator says `ready` the worker, with which training starts. Every
/// process must exit 0.
run_output run_evaluated(const temp_dir& tmp, const std::string& cluster,
                         const std::string& eval_args,
                         const std::string& chief_args,
                         const std::string& ready) {
  child ps{task(cluster, "ps", 0), tmp.file("ps.log")};
  child eval{evaluator + " --cluster " + cluster + eval_flags + eval_args,
             tmp.file("evaluator.log")};
  child chief{task(cluster, "chief", 0) + chief_args, tmp.file("chief.log")};
  BOOST_REQUIRE_MESSAGE(eval.wait_for_output(ready, 120s), eval.output());
  child worker{task(cluster, "worker", 0), tmp.file("worker.log")};
  auto chief_rc = chief.wait(300s);
  BOOST_TEST_MESSAGE("chief:\n" << chief.output());
  BOOST_TEST_MESSAGE("evaluator:\n" << eval.output());
  BOOST_REQUIRE_EQUAL(chief_rc, 0);
  BOOST_REQUIRE_EQUAL(eval.wait(60s), 0);
  BOOST_REQUIRE_EQUAL(ps.wait(60s), 0);
  BOOST_REQUIRE_EQUAL(worker.wait(60s), 0);
  return {chief.output(), eval.output()};
}

} // namespace

BOOST_FIXTURE_TEST_CASE(final_report_equals_the_chiefs_evaluation,
                        evaluated_files) {
  auto metrics = tmp.file("metrics.jsonl");
  // 50 steps: reports every 20 or so from polling, and one at 50, from
  // polling or from the end of the run (the chief waits for it before the
  // shards go). Training starts with the worker, once the evaluator is in.
  auto out = run_evaluated(tmp, cluster,
                           " --eval_every_steps 20 --metrics " + own,
                           " --steps 50 --log_every 10 --summary " + summary
                             + " --metrics " + metrics,
                           "evaluating 500 examples");

  // Its own log: reports every 20 steps or so, the last at step 50.
  auto reports = lines_with(read_file(own), "\"source\": \"evaluator:0\"");
  BOOST_TEST_MESSAGE("evaluator's records:\n" << read_file(own));
  BOOST_REQUIRE_GE(reports.size(), 2u);
  BOOST_TEST(lines_with(read_file(own), "\"final\"").size() <= 1u);
  const auto& last = reports.back();
  BOOST_TEST(number(last, "step") == 50);
  BOOST_TEST(number(last, "examples") == 500);
  for (const auto& r : reports)
    BOOST_TEST(number(r, "step") >= 20);

  // The chief evaluated the same parameters on the same test set.
  auto text = read_file(summary);
  BOOST_TEST(number(text, "global_step") == 50);
  auto chief_accuracy = number(text, "test_accuracy");
  auto chief_loss = number(text, "test_loss");
  BOOST_TEST(number(last, "test_accuracy") == chief_accuracy);
  BOOST_TEST(std::abs(number(last, "test_loss") - chief_loss)
               <= 1e-8 * std::abs(chief_loss),
             "evaluator's loss " << number(last, "test_loss")
                                 << ", chief's " << chief_loss);

  // The chief's metrics stream has every report, tagged with its source,
  // and the summary the last one.
  auto streamed = lines_with(read_file(metrics), "\"source\": \"evaluator:0\"");
  BOOST_TEST(streamed.size() == reports.size());
  BOOST_TEST(out.chief.find("[evaluator:0] global_step: 50")
             != std::string::npos);
  auto accuracies = json_numbers(text, "test_accuracy");
  BOOST_REQUIRE_EQUAL(accuracies.size(), 2u);
  BOOST_TEST(accuracies[1] == chief_accuracy);
  BOOST_TEST(json_numbers(text, "reports").at(0)
             == static_cast<double>(reports.size()));
}

BOOST_FIXTURE_TEST_CASE(checkpoint_reports_match_an_offline_evaluation,
                        evaluated_files) {
  // The evaluator watches the run's checkpoint directory and evaluates
  // each checkpoint the chief writes; evaluating the same files offline
  // afterwards gives the same figures, and the last one equals the chief's
  // own final evaluation.
  auto dir = tmp.file("ckpt");
  run_evaluated(tmp, cluster, " --checkpoint_dir " + dir + " --metrics " + own,
                " --steps 30 --checkpoint_every 10 --keep_checkpoints 10"
                " --checkpoint_dir " + dir + " --summary " + summary,
                "of each checkpoint in");

  auto reports = lines_with(read_file(own), "\"checkpoint\": 1");
  BOOST_TEST_MESSAGE("evaluator's records:\n" << read_file(own));
  BOOST_REQUIRE_EQUAL(reports.size(), 3u);
  for (size_t i = 0; i < reports.size(); ++i) {
    const auto& online = reports[i];
    auto step = static_cast<int64_t>(number(online, "step"));
    BOOST_TEST(step == static_cast<int64_t>(10 * (i + 1)));
    auto file = dir + "/ckpt-" + std::to_string(step) + ".safetensors";
    auto offline = run_ok(evaluator + " --evaluate_checkpoint " + file
                          + " --fake_data --fake_test_size 500"
                            " --threads 1");
    BOOST_TEST(number(offline.output, "step") == step);
    BOOST_TEST(number(offline.output, "examples") == 500);
    BOOST_TEST(number(offline.output, "test_accuracy")
               == number(online, "test_accuracy"));
    BOOST_TEST(number(offline.output, "test_loss")
               == number(online, "test_loss"));
  }
  auto text = read_file(summary);
  BOOST_TEST(number(reports.back(), "test_accuracy")
             == number(text, "test_accuracy"));
  BOOST_TEST(std::abs(number(reports.back(), "test_loss")
                      - number(text, "test_loss"))
             <= 1e-8 * std::abs(number(text, "test_loss")));
}

BOOST_AUTO_TEST_CASE(an_offline_evaluation_refuses_a_broken_checkpoint) {
  temp_dir tmp;
  auto file = tmp.file("ckpt-5.safetensors");
  std::ofstream{file} << "not a checkpoint";
  check_refused(evaluator + " --evaluate_checkpoint " + file + " --fake_data"
                " --fake_test_size 50",
                {file});
}

BOOST_AUTO_TEST_CASE(survives_a_shard_and_the_chief_restarting) {
  // Before training starts (no worker yet) the chief and the shard wait,
  // published; the shard and then the chief are killed and started again
  // on the same address, and the evaluator's supervisor connects to each
  // again (the evaluator says so). Then the worker comes and the run goes
  // to its end, evaluated.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, evaluated_cluster);
  auto summary = tmp.file("summary.json");
  auto chief_cmd = task(cluster, "chief", 0) + " --steps 40 --summary "
                   + summary;
  auto ps = std::make_unique<child>(task(cluster, "ps", 0),
                                    tmp.file("ps.log"));
  auto chief = std::make_unique<child>(chief_cmd, tmp.file("chief.log"));
  // Only the evaluation at the end of the run (K > steps): the chief
  // waits for it.
  child eval{evaluator + " --cluster " + cluster + eval_flags
               + " --eval_every_steps 1000",
             tmp.file("evaluator.log")};
  BOOST_REQUIRE_MESSAGE(eval.wait_for_output("evaluating 500 examples", 120s),
                        eval.output());

  ps->crash();
  ps = std::make_unique<child>(task(cluster, "ps", 0), tmp.file("ps2.log"));
  BOOST_REQUIRE_MESSAGE(eval.wait_for_output("ps:0 is back", 120s),
                        eval.output());

  chief->crash();
  chief = std::make_unique<child>(chief_cmd, tmp.file("chief2.log"));
  BOOST_REQUIRE_MESSAGE(eval.wait_for_output("chief:0 is back", 120s),
                        eval.output() << "\nchief:\n" << chief->output());

  child worker{task(cluster, "worker", 0), tmp.file("worker.log")};
  auto chief_rc = chief->wait(300s);
  BOOST_TEST_MESSAGE("chief:\n" << chief->output());
  BOOST_TEST_MESSAGE("evaluator:\n" << eval.output());
  BOOST_REQUIRE_EQUAL(chief_rc, 0);
  BOOST_REQUIRE_EQUAL(eval.wait(60s), 0);
  auto out = eval.output();
  auto finals = lines_with(out, "[evaluator:0] global_step: 40");
  BOOST_REQUIRE_EQUAL(finals.size(), 1u);
  BOOST_TEST(finals.front().find("final: 1") != std::string::npos);
  BOOST_TEST(chief->output().find("[evaluator:0] global_step: 40")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unknown_message_type_is_refused_at_connect) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, evaluated_cluster);
  child ps{task(cluster, "ps", 0), tmp.file("ps.log")};
  auto res = run_program(rogue + " " + cluster);
  BOOST_TEST_MESSAGE(res.output);
  BOOST_TEST(res.exit_code != 0);
  BOOST_TEST(said(res.output, "refused at connect"));
  BOOST_TEST(said(res.output, "rogue::probe"));
  // Refused at once, not after the connect timeout.
  BOOST_TEST(res.output.find("not reachable") == std::string::npos);
}
