#define BOOST_TEST_MODULE runtime_training_log
#include <boost/test/unit_test.hpp>

// The training log's outputs: a fresh run starts its metrics file anew, a
// resumed one appends with wall_s counting from the run's first start, and
// every number of a metrics line becomes a TensorBoard scalar.

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../temp_dir.hpp"

#include "runtime/base/error.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/training_log.hpp"

using namespace syncfac;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<json> lines_of(const std::string& path) {
  std::vector<json> out;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);)
    out.push_back(json::parse(line));
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream{path, std::ios::trunc} << text;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_fresh_run_starts_its_metrics_file_anew) {
  test::temp_dir dir;
  auto path = dir.file("m.jsonl");
  write_file(path, "{\"step\": 1, \"old\": 1}\n{\"step\": 2, \"old\": 1}\n");
  std::ostringstream out;
  training_log log{out, 100, false};
  BOOST_REQUIRE(!log.open_metrics(path));
  log.train(10, 0.5, 0.25);
  log.train(20, 0.4, 0.5);
  auto lines = lines_of(path);
  BOOST_REQUIRE_EQUAL(lines.size(), 2u);
  BOOST_TEST(lines[0]["step"].get<int>() == 10);
  BOOST_TEST(lines[1]["loss"].get<double>() == 0.4);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_appends_and_wall_time_continues) {
  test::temp_dir dir;
  auto path = dir.file("m.jsonl");
  write_file(path, "{\"step\": 10, \"wall_s\": 1.5, \"loss\": 1}\n"
                   "{\"step\": 20, \"wall_s\": 3.0, \"loss\": 1}\n");
  std::ostringstream out;
  training_log log{out, 100, false};
  BOOST_REQUIRE(!log.open_metrics(path));
  auto started = unix_now() - 100;
  log.resume(started, 20);
  BOOST_TEST(log.started_unix() == started);
  log.train(30, 0.5, 0.25);
  auto lines = lines_of(path);
  BOOST_REQUIRE_EQUAL(lines.size(), 3u);
  BOOST_TEST(lines[1]["step"].get<int>() == 20);
  BOOST_TEST(lines[2]["step"].get<int>() == 30);
  BOOST_TEST(lines[2]["wall_s"].get<double>() >= 100.0);
  // The status page's curves start with the earlier lines.
  auto st = json::parse(log.status()->json());
  BOOST_REQUIRE_EQUAL(st["curves"]["loss"].size(), 3u);
  BOOST_TEST(st["curves"]["loss"][0][0].get<int>() == 10);
  BOOST_TEST(st["curves"]["loss"][2][0].get<int>() == 30);
  BOOST_TEST(st["events"][0]["what"].get<std::string>()
             == "resumed at global step 20");
}

BOOST_AUTO_TEST_CASE(a_resume_without_a_recorded_start_keeps_this_one) {
  std::ostringstream out;
  training_log log{out, 100, false};
  auto mine = log.started_unix();
  log.resume(0, 20);
  BOOST_TEST(log.started_unix() == mine);
  // A start in the future (a clock set back) is not believed either.
  log.resume(unix_now() + 3600, 20);
  BOOST_TEST(log.started_unix() == mine);
}

BOOST_AUTO_TEST_CASE(an_unwritable_metrics_file_is_named) {
  test::temp_dir dir;
  auto path = dir.file("no/such/dir/m.jsonl");
  std::ostringstream out;
  training_log log{out, 100, false};
  auto err = log.open_metrics(path);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find(path) != std::string::npos);
}

BOOST_AUTO_TEST_CASE(events_go_into_a_new_file_of_the_logdir) {
  test::temp_dir dir;
  auto logdir = dir.file("logs");
  std::ostringstream out;
  {
    training_log log{out, 100, false};
    BOOST_REQUIRE(!log.open_events(logdir, "| --steps | 100 |"));
    log.train(10, 0.5, 0.25);
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(logdir))
    files.push_back(e.path());
  BOOST_REQUIRE_EQUAL(files.size(), 1u);
  BOOST_TEST(files[0].filename().string().rfind("events.out.tfevents.", 0)
             == 0u);
  // file_version, hparams and one summary: more than three empty records.
  BOOST_TEST(fs::file_size(files[0]) > 3 * 16u);
}

BOOST_AUTO_TEST_CASE(named_outputs_are_created_only_when_opened) {
  // The chief of a cluster names its outputs at its start and opens them
  // once every node agreed: a run refused before then leaves nothing.
  // A resume before the opening counts as one after it: the curves come
  // from the metrics file, which is appended to, and the event file gets
  // its restart mark when it is created.
  test::temp_dir dir;
  auto path = dir.file("m.jsonl");
  write_file(path, "{\"step\": 10, \"wall_s\": 1.5, \"loss\": 1}\n");
  auto event_file_size = [&](const std::string& logdir) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(logdir))
      files.push_back(e.path());
    BOOST_REQUIRE_EQUAL(files.size(), 1u);
    return fs::file_size(files[0]);
  };
  std::ostringstream out;
  {
    training_log refused{out, 100, false};
    refused.name_outputs(dir.file("never.jsonl"), dir.file("never"), "x");
  }
  BOOST_TEST(!fs::exists(dir.file("never.jsonl")));
  BOOST_TEST(!fs::exists(dir.file("never")));
  training_log log{out, 100, false};
  log.name_outputs(path, dir.file("named"), "| --steps | 100 |");
  log.resume(unix_now() - 100, 10);
  BOOST_TEST(!fs::exists(dir.file("named")));
  BOOST_REQUIRE(!log.open_named_outputs());
  // The same event records as a log opened first and resumed after, which
  // has one more (the restart mark) than one never resumed.
  training_log opened_first{out, 100, false};
  BOOST_REQUIRE(!opened_first.open_events(dir.file("first"),
                                          "| --steps | 100 |"));
  opened_first.resume(unix_now() - 100, 10);
  training_log fresh{out, 100, false};
  BOOST_REQUIRE(!fresh.open_events(dir.file("fresh"), "| --steps | 100 |"));
  auto named_size = event_file_size(dir.file("named"));
  BOOST_TEST(named_size == event_file_size(dir.file("first")));
  BOOST_TEST(named_size > event_file_size(dir.file("fresh")));
  log.train(20, 0.5, 0.25);
  auto lines = lines_of(path);
  BOOST_REQUIRE_EQUAL(lines.size(), 2u);
  BOOST_TEST(lines[1]["step"].get<int>() == 20);
  auto st = json::parse(log.status()->json());
  BOOST_TEST(st["curves"]["loss"].size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_chiefs_fault_lines_keep_the_tasks_health) {
  std::ostringstream out;
  training_log log{out, 100, false};
  log.progress(7);
  log.fault("chief: worker 1 lost at global step 7; the run goes on and it "
            "may rejoin");
  log.fault("chief: ps:0 lost at global step 7; the steps pause");
  json_object fields;
  fields.add("step", int64_t{5}).add("shards_lost", int64_t{1});
  log.record("chief: ps:0 is back; the run rolls back to global step 5", fields);
  log.fault("chief: worker 1 rejoins at global step 6");
  log.fault("chief: something else entirely");
  auto st = json::parse(log.status()->json());
  std::map<std::string, std::string> state;
  for (const auto& t : st["tasks"])
    state[t["task"].get<std::string>()] = t["state"].get<std::string>();
  BOOST_TEST(state.size() == 2u);
  BOOST_TEST(state["worker:1"] == "back");
  BOOST_TEST(state["ps:0"] == "back");
  BOOST_REQUIRE_EQUAL(st["events"].size(), 5u);
  BOOST_TEST(st["events"][0]["step"].get<int>() == 7);
  BOOST_TEST(st["events"][2]["step"].get<int>() == 5);
  // Every line still reaches the log.
  BOOST_TEST(out.str().find("something else entirely") != std::string::npos);
}
