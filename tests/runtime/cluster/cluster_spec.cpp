#define BOOST_TEST_MODULE cluster_spec
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/base/error.hpp"
#include "tests/examples/process.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

const char* momentum_cluster = R"({
  "cluster": {
    "chief": ["localhost:47000"],
    "worker": ["localhost:47001", "localhost:47002"],
    "ps": ["localhost:47003"]
  },
  "task": {"type": "worker", "index": 1}
})";

const char* kfac_cluster = R"({
  "cluster": {
    "inverse": ["127.0.0.1:47015"],
    "covariance": ["127.0.0.1:47014"],
    "ps": ["127.0.0.1:47013"],
    "worker": ["127.0.0.1:47011", "127.0.0.1:47012"],
    "chief": ["127.0.0.1:47010"]
  }
})";

/// The rendered error of parsing `text` from "x.json" ("ok" if it parsed).
std::string parse_error(const std::string& text) {
  auto spec = cluster_spec::parse(text, "x.json");
  return test::why(spec);
}

/// Checks that parsing `text` fails with ec::invalid_config and a message
/// containing every one of `parts`.
void check_refused(const std::string& text,
                   const std::vector<std::string>& parts,
                   const std::string& source = "x.json") {
  auto with_source = parts;
  with_source.push_back(cluster_source_name(source) + ": ");
  BOOST_TEST_CONTEXT(text) {
    test::check_error(cluster_spec::parse(text, source), ec::invalid_config,
                      with_source);
  }
}

/// Checks that `spec` is a refusal whose message holds `needle`; returns
/// the message.
std::string refusal_holding(const caf::expected<cluster_spec>& spec,
                            const std::string& needle) {
  BOOST_REQUIRE_MESSAGE(!spec, "accepted; expected a refusal saying: "
                                 << needle);
  auto msg = render(spec.error());
  BOOST_CHECK_MESSAGE(msg.find(needle) != std::string::npos,
                      "'" << needle << "' not in: " << msg);
  return msg;
}

/// A cluster with the chief and the given worker list (JSON text).
std::string with_workers(const std::string& workers) {
  return R"({"cluster": {"chief": ["localhost:47000"], "worker": )" + workers
         + "}}";
}

/// A temporary directory removed at the end of the test.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    auto base = std::filesystem::temp_directory_path()
                / ("syncfac_cluster_" + std::to_string(::getpid()));
    path = base;
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    auto p = path / name;
    std::ofstream out{p};
    out << text;
    return p.string();
  }
};

/// Sets (or with nullptr unsets) TF_CONFIG for one scope.
struct tf_config_scope {
  explicit tf_config_scope(const char* value) {
    if (value != nullptr)
      ::setenv("TF_CONFIG", value, 1);
    else
      ::unsetenv("TF_CONFIG");
  }
  ~tf_config_scope() {
    ::unsetenv("TF_CONFIG");
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(addresses)

BOOST_AUTO_TEST_CASE(host_port_parses_names_ipv4_and_bracketed_ipv6) {
  struct good {
    const char* text;
    const char* host;
    int port;
  };
  std::vector<good> cases = {
    {"localhost:47000", "localhost", 47000},
    {"10.0.0.2:1", "10.0.0.2", 1},
    {"[::1]:65535", "::1", 65535},
    {"node-3.example.org:47001", "node-3.example.org", 47001},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.text) {
      auto hp = host_port::parse(c.text);
      BOOST_REQUIRE_MESSAGE(hp, test::why(hp));
      BOOST_CHECK_EQUAL(hp->host, c.host);
      BOOST_CHECK_EQUAL(hp->port, c.port);
      // Printed as written: an IPv6 host in its brackets again.
      BOOST_CHECK_EQUAL(hp->str(), c.text);
    }
  }
}

BOOST_AUTO_TEST_CASE(host_port_leading_zeros_are_the_number) {
  auto a = host_port::parse("h:00080");
  BOOST_REQUIRE_MESSAGE(a, test::why(a));
  BOOST_CHECK_EQUAL(a->port, 80);
}

BOOST_AUTO_TEST_CASE(host_port_refuses_bad_addresses) {
  struct bad {
    const char* text;
    const char* why;
  };
  std::vector<bad> cases = {
    {"", "empty address"},
    {"localhost", "missing port"},
    {"localhost:", "missing port"},
    {":47000", "empty host"},
    {"localhost:abc", "bad port \"abc\""},
    {"localhost:-1", "bad port \"-1\""},
    {"localhost:4 7", "bad port"},
    {"localhost:0", "port out of range (1..65535)"},
    {"localhost:65536", "port out of range (1..65535)"},
    {"localhost:99999", "port out of range (1..65535)"},
    {"localhost:123456789012345678901234567890", "port out of range"},
    {"::1:47000", "IPv6 address needs brackets"},
    {"[::1:47000", "missing ']'"},
    {"[::1]47000", "missing port"},
    {"[]:47000", "empty host"},
    {"local host:47000", "bad host"},
  };
  for (const auto& c : cases) {
    auto hp = host_port::parse(c.text);
    BOOST_CHECK_MESSAGE(!hp, "accepted \"" << c.text << "\"");
    if (!hp) {
      BOOST_CHECK_EQUAL(static_cast<ec>(hp.error().code()),
                        ec::invalid_config);
      auto msg = render(hp.error());
      BOOST_CHECK_MESSAGE(msg.find(c.why) != std::string::npos,
                          "\"" << c.text << "\": '" << c.why
                               << "' not in: " << msg);
    }
  }
}

BOOST_AUTO_TEST_CASE(task_id_parses_and_prints) {
  auto t = task_id::parse("worker:12");
  BOOST_REQUIRE_MESSAGE(t, test::why(t));
  BOOST_CHECK_EQUAL(t->job, "worker");
  BOOST_CHECK_EQUAL(t->index, 12);
  BOOST_CHECK_EQUAL(t->str(), "worker:12");
  BOOST_CHECK(!task_id::parse("worker"));
  BOOST_CHECK(!task_id::parse(":1"));
  BOOST_CHECK(!task_id::parse("worker:"));
  BOOST_CHECK(!task_id::parse("worker:-1"));
  BOOST_CHECK(!task_id::parse("worker:x"));
  BOOST_CHECK(!task_id::parse("worker:12345678901"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(parsing)

BOOST_AUTO_TEST_CASE(reads_jobs_in_file_order_and_the_task) {
  auto spec = cluster_spec::parse(momentum_cluster, "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->jobs.size(), 3u);
  BOOST_CHECK_EQUAL(spec->count("chief"), 1);
  BOOST_CHECK_EQUAL(spec->count("worker"), 2);
  BOOST_CHECK_EQUAL(spec->count("ps"), 1);
  BOOST_CHECK_EQUAL(spec->count("covariance"), 0);
  BOOST_CHECK_EQUAL(spec->count("nonsense"), 0);
  BOOST_CHECK_EQUAL(spec->jobs.at("worker")[0].str(), "localhost:47001");
  BOOST_CHECK_EQUAL(spec->jobs.at("worker")[1].str(), "localhost:47002");
  BOOST_REQUIRE(spec->task);
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:1");
  BOOST_CHECK_EQUAL(spec->address(*spec->task).str(), "localhost:47002");
  BOOST_CHECK_EQUAL(spec->address({"chief", 0}).port, 47000);
  BOOST_CHECK(spec->contains({"ps", 0}));
  BOOST_CHECK(!spec->contains({"ps", 1}));
  BOOST_CHECK(!spec->contains({"ps", -1}));
  BOOST_CHECK(!spec->contains({"inverse", 0}));
}

BOOST_AUTO_TEST_CASE(task_is_optional) {
  auto spec = cluster_spec::parse(kfac_cluster, "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK(!spec->task);
}

BOOST_AUTO_TEST_CASE(tasks_come_chief_first_then_by_role) {
  auto spec = cluster_spec::parse(kfac_cluster, "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  std::vector<std::string> names;
  for (const auto& t : spec->tasks())
    names.push_back(t.str());
  std::vector<std::string> want = {"chief:0",      "worker:0",
                                   "worker:1",     "ps:0",
                                   "covariance:0", "inverse:0"};
  BOOST_CHECK_EQUAL_COLLECTIONS(names.begin(), names.end(), want.begin(),
                                want.end());
}

BOOST_AUTO_TEST_CASE(other_jobs_come_last_by_name) {
  cluster_spec spec;
  spec.jobs["evaluator"] = {{"h", 5}};
  spec.jobs["ps"] = {{"h", 4}};
  spec.jobs["chief"] = {{"h", 1}};
  spec.jobs["aardvark"] = {{"h", 7}};
  std::vector<std::string> names;
  for (const auto& t : spec.tasks())
    names.push_back(t.str());
  std::vector<std::string> want = {"chief:0", "ps:0", "aardvark:0",
                                   "evaluator:0"};
  BOOST_CHECK_EQUAL_COLLECTIONS(names.begin(), names.end(), want.begin(),
                                want.end());
  // ... and the ordering of task ids agrees.
  BOOST_CHECK(task_id({"chief", 0}) < task_id({"worker", 0}));
  BOOST_CHECK(task_id({"worker", 3}) < task_id({"ps", 0}));
  BOOST_CHECK(task_id({"inverse", 9}) < task_id({"evaluator", 0}));
  BOOST_CHECK(task_id({"worker", 1}) < task_id({"worker", 2}));
}

BOOST_AUTO_TEST_CASE(environment_key_is_allowed) {
  auto text = R"({"cluster": {"chief": ["h:1"]}, "environment": "cloud",
                  "task": {"type": "chief", "index": 0}})";
  auto spec = cluster_spec::parse(text, "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "chief:0");
}

BOOST_AUTO_TEST_CASE(empty_job_lists_count_zero) {
  auto spec = cluster_spec::parse(
    R"({"cluster": {"chief": ["h:1"], "ps": []}})", "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->count("ps"), 0);
  BOOST_CHECK_EQUAL(spec->tasks().size(), 1u);
}

BOOST_AUTO_TEST_CASE(evaluator_job_is_known) {
  auto spec = cluster_spec::parse(
    R"({"cluster": {"chief": ["h:1"], "evaluator": ["h:2"]}})", "x.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->count("evaluator"), 1);
}

BOOST_AUTO_TEST_CASE(to_json_round_trips) {
  for (auto text : {momentum_cluster, kfac_cluster}) {
    auto spec = cluster_spec::parse(text, "x.json");
    BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
    auto json = spec->to_json();
    BOOST_CHECK(json.find('\n') == std::string::npos);
    auto again = cluster_spec::parse(json, "TF_CONFIG");
    BOOST_REQUIRE_MESSAGE(again, test::why(again) << " in " << json);
    BOOST_CHECK(*again == *spec);
  }
  auto spec = cluster_spec::parse(kfac_cluster, "x.json");
  BOOST_REQUIRE(spec);
  // Jobs in tasks() order, whatever the file's order.
  BOOST_CHECK_EQUAL(spec->to_json(),
                    R"({"cluster":{"chief":["127.0.0.1:47010"],)"
                    R"("worker":["127.0.0.1:47011","127.0.0.1:47012"],)"
                    R"("ps":["127.0.0.1:47013"],)"
                    R"("covariance":["127.0.0.1:47014"],)"
                    R"("inverse":["127.0.0.1:47015"]}})");
}

BOOST_AUTO_TEST_CASE(to_json_brackets_ipv6) {
  cluster_spec spec;
  spec.jobs["chief"] = {{"::1", 47000}};
  spec.task = task_id{"chief", 0};
  auto again = cluster_spec::parse(spec.to_json(), "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(again, test::why(again));
  BOOST_CHECK(*again == spec);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

BOOST_AUTO_TEST_CASE(not_json) {
  check_refused("", {"not JSON"});
  check_refused("{\"cluster\": ", {"not JSON", "line 1"});
  check_refused("{\"cluster\": {}} trailing", {"not JSON"});
  check_refused("{'cluster': {}}", {"not JSON"});
}

BOOST_AUTO_TEST_CASE(not_an_object) {
  check_refused("[1, 2]", {"not a JSON object", "array"});
  check_refused("\"chief\"", {"not a JSON object", "string"});
  check_refused("null", {"not a JSON object"});
}

BOOST_AUTO_TEST_CASE(missing_cluster) {
  check_refused("{}", {"no \"cluster\""});
  check_refused(R"({"task": {"type": "chief", "index": 0}})",
                {"no \"cluster\""});
  check_refused(R"({"cluster": ["h:1"]})",
                {"\"cluster\" is not an object", "array"});
}

BOOST_AUTO_TEST_CASE(unexpected_top_level_keys) {
  check_refused(R"({"cluster": {"chief": ["h:1"]}, "tsak": {}})",
                {"unexpected key \"tsak\" at the top level"});
  // TensorFlow's rpc_layer is known; only "grpc" passes (and is ignored).
  check_refused(R"({"cluster": {"chief": ["h:1"]}, "rpc_layer": "mpi"})",
                {"rpc_layer \"mpi\": not supported"});
}

BOOST_AUTO_TEST_CASE(duplicate_keys) {
  check_refused(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"],
                                "worker": ["h:3"]}})",
                {"key \"worker\" appears twice in \"cluster\""});
  check_refused(R"({"cluster": {"chief": ["h:1"]},
                    "cluster": {"chief": ["h:2"]}})",
                {"key \"cluster\" appears twice at the top level"});
  check_refused(R"({"cluster": {"chief": ["h:1"]},
                    "task": {"type": "chief", "index": 0, "index": 1}})",
                {"key \"index\" appears twice in \"task\""});
}

BOOST_AUTO_TEST_CASE(same_key_in_different_objects_is_fine) {
  auto text = R"({"cluster": {"chief": ["h:1"]},
                  "task": {"type": "chief", "index": 0},
                  "environment": {"type": "x", "index": 3}})";
  // "environment" is not checked, but its keys are its own.
  BOOST_CHECK_EQUAL(parse_error(text), "ok");
}

BOOST_AUTO_TEST_CASE(unknown_job) {
  check_refused(R"({"cluster": {"chief": ["h:1"], "wrker": ["h:2"]}})",
                {"cluster.wrker: unknown job \"wrker\"",
                 "known: chief, worker, ps, covariance, inverse, evaluator"});
  // "master" is the chief's other name (tf_config_as_tensorflow_writes_it).
  check_refused(R"({"cluster": {"chief": ["h:1"], "master": ["h:2"]}})",
                {"both name the chief"});
}

BOOST_AUTO_TEST_CASE(jobs_must_be_lists_of_strings) {
  check_refused(with_workers("\"h:2\""),
                {"cluster.worker: not a list of \"host:port\" strings",
                 "found string"});
  check_refused(with_workers(R"({"0": "h:2"})"),
                {"cluster.worker: not a list", "found object"});
  check_refused(with_workers(R"(["h:2", 47003])"),
                {"cluster.worker[1]: not a \"host:port\" string",
                 "number 47003"});
  check_refused(with_workers(R"(["h:2", null])"),
                {"cluster.worker[1]: not a \"host:port\" string", "null"});
  check_refused(with_workers(R"([["h:2"]])"),
                {"cluster.worker[0]: not a \"host:port\" string", "array"});
}

BOOST_AUTO_TEST_CASE(bad_addresses_name_the_entry) {
  check_refused(with_workers(R"(["localhost:47001", "localhost:99999"])"),
                {"cluster file 'x.json': cluster.worker[1] "
                 "\"localhost:99999\": port out of range (1..65535)"});
  check_refused(with_workers(R"([":47001"])"),
                {"cluster.worker[0] \":47001\": empty host"});
  check_refused(with_workers(R"(["localhost"])"),
                {"cluster.worker[0] \"localhost\": missing port"});
  check_refused(with_workers(R"(["localhost:http"])"),
                {"cluster.worker[0] \"localhost:http\": bad port"});
  check_refused(with_workers(R"(["localhost:0"])"),
                {"cluster.worker[0] \"localhost:0\": port out of range"});
  check_refused(with_workers(R"([""])"),
                {"cluster.worker[0] \"\": empty address"});
}

BOOST_AUTO_TEST_CASE(duplicate_addresses_name_both_entries) {
  check_refused(with_workers(R"(["localhost:47001", "localhost:47000"])"),
                {"cluster.worker[1] \"localhost:47000\": duplicate address, "
                 "already used by cluster.chief[0] \"localhost:47000\""});
  check_refused(with_workers(R"(["h:5", "h:5"])"),
                {"cluster.worker[1] \"h:5\"", "cluster.worker[0] \"h:5\""});
  // The same host spelt differently.
  check_refused(with_workers(R"(["127.0.0.1:47000"])"),
                {"cluster.worker[0] \"127.0.0.1:47000\": duplicate address",
                 "cluster.chief[0] \"localhost:47000\""});
  check_refused(with_workers(R"(["LocalHost:47000"])"),
                {"duplicate address"});
  // Same host, different ports, and different hosts, same port: fine.
  BOOST_CHECK_EQUAL(parse_error(with_workers(R"(["localhost:47001"])")),
                    "ok");
  BOOST_CHECK_EQUAL(parse_error(with_workers(R"(["10.0.0.2:47000"])")),
                    "ok");
}

BOOST_AUTO_TEST_CASE(one_chief_at_most_or_worker_0) {
  check_refused(R"({"cluster": {}})",
                {"no \"chief\" job and no \"worker\" job"});
  check_refused(R"({"cluster": {"ps": ["h:2"]}})",
                {"no \"chief\" job and no \"worker\" job"});
  check_refused(R"({"cluster": {"chief": [], "worker": ["h:1"]}})",
                {"cluster.chief: 0 entries", "one chief at most"});
  check_refused(R"({"cluster": {"chief": ["h:1", "h:2"]}})",
                {"cluster.chief: 2 entries", "one chief at most"});
}

BOOST_AUTO_TEST_CASE(without_a_chief_job_worker_0_is_the_chief) {
  // TensorFlow's rule, and the seeds' K-FAC cluster.
  auto none = cluster_spec::parse(
    R"({"cluster": {"worker": ["h:1", "h:3"], "ps": ["h:2"]}})", "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(none, (none ? std::string{} : render(none.error())));
  BOOST_TEST(none->chief_task().str() == "worker:0");
  auto one = cluster_spec::parse(
    R"({"cluster": {"chief": ["h:9"], "worker": ["h:1"], "ps": ["h:2"]}})",
    "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(one, (one ? std::string{} : render(one.error())));
  BOOST_TEST(one->chief_task().str() == "chief:0");
}

BOOST_AUTO_TEST_CASE(task_shape) {
  auto c = std::string{R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
                          "task": )"};
  check_refused(c + R"("worker:0"})", {"\"task\" is not an object"});
  check_refused(c + R"({"index": 0}})", {"task: no \"type\""});
  check_refused(c + R"({"type": "worker"}})", {"task: no \"index\""});
  check_refused(c + R"({"type": 1, "index": 0}})",
                {"task.type: not a string"});
  check_refused(c + R"({"type": "worker", "index": "0"}})",
                {"task.index: not an integer", "string"});
  check_refused(c + R"({"type": "worker", "index": 0.5}})",
                {"task.index: not an integer"});
  check_refused(c + R"({"type": "worker", "index": 0, "trial": 1}})",
                {"task: unexpected key \"trial\""});
  check_refused(c + R"({"type": "worker", "index": 5000000000}})",
                {"task.index 5000000000: out of range"});
}

BOOST_AUTO_TEST_CASE(task_must_be_in_the_cluster) {
  auto c = std::string{R"({"cluster": {"chief": ["h:1"], "worker": ["h:2",
                          "h:3"]}, "task": )"};
  check_refused(c + R"({"type": "wrker", "index": 0}})",
                {"task wrker:0: unknown job \"wrker\""});
  check_refused(c + R"({"type": "", "index": 0}})", {"task: empty type"});
  check_refused(c + R"({"type": "ps", "index": 0}})",
                {"task ps:0: the cluster has no job \"ps\"",
                 "it has chief, worker"});
  check_refused(c + R"({"type": "worker", "index": -1}})",
                {"task worker:-1: negative index"});
  check_refused(c + R"({"type": "worker", "index": 2}})",
                {"task worker:2: index out of range",
                 "cluster.worker has 2 entries: 0..1"});
  check_refused(c + R"({"type": "chief", "index": 1}})",
                {"task chief:1: index out of range",
                 "cluster.chief has 1 entry: 0..0"});
  BOOST_CHECK_EQUAL(parse_error(c + R"({"type": "worker", "index": 1}})"),
                    "ok");
}

BOOST_AUTO_TEST_CASE(tf_config_source_is_named) {
  auto spec = cluster_spec::parse("{}", "TF_CONFIG");
  auto msg = refusal_holding(spec, "TF_CONFIG: no \"cluster\"");
  BOOST_CHECK(msg.find("cluster file") == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(validation)

BOOST_AUTO_TEST_CASE(validate_checks_a_built_spec) {
  cluster_spec spec;
  spec.jobs["chief"] = {{"h", 1}};
  spec.jobs["worker"] = {{"h", 2}, {"", 3}};
  auto err = spec.validate();
  BOOST_REQUIRE(err);
  BOOST_CHECK_EQUAL(static_cast<ec>(err.code()), ec::invalid_config);
  BOOST_CHECK_MESSAGE(render(err).find("cluster.worker[1] \":3\": empty host")
                        != std::string::npos,
                      render(err));
  spec.jobs["worker"][1] = {"h", 0};
  err = spec.validate();
  BOOST_REQUIRE(err);
  BOOST_CHECK(render(err).find("port out of range") != std::string::npos);
  spec.jobs["worker"][1] = {"h", 3};
  BOOST_CHECK(!spec.validate());
  spec.task = task_id{"worker", 2};
  BOOST_CHECK(spec.validate());
  spec.task = task_id{"worker", 1};
  BOOST_CHECK(!spec.validate());
}

BOOST_AUTO_TEST_CASE(known_jobs_can_be_narrowed_or_widened) {
  cluster_spec spec;
  spec.jobs["chief"] = {{"h", 1}};
  spec.jobs["covariance"] = {{"h", 2}};
  BOOST_CHECK(!spec.validate());
  auto err = spec.validate({"chief", "worker", "ps"});
  BOOST_REQUIRE(err);
  BOOST_CHECK_MESSAGE(render(err).find("cluster.covariance: unknown job")
                        != std::string::npos,
                      render(err));
  BOOST_CHECK_MESSAGE(render(err).find("known: chief, worker, ps")
                        != std::string::npos,
                      render(err));
  spec.jobs["sidecar"] = {{"h", 3}};
  BOOST_CHECK(spec.validate());
  auto wide = default_cluster_jobs();
  wide.push_back("sidecar");
  BOOST_CHECK(!spec.validate(wide));
}

BOOST_AUTO_TEST_CASE(default_jobs) {
  std::vector<std::string> want = {"chief",      "worker",  "ps",
                                   "covariance", "inverse", "evaluator"};
  auto jobs = default_cluster_jobs();
  BOOST_CHECK_EQUAL_COLLECTIONS(jobs.begin(), jobs.end(), want.begin(),
                                want.end());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(files_and_environment)

BOOST_AUTO_TEST_CASE(load_reads_a_file) {
  temp_dir dir;
  auto path = dir.write("c.json", momentum_cluster);
  auto spec = cluster_spec::load(path);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->count("worker"), 2);
}

BOOST_AUTO_TEST_CASE(load_names_the_file) {
  temp_dir dir;
  auto missing = (dir.path / "nope.json").string();
  auto spec = cluster_spec::load(missing);
  refusal_holding(spec, "cluster file '" + missing
                          + "': cannot be read: No such file");
  BOOST_CHECK_EQUAL(static_cast<ec>(spec.error().code()), ec::io_error);
  auto bad = dir.write("bad.json", with_workers(R"(["h:99999"])"));
  spec = cluster_spec::load(bad);
  refusal_holding(spec, "cluster file '" + bad
                          + "': cluster.worker[0] \"h:99999\": port out of "
                            "range (1..65535)");
  BOOST_CHECK_EQUAL(static_cast<ec>(spec.error().code()), ec::invalid_config);
  // A directory is not a cluster file.
  spec = cluster_spec::load(dir.path.string());
  BOOST_CHECK(!spec);
}

BOOST_AUTO_TEST_CASE(resolve_takes_the_file_task) {
  temp_dir dir;
  auto path = dir.write("c.json", momentum_cluster);
  tf_config_scope env{nullptr};
  auto spec = resolve_cluster(path, "", -1);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:1");
}

BOOST_AUTO_TEST_CASE(resolve_overrides_the_task) {
  temp_dir dir;
  auto path = dir.write("c.json", momentum_cluster);
  auto spec = resolve_cluster(path, "ps", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "ps:0");
  // Only the index: the job stays the file's.
  spec = resolve_cluster(path, "", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:0");
  // Only the job: the index stays the file's.
  spec = resolve_cluster(path, "chief", -1);
  // chief:1 does not exist.
  refusal_holding(spec, "with --job_name chief: task chief:1: index out of "
                        "range");
}

BOOST_AUTO_TEST_CASE(resolve_overrides_a_bad_file_task) {
  temp_dir dir;
  auto path = dir.write("c.json", R"({"cluster": {"chief": ["h:1"],
    "worker": ["h:2"]}, "task": {"type": "worker", "index": 7}})");
  auto spec = resolve_cluster(path, "", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:0");
  spec = resolve_cluster(path, "", -1);
  refusal_holding(spec, "task worker:7: index out of range");
}

BOOST_AUTO_TEST_CASE(resolve_needs_a_task) {
  temp_dir dir;
  auto path = dir.write("c.json", kfac_cluster);
  auto spec = resolve_cluster(path, "", -1);
  refusal_holding(spec, "cluster file '" + path
                          + "': no task: give --job_name and --task");
  spec = resolve_cluster(path, "worker", -1);
  refusal_holding(spec, "give --task too");
  spec = resolve_cluster(path, "", 1);
  refusal_holding(spec, "give --job_name too");
  spec = resolve_cluster(path, "inverse", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->address(*spec->task).str(), "127.0.0.1:47015");
}

BOOST_AUTO_TEST_CASE(resolve_checks_the_overridden_task) {
  temp_dir dir;
  auto path = dir.write("c.json", kfac_cluster);
  auto spec = resolve_cluster(path, "worker", 2);
  refusal_holding(spec, "cluster file '" + path
                          + "' with --job_name worker --task 2: task "
                            "worker:2: index out of range");
  // TensorFlow's one evaluator may be outside the cluster; a second not.
  spec = resolve_cluster(path, "evaluator", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK(spec->task_outside_cluster());
  spec = resolve_cluster(path, "evaluator", 1);
  refusal_holding(spec, "task evaluator:1: index out of range (an "
                        "evaluator outside");
  spec = resolve_cluster(path, "bogus", 0);
  refusal_holding(spec, "unknown job \"bogus\"");
}

BOOST_AUTO_TEST_CASE(resolve_checks_the_cluster_before_the_task) {
  temp_dir dir;
  auto path = dir.write("c.json", with_workers(R"(["h:1", "h:1"])"));
  auto spec = resolve_cluster(path, "worker", 0);
  // The cluster is at fault, not the flags.
  refusal_holding(spec, "cluster file '" + path + "': cluster.worker[1]");
}

BOOST_AUTO_TEST_CASE(resolve_reads_tf_config) {
  tf_config_scope env{momentum_cluster};
  auto spec = resolve_cluster("", "", -1);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:1");
  spec = resolve_cluster("", "chief", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "chief:0");
}

BOOST_AUTO_TEST_CASE(resolve_prefers_the_file_to_tf_config) {
  temp_dir dir;
  auto path = dir.write("c.json", kfac_cluster);
  tf_config_scope env{momentum_cluster};
  auto spec = resolve_cluster(path, "inverse", 0);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->count("inverse"), 1);
}

BOOST_AUTO_TEST_CASE(resolve_names_tf_config_in_errors) {
  tf_config_scope env{R"({"cluster": {"chief": ["h:1"], "worker": ["h:1"]},
                          "task": {"type": "chief", "index": 0}})"};
  auto spec = resolve_cluster("", "", -1);
  refusal_holding(spec, "TF_CONFIG: cluster.worker[0] \"h:1\": "
                        "duplicate address");
}

BOOST_AUTO_TEST_CASE(resolve_without_any_cluster) {
  tf_config_scope env{nullptr};
  auto spec = resolve_cluster("", "worker", 0);
  refusal_holding(spec, "give --cluster FILE or set the TF_CONFIG");
  BOOST_CHECK_EQUAL(static_cast<ec>(spec.error().code()), ec::invalid_config);
  tf_config_scope empty{""};
  spec = resolve_cluster("", "worker", 0);
  BOOST_CHECK(!spec);
}

BOOST_AUTO_TEST_CASE(resolve_with_custom_known_jobs) {
  temp_dir dir;
  auto path = dir.write("c.json", R"({"cluster": {"chief": ["h:1"],
                                       "sidecar": ["h:2"]}})");
  auto jobs = default_cluster_jobs();
  BOOST_CHECK(!resolve_cluster(path, "sidecar", 0));
  jobs.push_back("sidecar");
  auto spec = resolve_cluster(path, "sidecar", 0, jobs);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->address(*spec->task).str(), "h:2");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(tf_config_as_tensorflow_writes_it)

// The shapes of TensorFlow's TFConfigClusterResolver (a top-level
// "rpc_layer"), of Estimator and AI Platform jobs ("master" for the chief,
// "environment": "cloud"), and of Kubeflow's TFJob (chief, ps, worker).

BOOST_AUTO_TEST_CASE(kubeflow_tfjob_shape) {
  auto spec = cluster_spec::parse(R"({"cluster":{"chief":["tfjob-chief-0:2222"],
    "ps":["tfjob-ps-0:2222"],"worker":["tfjob-worker-0:2222",
    "tfjob-worker-1:2222"]},"task":{"type":"worker","index":1},
    "environment":"cloud"})", "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->address(*spec->task).str(), "tfjob-worker-1:2222");
}

BOOST_AUTO_TEST_CASE(master_is_the_chief) {
  auto spec = cluster_spec::parse(R"({"cluster": {
      "master": ["cmle-training-master-0:2222"],
      "ps": ["cmle-training-ps-0:2222"],
      "worker": ["cmle-training-worker-0:2222", "cmle-training-worker-1:2222"]},
    "environment": "cloud",
    "task": {"type": "master", "index": 0}})", "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "chief:0");
  BOOST_CHECK_EQUAL(spec->count("chief"), 1);
  BOOST_CHECK_EQUAL(spec->count("master"), 0);
  BOOST_CHECK_EQUAL(spec->address(task_id{"chief", 0}).str(),
                    "cmle-training-master-0:2222");
  // Both names at once is one chief too many.
  check_refused(R"({"cluster": {"master": ["h:1"], "chief": ["h:2"]}})",
                {"cluster.master and cluster.chief: both name the chief"});
}

BOOST_AUTO_TEST_CASE(rpc_layer_grpc_is_ignored_others_refused) {
  auto text = std::string{R"({"cluster": {"chief": ["localhost:12345"],
    "worker": ["localhost:23456"]}, "task": {"type": "worker", "index": 0},
    "rpc_layer": )"};
  auto spec = cluster_spec::parse(text + R"("grpc"})", "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:0");
  check_refused(text + R"("grpc+verbs"})",
                {"rpc_layer \"grpc+verbs\": not supported",
                 "only \"grpc\" is accepted"});
  check_refused(text + R"(1})", {"rpc_layer: not a string"});
  // resolve_cluster says on stderr that it ignored it; the run goes on.
  tf_config_scope env{(text + R"("grpc"})").c_str()};
  auto resolved = resolve_cluster("", "", -1);
  BOOST_REQUIRE_MESSAGE(resolved, test::why(resolved));
}

BOOST_AUTO_TEST_CASE(the_evaluator_job) {
  // In the cluster: a task like the others.
  auto spec = cluster_spec::parse(R"({"cluster": {"chief": ["h:1"],
    "worker": ["h:2"], "evaluator": ["h:3"]},
    "task": {"type": "evaluator", "index": 0}})", "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->address(*spec->task).str(), "h:3");
  BOOST_CHECK(!spec->task_outside_cluster());
}

BOOST_AUTO_TEST_CASE(the_evaluator_outside_the_cluster) {
  // tf.distribute's and Estimator's shape: the evaluator is no entry of
  // "cluster", only the task of its own process.
  for (auto cluster : {R"("chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"])",
                       R"("worker": ["h:1", "h:2"], "ps": ["h:3"])"}) {
    auto text = std::string{R"({"cluster": {)"} + cluster
                + R"(}, "task": {"type": "evaluator", "index": 0}})";
    auto spec = cluster_spec::parse(text, "TF_CONFIG");
    BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
    BOOST_CHECK_EQUAL(spec->task->str(), "evaluator:0");
    BOOST_CHECK(spec->task_outside_cluster());
    BOOST_CHECK(!spec->contains(*spec->task));
    BOOST_CHECK_EQUAL(spec->count("evaluator"), 0);
    // Not one of the tasks the launcher starts or the chief waits for.
    for (const auto& t : spec->tasks())
      BOOST_CHECK(t.job != "evaluator");
  }
  BOOST_CHECK_EQUAL(
    cluster_spec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
      "task": {"type": "evaluator", "index": 0}})", "TF_CONFIG")
      ->chief_task()
      .str(),
    "chief:0");
  BOOST_CHECK_EQUAL(
    cluster_spec::parse(R"({"cluster": {"worker": ["h:1", "h:2"]},
      "task": {"type": "evaluator", "index": 0}})", "TF_CONFIG")
      ->chief_task()
      .str(),
    "worker:0");
  // TensorFlow has one evaluator outside "cluster": index 0.
  check_refused(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
    "task": {"type": "evaluator", "index": 1}})",
                {"TF_CONFIG: task evaluator:1: index out of range",
                 "TensorFlow's one evaluator, index 0"}, "TF_CONFIG");
}

BOOST_AUTO_TEST_CASE(kubeflow_per_pod_dns_names_as_hosts) {
  // TFJob's per-pod names: NAME-REPLICA-INDEX.NAMESPACE.svc, one port for
  // every pod (each pod has its own address).
  auto spec = cluster_spec::parse(R"({"cluster": {
      "master": ["kfac-master-0.team-a.svc:2222"],
      "ps": ["kfac-ps-0.team-a.svc:2222"],
      "worker": ["kfac-worker-0.team-a.svc:2222",
                 "kfac-worker-1.team-a.svc.cluster.local:2222"]},
    "task": {"type": "worker", "index": 1}, "environment": "cloud"})",
                                  "TF_CONFIG");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->address(*spec->task).host,
                    "kfac-worker-1.team-a.svc.cluster.local");
  BOOST_CHECK_EQUAL(spec->address(task_id{"chief", 0}).str(),
                    "kfac-master-0.team-a.svc:2222");
}

BOOST_AUTO_TEST_CASE(bad_tf_config_names_the_variable_and_the_value) {
  // A job TensorFlow does not know (in the task, and in the cluster).
  check_refused(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
    "task": {"type": "trainer", "index": 0}})",
                {"TF_CONFIG: task trainer:0: unknown job \"trainer\"",
                 "known: chief, worker, ps, covariance, inverse, evaluator"}, "TF_CONFIG");
  check_refused(R"({"cluster": {"chief": ["h:1"], "trainer": ["h:2"]},
    "task": {"type": "chief", "index": 0}})",
                {"TF_CONFIG", "unknown job \"trainer\""}, "TF_CONFIG");
  // Malformed JSON: the parser's words and the value.
  check_refused(R"({"cluster": {"chief": ["h:1"],})",
                {"TF_CONFIG: not JSON: ", "the text: ",
                 R"({\"cluster\": {\"chief\": [\"h:1\"],})"}, "TF_CONFIG");
  // A task index outside its job.
  check_refused(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]},
    "task": {"type": "worker", "index": 2}})",
                {"TF_CONFIG: task worker:2: index out of range (cluster.worker "
                 "has 2 entries: 0..1)"}, "TF_CONFIG");
  check_refused(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
    "task": {"type": "worker", "index": -1}})",
                {"TF_CONFIG: task worker:-1: negative index"}, "TF_CONFIG");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ready_topologies)

BOOST_AUTO_TEST_CASE(example_cluster_files_are_valid_and_use_distinct_ports) {
  auto dir = std::filesystem::path{SYNCFAC_SOURCE_DIR} / "examples"
             / "topologies";
  std::map<uint16_t, std::string> owner; // port -> file
  int files = 0;
  const int ephemeral_low = test::ephemeral_port_low();
  for (const auto& entry : std::filesystem::directory_iterator{dir}) {
    if (entry.path().extension() != ".json")
      continue;
    ++files;
    auto name = entry.path().filename().string();
    auto spec = cluster_spec::load(entry.path().string());
    BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
    BOOST_CHECK_MESSAGE(!spec->task, name << " names a task");
    BOOST_CHECK_EQUAL(spec->count("chief"), 1);
    BOOST_CHECK_MESSAGE(spec->count("worker") >= 2, name);
    BOOST_CHECK_MESSAGE(spec->count("ps") >= 1, name);
    for (const auto& t : spec->tasks()) {
      const auto& hp = spec->address(t);
      BOOST_CHECK_MESSAGE(hp.host == "localhost", name << " " << t.str());
      // Below the kernel's ephemeral range: a port inside it may be an
      // outgoing connection's when the task binds it (docs/cluster.md).
      BOOST_CHECK_MESSAGE(hp.port >= 1024 && hp.port < ephemeral_low,
                          name << " " << t.str() << " port " << hp.port
                               << " is not in 1024.." << ephemeral_low - 1);
      auto [pos, added] = owner.emplace(hp.port, name);
      BOOST_CHECK_MESSAGE(added, name << " " << t.str() << " port "
                                      << hp.port << " also in "
                                      << pos->second);
    }
  }
  BOOST_CHECK_GE(files, 4);
  // The seeds' K-FAC strategies.
  auto cw = cluster_spec::load((dir / "kfac_chief_worker.json").string());
  BOOST_REQUIRE_MESSAGE(cw, test::why(cw));
  BOOST_CHECK_EQUAL(cw->count("covariance"), 1);
  BOOST_CHECK_EQUAL(cw->count("inverse"), 1);
  auto dw = cluster_spec::load((dir / "kfac_dedicated_workers.json").string());
  BOOST_REQUIRE_MESSAGE(dw, test::why(dw));
  BOOST_CHECK_EQUAL(dw->count("worker"), 5);
}

BOOST_AUTO_TEST_SUITE_END()
