#define BOOST_TEST_MODULE tls_roles
#include <boost/test/unit_test.hpp>

// Certificates bound to tasks (docs/tls.md, "Certificates bound to
// tasks"), with real processes on loopback: a node given another task's
// certificate stops at start-up, and impostors (tls_impostor: a worker's
// key posing as the chief, as a PS shard, as another worker; the right
// task on the wrong host; an expired certificate; another CA) are refused
// by the chief and the PS shard of a waiting cluster, with the reason on
// both sides, while the run that follows trains to the same parameters as
// one nobody disturbed.

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/examples/node_process.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

const std::string impostor = bin + "tls_impostor";
const std::string script = SYNCFAC_SOURCE_DIR "/scripts/make-cluster-certs.sh";

const std::string flags = " --fake_data --fake_train_size 2048"
                          " --fake_test_size 500 --batch_size 32"
                          " --threads 1 --seed 3 --no_progress"
                          " --connect_timeout_ms 90000 --num_tokens 0"
                          " --steps 20";

std::string sh_quote(const std::string& s) {
  return "'" + s + "'";
}

/// A certificate of the cluster's CA in certs/`dir` for `san` (with
/// serverAuth and clientAuth), valid for `days` (negative: expired).
void issue(const std::string& certs, const std::string& dir,
           const std::string& san, const std::string& days) {
  auto path = certs + "/" + dir;
  run_ok("mkdir -p " + path);
  std::ofstream{path + "/ext"} << "extendedKeyUsage=serverAuth,clientAuth\n"
                                  "subjectAltName=" << san << "\n";
  run_ok("sh -c " + sh_quote(
    "set -e; cd " + path
    + "; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256"
      " -out node.key; chmod 600 node.key"
      "; openssl req -new -key node.key -subj /CN=x -out node.csr"
      "; openssl x509 -req -in node.csr -CA ../ca.pem -CAkey ../ca.key"
      " -CAcreateserial -CAserial ../ca.srl -days " + days
    + " -extfile ext -out node.pem; cp ../ca.pem ca.pem"));
}

/// One impostor's attempt: its output must hold `impostor_says` (and end
/// with exit code `code`), and the log of the node it dialled `node_says`.
struct attempt {
  std::string what;
  std::string cert;
  std::string claim;
  std::string dial;
  std::string hello_as;
  int code;
  std::string impostor_says;
  std::string node_says;
};

} // namespace

BOOST_AUTO_TEST_CASE(a_node_given_another_tasks_certificate_stops) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 1}});
  auto certs = write_cluster_certs(tmp, cluster);
  run_ok("bash " + script + " " + certs + " node");
  // worker:0 with worker:1's directory.
  check_refused(distributed + " --cluster " + cluster
                  + " --job_name worker --task 0 --tls_dir " + certs
                  + "/worker-1" + flags,
                {"worker-1/node.pem", "is the certificate of worker:1",
                 "this node is worker:0"});
  // A certificate bound to no task.
  check_refused(distributed + " --cluster " + cluster
                  + " --job_name ps --task 0 --tls_dir " + certs + "/node"
                  + flags,
                {"node/node.pem", "names no task",
                 "scripts/make-cluster-certs.sh"});
}

BOOST_AUTO_TEST_CASE(impostors_are_refused_and_the_run_is_unaffected) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto certs = write_cluster_certs(tmp, cluster);
  // Another worker's key, the right task's key for another host, an
  // expired one: all from this cluster's CA.
  run_ok("bash " + script + " " + certs + " worker:1@127.0.0.1");
  issue(certs, "worker-0-elsewhere", "URI:syncfac://worker/0,IP:10.9.9.9",
        "30");
  issue(certs, "worker-0-expired", "URI:syncfac://worker/0,IP:127.0.0.1",
        "-1");
  auto foreign = tmp.file("foreign");
  run_ok("bash " + script + " " + foreign + " worker:0@127.0.0.1");

  // The undisturbed run, for its parameters.
  auto reference = tmp.file("reference.json");
  auto res = run_program(launcher + " --cluster " + cluster + " --program "
                         + distributed + " --max_wall_s 300 -- " + flags
                         + " --tls_dir " + certs + " --summary "
                         + reference);
  case_output::keep("the run", res.output);
  require_success(res);

  // The same cluster, its worker held back: the chief and the shard wait
  // for it while the impostors try.
  auto summary = tmp.file("summary.json");
  auto node = [&](const std::string& job, const std::string& extra) {
    return distributed + " --cluster " + cluster + " --job_name " + job
           + " --task 0 --tls_dir " + certs + flags + extra;
  };
  auto chief = start_process(node("chief", " --summary " + summary),
                             tmp.file("chief.log"));
  kill_on_exit chief_guard{chief};
  auto ps = start_process(node("ps", ""), tmp.file("ps.log"));
  kill_on_exit ps_guard{ps};
  await_output(chief, "listening on");
  await_output(ps, "listening on");

  std::vector<attempt> attempts = {
    {"a worker's key claiming to be the chief", "worker-0", "chief:0",
     "ps:0", "", 10,
     "it claims to be chief:0 but its certificate is that of worker:0",
     "claims to be chief:0 but its certificate is that of worker:0"},
    {"a worker's key saying hello as the chief", "worker-0", "worker:0",
     "ps:0", "chief:0", 11,
     "a node whose certificate is that of worker:0 claims to be chief:0",
     "a node whose certificate is that of worker:0 claims to be chief:0"},
    {"a worker's key saying hello as a PS shard", "worker-0", "worker:0",
     "chief:0", "ps:0", 11,
     "a node whose certificate is that of worker:0 claims to be ps:0",
     "a node whose certificate is that of worker:0 claims to be ps:0"},
    {"another worker's key claiming to be worker 0", "worker-1", "worker:0",
     "chief:0", "", 10,
     "it claims to be worker:0 but its certificate is that of worker:1",
     "it claims to be worker:0 but its certificate is that of worker:1"},
    {"a task not in the cluster", "worker-1", "worker:1", "ps:0", "", 10,
     "worker:1 is not a task of this cluster",
     "worker:1 is not a task of this cluster"},
    {"worker 0's task on another host", "worker-0-elsewhere", "worker:0",
     "chief:0", "", 10, "does not name the host '127.0.0.1'",
     "does not name the host '127.0.0.1'"},
    {"an expired certificate", "worker-0-expired", "worker:0", "chief:0", "",
     10, "certificate expired", "certificate has expired"},
  };
  for (const auto& a : attempts) {
    BOOST_TEST_CONTEXT(a.what) {
      auto line = impostor + " --cluster " + cluster + " --cert " + certs
                  + "/" + a.cert + " --claim " + a.claim + " --dial " + a.dial
                  + (a.hello_as.empty() ? "" : " --hello_as " + a.hello_as);
      auto r = run_program(line);
      case_output::keep(a.what, r.output);
      BOOST_TEST(r.exit_code == a.code, r.output);
      BOOST_TEST(said(r.output, a.impostor_says), r.output);
      auto& target = a.dial == "ps:0" ? ps : chief;
      auto deadline = clock_type::now() + std::chrono::seconds{10};
      while (!said(target.output(), a.node_says)
             && clock_type::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
      BOOST_TEST(said(target.output(), a.node_says), target.output());
    }
  }
  // Another CA: refused at the handshake, on both sides.
  auto r = run_program(impostor + " --cluster " + cluster + " --cert "
                       + foreign + "/worker-0 --claim worker:0 --dial "
                         "chief:0");
  case_output::keep("another CA", r.output);
  BOOST_TEST(r.exit_code == 10, r.output);
  BOOST_TEST(said(r.output, "not signed by this cluster's CA"), r.output);
  BOOST_TEST(said(chief.output(), "does not trust this cluster's CA"),
             chief.output());

  // The worker comes; the run is the one nobody disturbed.
  auto worker = start_process(node("worker", ""), tmp.file("worker.log"));
  kill_on_exit worker_guard{worker};
  BOOST_REQUIRE(chief.wait(std::chrono::seconds{240}));
  BOOST_REQUIRE(worker.wait(std::chrono::seconds{60}));
  BOOST_REQUIRE(ps.wait(std::chrono::seconds{60}));
  BOOST_TEST(chief.exit_code == 0, chief.output());
  BOOST_TEST(worker.exit_code == 0, worker.output());
  BOOST_TEST(ps.exit_code == 0, ps.output());
  BOOST_TEST(json_string(read_file(summary), "params_digest")
             == json_string(read_file(reference), "params_digest"));
}
