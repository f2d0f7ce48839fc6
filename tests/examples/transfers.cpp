#define BOOST_TEST_MODULE transfers
#include <boost/test/unit_test.hpp>

// What a run sends per worker step against the minimum of one push and
// one pull of the parameters (docs/benchmarks-history.md, "Transfers per step"):
// the summary's transfers.ratio_to_minimum, in one process and across
// processes on loopback. A worker that pulls with its token request and
// gets the values of the step before the apply (and pulls again) sends
// 1.5x the minimum; the bound of 1.05 fails on that. Also the benchmark
// delay device (--device bench_delay:...) and its refusals, and worker
// tasks that host several workers (--workers_per_task).

#include <string>

#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

const std::string data = " --fake_data --fake_train_size 2048"
                         " --fake_test_size 200 --batch_size 16 --model mlp"
                         " --seed 5 --no_progress --no_final_eval"
                         " --log_every 1000";

/// Runs `flags` in one process and returns its summary.
std::string run_single(const temp_dir& tmp, const std::string& name,
                       const std::string& flags) {
  auto summary = tmp.file(name + ".json");
  auto res = run_ok(single + data + " --threads 1 " + flags
                    + " --summary " + summary);
  return read_file(summary);
}

/// The workers' bytes per step within [low, 1.05] times the minimum, and
/// at most `unused` of the pulled bytes unused (a stale worker's pull
/// answered at the step after its push while its token was for a later
/// one).
void check_near_minimum(const std::string& text, double low,
                        double unused = 0.05) {
  auto ratio = number(text, "ratio_to_minimum");
  BOOST_TEST(ratio <= 1.05, "bytes per worker step " << ratio
                              << "x the minimum: " << text);
  BOOST_TEST(ratio >= low, "bytes per worker step " << ratio
                             << "x the minimum: " << text);
  BOOST_TEST(number(text, "bytes_pulled_unused")
               <= unused * number(text, "bytes_pulled"),
             text);
  BOOST_TEST(number(text, "parameter_bytes") > 0);
}

} // namespace

BOOST_AUTO_TEST_CASE(in_process_workers_send_one_push_and_one_pull_per_step) {
  temp_dir tmp;
  // R = N: every worker's step is one push and one pull; the pulls wait at
  // the shards for the apply (pulls_waited) instead of being answered
  // with the step before it.
  auto text = run_single(tmp, "n3", "--steps 60 --worker_replicas 3"
                                    " --replicas_to_aggregate 3 --ps_tasks 2");
  // Not below 0.90: a worker that takes a second token of the step it is
  // at (the initial tokens; on a loaded machine, whenever the others ask
  // late) goes on without a pull. Quiet, 0.97-1.00; beside `yes` x2 down
  // to 0.945 (20 of 183 worker steps without one).
  check_near_minimum(text, 0.90);
  BOOST_TEST(number(text, "pulls_waited") > 0);
  BOOST_TEST(number(text, "global_step") == 60);
}

BOOST_AUTO_TEST_CASE(backup_workers_stay_at_the_minimum) {
  temp_dir tmp;
  // A backup worker that takes a token left over at the step it is at
  // goes on without a pull: below the minimum, never above it.
  auto text = run_single(tmp, "backup", "--steps 60 --worker_replicas 3"
                                        " --replicas_to_aggregate 2");
  // A third of the pushes are stale: ~6 % of the pulls come at a step
  // older than the token (measured 5.2-6.0 %).
  check_near_minimum(text, 0.75, 0.12);
}

BOOST_AUTO_TEST_CASE(fewer_workers_than_replicas_cancel_the_pull) {
  // N = 1 < R = 2: every other token is for the step the worker's values
  // are at; it goes on with them and cancels the waiting pull (answered
  // without values), so it pulls once per two pushes.
  temp_dir tmp;
  auto text = run_single(tmp, "fewer", "--steps 30 --worker_replicas 1"
                                       " --replicas_to_aggregate 2");
  check_near_minimum(text, 0.70);
  BOOST_TEST(number(text, "pulls_without_values") >= 25);
}

BOOST_FIXTURE_TEST_CASE(a_cluster_on_loopback_sends_the_minimum, run_files) {
  // 160 steps, not 40: the initial tokens' first round is partly wasted by
  // design (docs/protocol.md), and on a loaded machine a worker whose token
  // request comes late finds the step's tokens taken and skips a step, its
  // pull then unused. Beside `yes` x2 that was 0-5 whole pulls of 80 at 40
  // steps (up to 5.2 %, over the bound) and 1-5 of 400 at 200 steps (at
  // most 1.3 %): a fixed cost that the run must be long enough to dwarf.
  // A pull thrown away every step still fails both bounds.
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 2}});
  auto res = run_ok(launcher + " --cluster " + cluster + " --program "
                    + distributed + " --max_wall_s 300 -- " + data
                    + " --threads 1 --connect_timeout_ms 60000"
                      " --steps 160 --summary " + summary);
  auto text = read_file(summary);
  check_near_minimum(text, 0.95);
  BOOST_TEST(number(text, "messages_per_global_step") > 0);
}

BOOST_FIXTURE_TEST_CASE(worker_tasks_host_several_workers_each, run_files) {
  // --workers_per_task 3: 2 worker tasks host workers 0 .. 5, each a peer
  // of the chief and the shards of its own; N = R = 6, and the delay
  // device's random gradients go on the wire as a real push would.
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 2}});
  auto res = run_ok(launcher + " --cluster " + cluster + " --program "
                    + distributed + " --max_wall_s 300 -- " + data
                    + " --threads 1 --connect_timeout_ms 60000 --steps 30"
                      " --workers_per_task 3 --device bench_delay:1:random"
                      " --summary " + summary);
  auto text = read_file(summary);
  BOOST_TEST(number(text, "workers") == 6);
  BOOST_TEST(number(text, "replicas_to_aggregate") == 6);
  BOOST_TEST(number(text, "global_step") == 30);
  for (int i = 0; i < 6; ++i)
    BOOST_TEST(text.find("\"worker:" + std::to_string(i) + "\": {")
                 != std::string::npos,
               "worker:" << i << " not in the cluster's roles: " << text);
  BOOST_TEST(said(res.output, "hosting worker:3, worker:4, worker:5"),
             res.output);
  check_near_minimum(text, 0.95);
  // N must be the worker tasks times K.
  check_refused(distributed + " --cluster " + cluster
                  + " --job_name ps --task 0 --workers_per_task 3"
                    " --worker_replicas 4" + data,
                {"--worker_replicas 4", "2 'worker' task(s)",
                 "--workers_per_task 3", "(6 workers)"});
}

BOOST_AUTO_TEST_CASE(the_delay_device_runs_the_protocol_without_compute) {
  temp_dir tmp;
  auto text = run_single(tmp, "delay", "--steps 50 --worker_replicas 8"
                                       " --device bench_delay:2:pareto:1.5");
  BOOST_TEST(number(text, "global_step") == 50);
  BOOST_TEST(json_string(text, "backend") == "bench_delay:2:pareto:1.5");
  check_near_minimum(text, 0.95);
}

BOOST_AUTO_TEST_CASE(a_malformed_delay_device_is_refused_by_name) {
  for (std::string bad : {"bench_delay:fast", "bench_delay:5:pareto:1",
                          "bench_delay:5:gamma:2", "bench_delay:5:lognormal"}) {
    auto res = run_program(single + data + " --steps 5 --device " + bad);
    BOOST_TEST(res.exit_code != 0, bad);
    BOOST_TEST(said(res.output, "device '" + bad + "'"),
               bad << ": " << res.output);
  }
}
