#define BOOST_TEST_MODULE node_plan
#include <boost/test/unit_test.hpp>

// One node's plan (runtime/cluster/node_plan.hpp) without an actor: who
// hosts what in the clusters of docs/design.md, in which order, whom each
// task connects to, what its waits are, the in-process trainer's plan, and
// every bad input refused with a message that names it. Tasks come in the
// cluster's order: chief, worker, ps, covariance, inverse, evaluator.

#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/node_plan.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using std::chrono::milliseconds;

namespace {

/// A cluster of `jobs` (job -> tasks) on loopback ports from 47100.
cluster_spec cluster_of(const std::vector<std::pair<std::string, int>>& jobs) {
  cluster_spec c;
  uint16_t port = 47100;
  for (const auto& [job, n] : jobs)
    for (int i = 0; i < n; ++i)
      c.jobs[job].push_back({"127.0.0.1", port++});
  return c;
}

run_shape momentum_shape(int32_t workers, int32_t ps) {
  run_shape s;
  s.ps_tasks = ps;
  s.gradient_workers = workers;
  s.sends_statistics.assign(static_cast<size_t>(workers), false);
  return s;
}

/// chief_worker: worker 0 sends statistics.
run_shape kfac_shape(int32_t workers, int32_t ps, int32_t cov, int32_t inv) {
  auto s = momentum_shape(workers, ps);
  s.kfac = true;
  s.covariance_actors = cov;
  s.inverse_actors = inv;
  s.sends_statistics[0] = true;
  return s;
}

/// The seeds' dedicated_workers split of 5 tasks: 3 gradient workers, one
/// statistics worker, the last inverts.
run_shape dedicated_shape() {
  run_shape s;
  s.ps_tasks = 1;
  s.gradient_workers = 3;
  s.statistics_workers = 1;
  s.kfac = true;
  s.dedicated_workers = true;
  s.covariance_actors = 1;
  s.inverse_actors = 2;
  s.sends_statistics = {false, false, false, true};
  return s;
}

node_plan plan_of(const cluster_spec& c, const std::string& task,
                  const run_shape& s, int32_t metrics_port = 0) {
  auto t = task_id::parse(task);
  BOOST_REQUIRE(t);
  auto p = make_node_plan(c, *t, s, node_wait_flags{}, metrics_port);
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  return *p;
}

std::vector<std::string> names(const std::vector<planned_role>& roles) {
  std::vector<std::string> out;
  for (const auto& r : roles)
    out.push_back(r.name());
  return out;
}

std::vector<std::string> names(const std::vector<task_id>& tasks) {
  std::vector<std::string> out;
  for (const auto& t : tasks)
    out.push_back(t.str());
  return out;
}

using strings = std::vector<std::string>;

/// Checks that the plan of `task` is refused with ec::invalid_config and a
/// message holding each of `parts`.
void check_refused(const cluster_spec& c, const std::string& task,
                   const run_shape& s, const strings& parts,
                   node_wait_flags flags = {}, int32_t metrics_port = 0) {
  auto t = task_id::parse(task);
  BOOST_REQUIRE(t);
  auto p = make_node_plan(c, *t, s, flags, metrics_port);
  BOOST_REQUIRE_MESSAGE(!p, task + " was not refused");
  auto why = test::failure(p.error(), ec::invalid_config);
  for (const auto& part : parts)
    BOOST_CHECK_MESSAGE(why.find(part) != std::string::npos,
                        "'" + why + "' lacks '" + part + "'");
}

} // namespace

BOOST_AUTO_TEST_CASE(a_momentum_cluster_hosts_one_role_per_task) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 2}});
  auto s = momentum_shape(2, 2);
  auto chief = plan_of(c, "chief:0", s);
  BOOST_CHECK(chief.is_chief());
  BOOST_CHECK((names(chief.hosted) == strings{"metrics", "chief"}));
  // The workers connect to the chief; the chief connects to the shards.
  auto passive = names(chief.passive);
  auto active = names(chief.active);
  BOOST_CHECK((passive == strings{"worker:0", "worker:1"}));
  BOOST_CHECK((active == strings{"ps:0", "ps:1"}));
  BOOST_CHECK(chief.loads_data);
  BOOST_CHECK_EQUAL(chief.worker, -1);

  auto w1 = plan_of(c, "worker:1", s);
  BOOST_CHECK(!w1.is_chief());
  BOOST_CHECK((names(w1.hosted) == strings{"worker:1"}));
  BOOST_CHECK_EQUAL(w1.worker, 1);
  BOOST_CHECK(w1.gradient_worker);
  BOOST_CHECK(!w1.sends_statistics);
  BOOST_CHECK(w1.connects_to_chief);
  BOOST_CHECK(w1.loads_data);
  BOOST_CHECK((names(w1.watched) == strings{"ps:0", "ps:1"}));

  auto ps1 = plan_of(c, "ps:1", s);
  BOOST_CHECK((names(ps1.hosted) == strings{"ps:1"}));
  BOOST_CHECK(!ps1.connects_to_chief);
  BOOST_CHECK(!ps1.loads_data);
  BOOST_CHECK((names(ps1.watched) == strings{"ps:0"}));
}

BOOST_AUTO_TEST_CASE(without_a_chief_job_worker_0_is_the_chief_and_a_worker) {
  auto c = cluster_of({{"worker", 2}, {"ps", 1}});
  auto p = plan_of(c, "worker:0", momentum_shape(2, 1));
  BOOST_CHECK(p.is_chief());
  BOOST_CHECK((names(p.hosted) == strings{"metrics", "chief", "worker:0"}));
  BOOST_CHECK_EQUAL(p.worker, 0);
  BOOST_CHECK((names(p.passive) == strings{"worker:1"}));
  BOOST_CHECK((names(p.active) == strings{"ps:0"}));
}

BOOST_AUTO_TEST_CASE(kfac_roles_live_on_the_chief_without_their_jobs) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 1}});
  auto s = kfac_shape(2, 1, 2, 3);
  auto chief = plan_of(c, "chief:0", s);
  // Inverses before the covariance actors that hand factors to them,
  // both before the chief.
  BOOST_CHECK((names(chief.hosted)
               == strings{"inverse:0", "inverse:1", "inverse:2",
                          "covariance:0", "covariance:1", "metrics",
                          "chief"}));
  auto w0 = plan_of(c, "worker:0", s);
  BOOST_CHECK(w0.sends_statistics);
  // The chief hosts the K-FAC roles: the worker does not watch it as a
  // peer (the supervisor watches the chief apart).
  BOOST_CHECK((names(w0.watched) == strings{"ps:0"}));
  BOOST_CHECK(!plan_of(c, "worker:1", s).sends_statistics);
}

BOOST_AUTO_TEST_CASE(kfac_jobs_host_their_roles_and_connect_as_messages_go) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 1},
                       {"covariance", 1}, {"inverse", 2}});
  auto s = kfac_shape(2, 1, 1, 2);
  auto chief = plan_of(c, "chief:0", s);
  BOOST_CHECK((names(chief.hosted) == strings{"metrics", "chief"}));
  // No inverse on the chief: the covariance task waits to be connected.
  BOOST_CHECK((names(chief.active)
               == strings{"ps:0", "covariance:0", "inverse:0", "inverse:1"}));
  auto cov = plan_of(c, "covariance:0", s);
  BOOST_CHECK((names(cov.hosted) == strings{"covariance:0"}));
  BOOST_CHECK(!cov.connects_to_chief);
  BOOST_CHECK((names(cov.watched) == strings{"ps:0", "inverse:0",
                                             "inverse:1"}));
  auto inv = plan_of(c, "inverse:1", s);
  BOOST_CHECK((names(inv.hosted) == strings{"inverse:1"}));
  BOOST_CHECK((names(node_plan::hosts_of(inv.covariance))
               == strings{"covariance:0"}));
}

BOOST_AUTO_TEST_CASE(a_covariance_task_connects_to_a_chief_that_inverts) {
  auto c = cluster_of({{"chief", 1}, {"worker", 1}, {"ps", 1},
                       {"covariance", 1}});
  auto s = kfac_shape(1, 1, 1, 1);
  BOOST_CHECK(plan_of(c, "covariance:0", s).connects_to_chief);
  BOOST_CHECK((names(plan_of(c, "chief:0", s).passive)
               == strings{"worker:0", "covariance:0"}));
}

BOOST_AUTO_TEST_CASE(with_dedicated_workers_the_last_worker_inverts) {
  auto c = cluster_of({{"chief", 1}, {"worker", 5}, {"ps", 1}});
  auto s = dedicated_shape();
  auto last = plan_of(c, "worker:4", s);
  BOOST_CHECK((names(last.hosted) == strings{"inverse:0", "inverse:1"}));
  BOOST_CHECK_EQUAL(last.worker, -1);
  BOOST_CHECK(!last.loads_data);
  BOOST_CHECK(!last.connects_to_chief);
  auto stats = plan_of(c, "worker:3", s);
  BOOST_CHECK_EQUAL(stats.worker, 3);
  BOOST_CHECK(!stats.gradient_worker);
  BOOST_CHECK(stats.sends_statistics);
  BOOST_CHECK((names(stats.watched) == strings{"worker:4", "ps:0"}));
  BOOST_CHECK((names(plan_of(c, "worker:2", s).hosted)
               == strings{"worker:2"}));
  auto chief = plan_of(c, "chief:0", s);
  BOOST_CHECK((names(chief.hosted)
               == strings{"covariance:0", "metrics", "chief"}));
  BOOST_CHECK_EQUAL(chief.stats_workers.size(), 1u);
  BOOST_CHECK((names(chief.active) == strings{"worker:4", "ps:0"}));
}

BOOST_AUTO_TEST_CASE(a_worker_task_hosts_its_workers_per_task) {
  // 8 workers as 2 worker tasks of 4 (--workers_per_task 4): worker task
  // t hosts workers 4t .. 4t+3, each its own role, in index order; the
  // chief finds each at its task.
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 2}});
  auto s = momentum_shape(8, 2);
  s.workers_per_task = 4;
  auto w1 = plan_of(c, "worker:1", s);
  BOOST_CHECK((names(w1.hosted)
               == strings{"worker:4", "worker:5", "worker:6", "worker:7"}));
  BOOST_CHECK_EQUAL(w1.worker, 4);
  BOOST_CHECK_EQUAL(w1.hosted_workers, 4);
  BOOST_CHECK(w1.gradient_worker);
  BOOST_CHECK(w1.connects_to_chief);
  BOOST_CHECK((names(w1.watched) == strings{"ps:0", "ps:1"}));
  auto chief = plan_of(c, "chief:0", s);
  BOOST_REQUIRE_EQUAL(chief.workers.size(), 8u);
  for (const auto& w : chief.workers)
    BOOST_CHECK_EQUAL(w.host.str(),
                      "worker:" + std::to_string(w.index / 4));
  BOOST_CHECK((names(chief.passive) == strings{"worker:0", "worker:1"}));
  auto ps0 = plan_of(c, "ps:0", s);
  BOOST_CHECK_EQUAL(ps0.hosted_workers, 0);
  // Without a chief job worker:0 is the chief and hosts workers 0 .. 3.
  auto nc = cluster_of({{"worker", 2}, {"ps", 2}});
  auto w0 = plan_of(nc, "worker:0", s);
  BOOST_CHECK((names(w0.hosted)
               == strings{"metrics", "chief", "worker:0", "worker:1",
                          "worker:2", "worker:3"}));
  // One per task, the default, is the plan it always was.
  auto one = plan_of(cluster_of({{"chief", 1}, {"worker", 8}, {"ps", 2}}),
                     "worker:5", momentum_shape(8, 2));
  BOOST_CHECK((names(one.hosted) == strings{"worker:5"}));
  BOOST_CHECK_EQUAL(one.hosted_workers, 1);
}

BOOST_AUTO_TEST_CASE(bad_workers_per_task_are_refused_naming_the_flag) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 1}});
  auto s = momentum_shape(8, 1);
  s.workers_per_task = 0;
  check_refused(c, "ps:0", s, {"--workers_per_task 0", "at least 1"});
  s.workers_per_task = -3;
  check_refused(c, "worker:0", s, {"--workers_per_task -3", "at least 1"});
  s.workers_per_task = 3;
  check_refused(c, "ps:0", s, {"--workers_per_task 3", "does not divide",
                               "8 worker(s)"});
  // 8 workers of 2 per task need 4 worker tasks, the cluster has 2.
  s.workers_per_task = 2;
  check_refused(c, "ps:0", s, {"4 worker task(s)", "8 workers",
                               "--workers_per_task 2",
                               "2 'worker' task(s)"});
  // A worker task beyond those the run needs hosts nothing.
  s = momentum_shape(2, 1);
  s.workers_per_task = 2;
  check_refused(c, "worker:1", s, {"task worker:1", "no worker role",
                                   "1 worker tasks", "--workers_per_task 2"});
  auto k = kfac_shape(4, 1, 1, 1);
  k.workers_per_task = 2;
  check_refused(c, "ps:0", k, {"--workers_per_task 2", "first-order"});
  auto one_process = momentum_shape(8, 1);
  one_process.workers_per_task = 0;
  BOOST_CHECK(!single_process_plan(one_process));
}

BOOST_AUTO_TEST_CASE(the_waits_follow_the_flags) {
  node_wait_flags f;
  f.max_wait = milliseconds{30000};
  f.request_timeout = milliseconds{5000};
  f.connect_timeout = milliseconds{40000};
  f.step_timeout = milliseconds{7000};
  auto w = make_node_waits(f);
  // A second of connecting plus two answers of at most 2 s, plus a second.
  BOOST_CHECK_EQUAL(w.connect_attempt.count(), 6000);
  // The chief's step bound (at most 20 s), two answers and its checkpoint.
  BOOST_CHECK_EQUAL(w.preempt_wait.count(), 7000 + 10000 + 10000);
  BOOST_CHECK_EQUAL(w.await_wait(false).count(), 40000);
  BOOST_CHECK_EQUAL(w.await_wait(true).count(), 10000);
  BOOST_CHECK_EQUAL(w.end_wait(10).count(), 2 * 30000 + 7000 * 11);
  BOOST_CHECK(w.end_wait(0) >= std::chrono::hours{24 * 365});
}

BOOST_AUTO_TEST_CASE(the_metrics_port_is_the_flags_plus_the_tasks_position) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 1}});
  auto s = momentum_shape(2, 1);
  auto all = c.tasks();
  for (size_t i = 0; i < all.size(); ++i)
    BOOST_CHECK_EQUAL(plan_of(c, all[i].str(), s, 9000).metrics_port,
                      9000 + static_cast<int32_t>(i));
  BOOST_CHECK_EQUAL(plan_of(c, "ps:0", s).metrics_port, 0);
  check_refused(c, all.back().str(), s,
                {"--metrics_port 65535", all.back().str(), "above 65535"},
                {}, 65535);
}

BOOST_AUTO_TEST_CASE(the_in_process_trainer_hosts_every_role) {
  auto s = kfac_shape(2, 2, 1, 2);
  auto p = single_process_plan(s);
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  BOOST_CHECK(p->is_chief());
  BOOST_CHECK((names(p->hosted)
               == strings{"ps:0", "ps:1", "inverse:0", "inverse:1",
                          "covariance:0", "chief", "worker:0",
                          "worker:1"}));
  BOOST_CHECK(p->active.empty() && p->passive.empty());
  auto d = single_process_plan(dedicated_shape());
  BOOST_REQUIRE(d);
  BOOST_CHECK((names(d->hosted)
               == strings{"ps:0", "inverse:0", "inverse:1", "covariance:0",
                          "chief", "worker:0", "worker:1", "worker:2",
                          "worker:3"}));
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused_naming_the_thing) {
  auto c = cluster_of({{"chief", 1}, {"worker", 2}, {"ps", 1},
                       {"evaluator", 1}});
  auto s = momentum_shape(2, 1);
  check_refused(c, "worker:7", s, {"task worker:7", "not in the cluster"});
  check_refused(c, "launcher:0", s, {"task launcher:0",
                                     "not in the cluster"});
  check_refused(c, "evaluator:0", s,
                {"task evaluator:0", "no role for job 'evaluator'"});
  check_refused(c, "ps:0", momentum_shape(2, 2),
                {"2 PS shard(s)", "1 'ps' task(s)"});
  check_refused(c, "ps:0", momentum_shape(3, 1),
                {"3 worker task(s)", "2 'worker' task(s)"});
  auto short_senders = s;
  short_senders.sends_statistics.pop_back();
  check_refused(c, "ps:0", short_senders,
                {"statistics senders", "1 worker(s)", "2 worker(s)"});
  // More worker tasks than workers: the extra one has no role.
  check_refused(c, "worker:1", momentum_shape(1, 1),
                {"task worker:1", "no worker role", "1 worker tasks"});
  node_wait_flags zero;
  zero.connect_timeout = milliseconds{0};
  check_refused(c, "ps:0", s, {"task ps:0", "must be positive"}, zero);
  // K-FAC roles without K-FAC, and counts that contradict their jobs.
  auto k = cluster_of({{"chief", 1}, {"worker", 1}, {"ps", 1},
                       {"covariance", 2}});
  check_refused(k, "ps:0", momentum_shape(1, 1),
                {"covariance or inverse tasks", "not kfac"});
  check_refused(k, "ps:0", kfac_shape(1, 1, 3, 1),
                {"3 covariance actor(s)", "2 'covariance' task(s)"});
  check_refused(k, "ps:0", kfac_shape(1, 1, 2, 0),
                {"at least one covariance and one inverse actor"});
  auto none = single_process_plan(momentum_shape(0, 1));
  BOOST_CHECK(!none);
  BOOST_CHECK_NE(test::why(none).find("at least one gradient worker"),
                 std::string::npos);
}
