#define BOOST_TEST_MODULE examples_tf_config
#include <boost/test/unit_test.hpp>

// TF_CONFIG exactly as TensorFlow and Kubeflow write it, as real loopback
// clusters: every process gets its own TF_CONFIG (the same "cluster", its
// own "task") and no --cluster, --job_name or --task, as a pod or a
// tf.distribute job starts it, and the run trains to the end.
//
// The shapes: tf.distribute's multi-worker TF_CONFIG with a chief, workers
// and PS tasks (with TFConfigClusterResolver's "rpc_layer"); a cluster of
// workers and PS tasks without a chief (worker 0 is the chief); the
// evaluator as TensorFlow places it, a task of its own outside "cluster",
// with a chief and without one; and Kubeflow's TFJob ("master", "worker",
// "ps", "environment": "cloud") with per-pod DNS names
// (NAME-REPLICA-INDEX.NAMESPACE.svc). Those names resolve on this host in a
// mount namespace of each process whose /etc/hosts maps them to 127.0.0.x
// (`unshare -m` and a bind mount: the resolver's real lookup of the real
// names, no name server needed); without the rights for that (not root)
// the case fails, saying why. Bad TF_CONFIG values end the program
// before anything starts, naming the variable and the value.

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/roles/cluster_processes.hpp"
#include "tests/temp_dir.hpp"

using namespace syncfac::test;
using namespace std::chrono_literals;

namespace {

const std::string flags = quick_run_flags("120000");
const std::string eval_flags = quick_eval_flags("120000")
                               + " --eval_every_steps 10";

/// A job's addresses.
using jobs = std::vector<std::pair<std::string, std::vector<std::string>>>;

/// "host:port" with a port nobody listens on now.
std::string at(const std::string& host) {
  return host + ":" + std::to_string(free_port());
}

/// A TF_CONFIG value: the cluster, the task and whatever else `extra` adds
/// (e.g. "rpc_layer"), in TensorFlow's spelling.
std::string tf_config(const jobs& cluster, const std::string& type, int index,
                      const std::string& extra = "") {
  std::string json = "{\"cluster\": {";
  for (size_t j = 0; j < cluster.size(); ++j) {
    json += (j == 0 ? "\"" : ", \"") + cluster[j].first + "\": [";
    for (size_t i = 0; i < cluster[j].second.size(); ++i)
      json += (i == 0 ? "\"" : ", \"") + cluster[j].second[i] + "\"";
    json += "]";
  }
  json += "}, \"task\": {\"type\": \"" + type + "\", \"index\": "
          + std::to_string(index) + "}" + extra + "}";
  return json;
}

/// `program` with TF_CONFIG set to `config` (JSON has no single quotes);
/// with a hosts file, in a mount namespace where it is /etc/hosts.
std::string with_tf_config(const std::string& config,
                           const std::string& program,
                           const std::string& hosts = "") {
  auto env = "env TF_CONFIG='" + config + "' " + program;
  if (hosts.empty())
    return env;
  // The inner script runs its arguments ("$0" "$@": env TF_CONFIG=...).
  return "unshare -m sh -c 'mount --bind " + hosts
         + " /etc/hosts && exec \"$0\" \"$@\"' " + env;
}

/// Starts one process per task of `cluster` (the launcher's order: chief,
/// workers, ps...; `order` if given), each with its TF_CONFIG; the chief's
/// task (`chief`: "chief" or "master" as the TF_CONFIG spells it, or
/// worker 0) writes `summary`. Waits for every process; checks each exit 0
/// and the summary's global step.
void train_to_the_end(const temp_dir& tmp, const jobs& cluster,
                      const std::string& chief_type, int steps,
                      const std::string& extra = "",
                      const std::string& hosts = "") {
  auto summary = tmp.file("summary.json");
  std::vector<std::unique_ptr<child>> procs;
  std::vector<std::string> names;
  for (const auto& [job, addrs] : cluster)
    for (size_t i = 0; i < addrs.size(); ++i) {
      auto name = job + "-" + std::to_string(i);
      bool chief = job == chief_type && i == 0;
      auto program = node + flags + " --steps " + std::to_string(steps)
                     + (chief ? " --log_every 10 --summary " + summary : "");
      procs.push_back(std::make_unique<child>(
        with_tf_config(tf_config(cluster, job, static_cast<int>(i), extra),
                       program, hosts),
        tmp.file(name + ".log")));
      names.push_back(name);
    }
  for (size_t k = 0; k < procs.size(); ++k) {
    auto rc = procs[k]->wait(300s);
    case_output::keep(names[k], procs[k]->output());
    BOOST_CHECK_MESSAGE(rc == 0, names[k] << " exited " << rc << ":\n"
                                          << procs[k]->output());
  }
  auto text = read_file(summary);
  BOOST_REQUIRE_MESSAGE(!text.empty(), "no summary from the chief");
  BOOST_CHECK_EQUAL(number(text, "global_step"), steps);
}

/// Whether this process may give a child a mount namespace of its own.
bool can_bind_hosts() {
  return run_program("unshare -m true").exit_code == 0;
}

/// The kubeflow cases give each process its own /etc/hosts through a
/// mount namespace: scripts/test.sh runs as root, so a case that cannot
/// fails rather than skip.
void require_mount_namespaces() {
  BOOST_REQUIRE_MESSAGE(can_bind_hosts(),
                        "'unshare -m' is not permitted here (needs root or "
                        "CAP_SYS_ADMIN, as scripts/test.sh has) to give each "
                        "process an /etc/hosts with the per-pod names");
}

} // namespace

BOOST_AUTO_TEST_SUITE(tensorflow_shapes)

BOOST_AUTO_TEST_CASE(multi_worker_with_chief_workers_and_ps) {
  // tf.distribute's TF_CONFIG for a chief, workers and a PS task, with the
  // "rpc_layer" TFConfigClusterResolver reads ("grpc": ignored, said once).
  temp_dir tmp;
  jobs cluster = {{"chief", {at("localhost")}},
                  {"worker", {at("localhost"), at("localhost")}},
                  {"ps", {at("localhost")}}};
  train_to_the_end(tmp, cluster, "chief", 30, ", \"rpc_layer\": \"grpc\"");
  BOOST_CHECK(read_file(tmp.file("chief-0.log"))
                .find("TF_CONFIG: rpc_layer \"grpc\" ignored")
              != std::string::npos);
}

BOOST_AUTO_TEST_CASE(workers_and_ps_without_a_chief) {
  // No chief job: worker 0 is the chief, as in TensorFlow.
  temp_dir tmp;
  jobs cluster = {{"worker", {at("localhost"), at("localhost")}},
                  {"ps", {at("localhost")}}};
  train_to_the_end(tmp, cluster, "worker", 30);
}

BOOST_AUTO_TEST_CASE(workers_only_is_refused_naming_the_missing_ps) {
  // MultiWorkerMirroredStrategy's all-reduce cluster has no PS task;
  // syncfac keeps the variables on PS shards and says so at once.
  temp_dir tmp;
  jobs cluster = {{"worker", {at("localhost"), at("localhost")}}};
  auto r = run_program(with_tf_config(tf_config(cluster, "worker", 0),
                                      node + flags + " --steps 5")
                       );
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK_MESSAGE(r.output.find("the cluster has no 'ps' task")
                        != std::string::npos,
                      r.output);
}

BOOST_AUTO_TEST_CASE(the_evaluator_as_tensorflow_places_it) {
  // The evaluator is no entry of "cluster": its TF_CONFIG's task is
  // {"type": "evaluator", "index": 0}; with a chief and without one (then
  // it finds the chief at worker 0). The last worker starts once the
  // evaluator is in, so that the chief, which waits for every worker,
  // trains with the evaluator there.
  for (bool with_chief : {true, false}) {
    BOOST_TEST_CONTEXT((with_chief ? "chief, worker, ps" : "2 workers, ps")) {
      temp_dir tmp;
      jobs cluster;
      if (with_chief)
        cluster.push_back({"chief", {at("localhost")}});
      cluster.push_back({"worker", {at("localhost")}});
      if (!with_chief)
        cluster.back().second.push_back(at("localhost"));
      cluster.push_back({"ps", {at("localhost")}});
      auto summary = tmp.file("summary.json");
      auto own = tmp.file("evaluator.jsonl");
      auto start = [&](const std::string& job, int index,
                       const std::string& more) {
        return std::make_unique<child>(
          with_tf_config(tf_config(cluster, job, index),
                         node + flags + " --steps 40" + more),
          tmp.file(job + "-" + std::to_string(index) + ".log"));
      };
      auto ps = start("ps", 0, "");
      auto host = start(with_chief ? "chief" : "worker", 0,
                        " --summary " + summary);
      child eval{with_tf_config(tf_config(cluster, "evaluator", 0),
                                evaluator + eval_flags + " --metrics " + own),
                 tmp.file("evaluator.log")};
      BOOST_REQUIRE_MESSAGE(
        eval.wait_for_output("evaluating 500 examples", 120s), eval.output());
      auto last = start("worker", with_chief ? 0 : 1, "");
      auto host_rc = host->wait(300s);
      case_output::keep("chief's host", host->output());
      case_output::keep("evaluator", eval.output());
      BOOST_REQUIRE_EQUAL(host_rc, 0);
      BOOST_CHECK_EQUAL(eval.wait(120s), 0);
      BOOST_CHECK_EQUAL(ps->wait(60s), 0);
      BOOST_CHECK_EQUAL(last->wait(60s), 0);
      // It listened nowhere, joined, and its last report is of step 40.
      BOOST_CHECK_MESSAGE(eval.output().find("evaluator:0: not listening "
                                             "(a task outside the cluster")
                            != std::string::npos,
                          eval.output());
      auto records = read_file(own);
      BOOST_TEST_MESSAGE("evaluator's records:\n" << records);
      auto steps = json_numbers(records, "step");
      BOOST_REQUIRE(!steps.empty());
      BOOST_CHECK_EQUAL(steps.back(), 40);
      BOOST_CHECK_EQUAL(number(read_file(summary), "global_step"), 40);
      // The chief's log has the evaluator's reports.
      BOOST_CHECK_MESSAGE(host->output().find("[evaluator:0] global_step: 40")
                            != std::string::npos,
                          host->output());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kubeflow_shapes)

BOOST_AUTO_TEST_CASE(tfjob_master_workers_ps_with_per_pod_dns_names) {
  require_mount_namespaces();
  // What the TFJob operator writes into each pod: "master" (its
  // replica type for the chief), "worker", "ps", "environment": "cloud",
  // and per-pod DNS names. Each pod has its own address; here each name
  // maps to an address of its own on loopback (127.0.0.2...), each task on
  // its own port, since they share this host's ports.
  temp_dir tmp;
  const std::string ns = "kfac-team.svc";
  std::vector<std::string> names = {"kfac-mnist-master-0." + ns,
                                    "kfac-mnist-worker-0." + ns,
                                    "kfac-mnist-worker-1." + ns,
                                    "kfac-mnist-ps-0." + ns};
  auto hosts = tmp.file("hosts");
  {
    std::ofstream out{hosts};
    out << "127.0.0.1 localhost\n";
    for (size_t i = 0; i < names.size(); ++i)
      out << "127.0.0." << (i + 2) << " " << names[i] << "\n";
  }
  const std::string ps_entry = at(names[3]);
  jobs cluster = {{"master", {at(names[0])}},
                  {"worker", {at(names[1]), at(names[2])}},
                  {"ps", {ps_entry}}};
  train_to_the_end(tmp, cluster, "master", 30,
                   ", \"environment\": \"cloud\"", hosts);
  // Each listened on the address its name resolves to there (the PS on
  // 127.0.0.5 only), and the names resolve only in those namespaces: the
  // nodes found each other through that file.
  BOOST_CHECK_MESSAGE(read_file(tmp.file("ps-0.log"))
                        .find("listening on 127.0.0.5:"
                              + ps_entry.substr(ps_entry.rfind(':') + 1)
                              + " (cluster entry " + ps_entry + ")")
                        != std::string::npos,
                      read_file(tmp.file("ps-0.log")));
  BOOST_CHECK_NE(run_program("getent hosts " + names[3]).exit_code, 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bad_tf_config)

// Each ends the node program before it listens or connects, exit != 0,
// naming TF_CONFIG and the value.
void check_refused(const std::string& config,
                   const std::vector<std::string>& parts) {
  auto r = run_program(with_tf_config(config, node + flags + " --steps 5")
                       );
  BOOST_CHECK_NE(r.exit_code, 0);
  for (const auto& part : parts)
    BOOST_CHECK_MESSAGE(r.output.find(part) != std::string::npos,
                        "'" << part << "' not in: " << r.output);
  BOOST_CHECK_MESSAGE(r.output.find("listening") == std::string::npos,
                      r.output);
}

BOOST_AUTO_TEST_CASE(a_job_tensorflow_does_not_know) {
  check_refused(R"({"cluster": {"chief": ["localhost:47811"],
    "worker": ["localhost:47812"], "ps": ["localhost:47813"]},
    "task": {"type": "trainer", "index": 0}})",
                {"TF_CONFIG: task trainer:0: unknown job \"trainer\""});
}

BOOST_AUTO_TEST_CASE(malformed_json) {
  check_refused(R"({"cluster": {"chief": ["localhost:47811"]},)",
                {"TF_CONFIG: not JSON", "the text: ",
                 R"("{\"cluster\": {\"chief\": [\"localhost:47811\"]},")"});
}

BOOST_AUTO_TEST_CASE(a_task_index_outside_its_job) {
  check_refused(R"({"cluster": {"chief": ["localhost:47811"],
    "worker": ["localhost:47812"], "ps": ["localhost:47813"]},
    "task": {"type": "worker", "index": 3}})",
                {"TF_CONFIG: task worker:3: index out of range (cluster.worker "
                 "has 1 entry: 0..0)"});
}

BOOST_AUTO_TEST_SUITE_END()
