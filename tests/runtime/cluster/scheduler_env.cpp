#define BOOST_TEST_MODULE scheduler_env
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cluster/rank_layout.hpp"
#include "runtime/cluster/scheduler_env.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

/// srun -n 4 on two nodes, two tasks each, as rank `rank`.
environment_map slurm(int rank, const std::string& nodes = "node[01-02]",
                      const std::string& per_node = "2(x2)",
                      int ntasks = 4) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_NTASKS", std::to_string(ntasks)},
          {"SLURM_JOB_NODELIST", nodes},
          {"SLURM_TASKS_PER_NODE", per_node}};
}

/// mpirun -np N on this host, as rank `rank`.
environment_map ompi(int rank, int size, int local_size = -1) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE",
           std::to_string(local_size < 0 ? size : local_size)}};
}

scheduler_cluster derive(const environment_map& env,
                         const scheduler_options& opts = {}) {
  auto x = cluster_from_scheduler(env, opts);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  BOOST_REQUIRE(x->has_value());
  BOOST_REQUIRE((*x)->spec.task);
  BOOST_REQUIRE_MESSAGE(!(*x)->spec.validate(), render((*x)->spec.validate()));
  return std::move(**x);
}

/// Deriving must fail with ec::invalid_config and every one of `parts`.
void refused(const environment_map& env, const scheduler_options& opts,
             const std::vector<std::string>& parts) {
  auto x = cluster_from_scheduler(env, opts);
  BOOST_REQUIRE_MESSAGE(!x, "accepted");
  BOOST_CHECK_EQUAL(static_cast<ec>(x.error().code()), ec::invalid_config);
  auto msg = render(x.error());
  for (const auto& part : parts)
    BOOST_CHECK_MESSAGE(msg.find(part) != std::string::npos,
                        "'" << part << "' not in: " << msg);
}

std::string addresses(const cluster_spec& spec) {
  std::string result;
  for (const auto& t : spec.tasks())
    result += (result.empty() ? "" : " ") + t.str() + "="
              + spec.address(t).str();
  return result;
}

} // namespace

BOOST_AUTO_TEST_SUITE(layouts)

BOOST_AUTO_TEST_CASE(ranks_go_chief_ps_covariance_inverse_then_workers) {
  auto tasks = assign_ranks("chief=1,ps=2,covariance=1,inverse=1", 8, "8");
  BOOST_REQUIRE_MESSAGE(tasks, test::why(tasks));
  std::vector<std::string> got;
  for (const auto& t : *tasks)
    got.push_back(t.str());
  BOOST_CHECK(got
              == (std::vector<std::string>{"chief:0", "ps:0", "ps:1",
                                           "covariance:0", "inverse:0",
                                           "worker:0", "worker:1",
                                           "worker:2"}));
  // The order of the entries does not matter; the default is chief=1,ps=1.
  auto same = assign_ranks("inverse=1,ps=2,covariance=1", 8, "8");
  BOOST_REQUIRE(same);
  BOOST_CHECK(*same == *tasks);
  auto plain = assign_ranks("", 3, "3");
  BOOST_REQUIRE(plain);
  BOOST_CHECK_EQUAL(plain->at(1).str(), "ps:0");
  BOOST_CHECK_EQUAL(plain->at(2).str(), "worker:0");
  // Zero counts and an explicit worker count equal to the rest.
  auto zero = assign_ranks("chief=1,ps=1,covariance=0,inverse=0,worker=2", 4,
                           "4");
  BOOST_REQUIRE_MESSAGE(zero, test::why(zero));
  BOOST_CHECK_EQUAL(zero->back().str(), "worker:1");
}

BOOST_AUTO_TEST_CASE(layouts_that_do_not_fit_are_refused) {
  auto check = [](const std::string& layout, int ranks,
                  const std::string& part) {
    test::check_error(
      assign_ranks(layout, ranks, "SLURM_NTASKS=" + std::to_string(ranks)),
      ec::invalid_config, {"--layout '" + layout + "'", part});
  };
  check("chief=1,ps=4", 4, "leaves no worker (needs 6 ranks at least)");
  check("chief=1,ps=4", 4, "SLURM_NTASKS=4");
  check("chief=1,evaluator=1", 4, "unknown job 'evaluator'");
  check("chief=1,wrker=2", 4, "unknown job 'wrker' (known: chief, ps");
  check("chief=2", 4, "one chief at most");
  check("ps=1,ps=2", 4, "job 'ps' given twice");
  check("ps", 4, "bad entry 'ps'");
  check("ps=x", 4, "bad entry 'ps=x'");
  check("ps=1,", 4, "bad entry ''");
  check("ps=1,worker=3", 4, "worker=3 but 4 ranks");
}

BOOST_AUTO_TEST_CASE(chief_0_makes_worker_0_the_chief) {
  // The seeds' cluster: worker tasks and PS tasks, worker 0 the chief.
  auto x = assign_ranks("chief=0,ps=2", 7, "SLURM_NTASKS=7");
  BOOST_REQUIRE(x);
  BOOST_REQUIRE_EQUAL(x->size(), 7u);
  BOOST_TEST(x->at(0).str() == "ps:0");
  BOOST_TEST(x->at(2).str() == "worker:0");
  BOOST_TEST(x->at(6).str() == "worker:4");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(slurm_derivation)

BOOST_AUTO_TEST_CASE(every_rank_derives_the_same_cluster_and_its_own_task) {
  auto first = derive(slurm(0));
  BOOST_CHECK_EQUAL(addresses(first.spec),
                    "chief:0=node01:25000 worker:0=node02:25000 "
                    "worker:1=node02:25001 ps:0=node01:25001");
  BOOST_CHECK_EQUAL(first.spec.task->str(), "chief:0");
  BOOST_CHECK_EQUAL(first.source, "Slurm (SLURM_PROCID=0 of SLURM_NTASKS=4)");
  for (int r = 1; r < 4; ++r) {
    auto other = derive(slurm(r));
    BOOST_CHECK(other.spec.jobs == first.spec.jobs);
  }
  BOOST_CHECK_EQUAL(derive(slurm(1)).spec.task->str(), "ps:0");
  BOOST_CHECK_EQUAL(derive(slurm(3)).spec.task->str(), "worker:1");
}

BOOST_AUTO_TEST_CASE(port_base_layout_and_uneven_nodes) {
  scheduler_options opts;
  opts.port_base = 50000;
  opts.layout = "chief=1,ps=2";
  auto x = derive(slurm(3, "a[1-2],b3", "2,1(x2)"), opts);
  BOOST_CHECK_EQUAL(addresses(x.spec),
                    "chief:0=a1:50000 worker:0=b3:50000 ps:0=a1:50001 "
                    "ps:1=a2:50000");
  BOOST_CHECK_EQUAL(x.spec.task->str(), "worker:0");
}

BOOST_AUTO_TEST_CASE(the_step_lists_win_over_the_jobs) {
  auto env = slurm(2, "node[01-04]", "1(x4)");
  env["SLURM_STEP_NODELIST"] = "node[03-04]";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_LOCALID"] = "0";
  auto x = derive(env);
  BOOST_CHECK_EQUAL(x.spec.address(task_id{"chief", 0}).str(),
                    "node03:25000");
  BOOST_CHECK_EQUAL(x.spec.task->str(), "worker:0");
  BOOST_CHECK_EQUAL(x.spec.address(*x.spec.task).str(), "node04:25000");
}

BOOST_AUTO_TEST_CASE(a_rank_out_of_range_is_refused) {
  refused(slurm(4), {}, {"SLURM_PROCID=4: out of range for SLURM_NTASKS=4"});
  auto env = slurm(0);
  env["SLURM_PROCID"] = "one";
  refused(env, {}, {"SLURM_PROCID='one': not a number"});
  env = slurm(0);
  env.erase("SLURM_NTASKS");
  refused(env, {}, {"SLURM_NTASKS is not"});
}

BOOST_AUTO_TEST_CASE(malformed_node_lists_are_refused) {
  refused(slurm(0, "node[1-2"), {},
          {"SLURM_JOB_NODELIST='node[1-2'", "unbalanced '['"});
  refused(slurm(0, "node[5-2]"), {},
          {"SLURM_JOB_NODELIST='node[5-2]'", "reversed range"});
  refused(slurm(0, ""), {}, {"SLURM_JOB_NODELIST=''", "empty host list"});
  auto env = slurm(0);
  env.erase("SLURM_JOB_NODELIST");
  refused(env, {}, {"SLURM_JOB_NODELIST is not"});
}

BOOST_AUTO_TEST_CASE(counts_that_disagree_are_refused) {
  refused(slurm(0, "node[1-3]", "2(x2)"), {},
          {"SLURM_TASKS_PER_NODE='2(x2)': counts 2 nodes but "
           "SLURM_JOB_NODELIST='node[1-3]' names 3"});
  refused(slurm(0, "node[1-2]", "2(x3)", 4), {},
          {"SLURM_TASKS_PER_NODE='2(x3)'"});
  refused(slurm(0, "node[1-2]", "3,2"), {},
          {"counts 5 tasks but SLURM_NTASKS=4"});
  refused(slurm(0, "node[1-2]", "2(x"), {}, {"SLURM_TASKS_PER_NODE='2(x'"});
}

BOOST_AUTO_TEST_CASE(a_cyclic_distribution_is_refused) {
  auto env = slurm(1);
  env["SLURM_LOCALID"] = "0"; // cyclic: rank 1 is the first on node02
  refused(env, {}, {"SLURM_LOCALID='0'", "derived local rank is 1",
                    "block distribution"});
}

BOOST_AUTO_TEST_CASE(a_layout_that_does_not_fit_is_refused) {
  scheduler_options opts;
  opts.layout = "chief=1,ps=4";
  refused(slurm(0), opts, {"--layout 'chief=1,ps=4'", "SLURM_NTASKS=4",
                           "leaves no worker"});
  opts.layout = "chief=1,bogus=1";
  refused(slurm(0), opts, {"unknown job 'bogus'"});
  opts.layout.clear();
  opts.hosts = "a,b";
  refused(slurm(0), opts, {"--hosts 'a,b'", "is for mpirun"});
}

BOOST_AUTO_TEST_CASE(ports_past_65535_are_refused) {
  scheduler_options opts;
  opts.port_base = 65535;
  refused(slurm(0), opts, {"--port_base 65535", "do not fit"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mpi_derivation)

BOOST_AUTO_TEST_CASE(all_local_ranks_run_on_localhost) {
  auto x = derive(ompi(3, 4));
  BOOST_CHECK_EQUAL(addresses(x.spec),
                    "chief:0=localhost:25000 worker:0=localhost:25002 "
                    "worker:1=localhost:25003 ps:0=localhost:25001");
  BOOST_CHECK_EQUAL(x.spec.task->str(), "worker:1");
  BOOST_CHECK_EQUAL(x.source, "mpirun (OMPI_COMM_WORLD_RANK=3 of "
                              "OMPI_COMM_WORLD_SIZE=4)");
}

BOOST_AUTO_TEST_CASE(hosts_fill_by_slots_in_order) {
  scheduler_options opts;
  opts.hosts = "h1:2,h2:2";
  auto env = ompi(2, 4, 2);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  auto x = derive(env, opts);
  BOOST_CHECK_EQUAL(addresses(x.spec),
                    "chief:0=h1:25000 worker:0=h2:25000 worker:1=h2:25001 "
                    "ps:0=h1:25001");
  BOOST_CHECK_EQUAL(x.spec.task->str(), "worker:0");
  // SYNCFAC_HOSTS when --hosts is not given.
  env["SYNCFAC_HOSTS"] = "h1:2,h2:2";
  auto y = derive(env);
  BOOST_CHECK(y.spec == x.spec);
  // A host without slots has one.
  env["SYNCFAC_HOSTS"] = "h1:2,h2,h3";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  BOOST_CHECK_EQUAL(derive(env).spec.address(task_id{"worker", 0}).str(),
                    "h2:25000");
}

BOOST_AUTO_TEST_CASE(pmi_and_pmix) {
  environment_map pmi{{"PMI_RANK", "1"}, {"PMI_SIZE", "3"},
                      {"MPI_LOCALNRANKS", "3"}};
  auto x = derive(pmi);
  BOOST_CHECK_EQUAL(x.spec.task->str(), "ps:0");
  BOOST_CHECK_EQUAL(x.source, "PMI (PMI_RANK=1 of PMI_SIZE=3)");
  // PMIx gives no size: the host list's slots say it.
  environment_map pmix{{"PMIX_RANK", "2"}, {"SYNCFAC_HOSTS", "a:2,b"}};
  auto y = derive(pmix);
  BOOST_CHECK_EQUAL(y.spec.task->str(), "worker:0");
  BOOST_CHECK_EQUAL(y.spec.address(*y.spec.task).str(), "b:25000");
  refused({{"PMIX_RANK", "0"}}, {}, {"PMIX_RANK is set but neither a host "
                                     "list"});
  refused({{"PMIX_RANK", "3"}, {"SYNCFAC_HOSTS", "a:2,b"}}, {},
          {"PMIX_RANK=3: out of range"});
}

BOOST_AUTO_TEST_CASE(ranks_on_other_hosts_need_a_host_list) {
  refused(ompi(0, 4, 2), {},
          {"OMPI_COMM_WORLD_RANK=0 of OMPI_COMM_WORLD_SIZE=4",
           "give them as --hosts", "OMPI_COMM_WORLD_LOCAL_SIZE='2'"});
  environment_map no_local{{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "4"}};
  refused(no_local, {}, {"does not say which host"});
}

BOOST_AUTO_TEST_CASE(bad_mpi_input_is_refused) {
  refused(ompi(4, 4), {}, {"OMPI_COMM_WORLD_RANK=4: out of range for "
                           "OMPI_COMM_WORLD_SIZE=4"});
  scheduler_options opts;
  opts.hosts = "h1:2,h2:1";
  refused(ompi(0, 4), opts, {"--hosts 'h1:2,h2:1'", "has 3 slots but "
                             "OMPI_COMM_WORLD_SIZE=4"});
  opts.hosts = "h1:0,h2:4";
  refused(ompi(0, 4), opts, {"bad slot count in 'h1:0'"});
  opts.hosts = "h1:x";
  refused(ompi(0, 4), opts, {"bad slot count"});
  opts.hosts = ",h1:4";
  refused(ompi(0, 4), opts, {"bad host ''"});
  opts.hosts = "h1:2,h2:2";
  auto env = ompi(2, 4, 2);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
  refused(env, opts, {"OMPI_COMM_WORLD_LOCAL_RANK='1'",
                      "derived local rank is 0"});
  opts.hosts.clear();
  opts.layout = "chief=1,ps=3";
  refused(ompi(0, 4), opts, {"--layout 'chief=1,ps=3'",
                             "OMPI_COMM_WORLD_SIZE=4", "leaves no worker"});
}

BOOST_AUTO_TEST_CASE(slurm_wins_over_mpi_and_no_launcher_is_none) {
  // Both say rank 1 of 4 (srun starting an MPI program): Slurm's lists
  // say where the other ranks are.
  auto env = slurm(1);
  for (const auto& kv : ompi(1, 4, 2))
    env.insert(kv);
  BOOST_CHECK_EQUAL(derive(env).source.rfind("Slurm", 0), 0u);
  // srun --mpi=pmix: both say the same rank; Slurm's lists are used.
  auto pmix = slurm(2);
  pmix["PMIX_RANK"] = "2";
  BOOST_CHECK_EQUAL(derive(pmix).source.rfind("Slurm", 0), 0u);
  BOOST_CHECK_EQUAL(derive(pmix).spec.address(task_id{"worker", 0}).str(),
                    "node02:25000");
  auto none = cluster_from_scheduler({{"HOME", "/root"}}, {});
  BOOST_REQUIRE_MESSAGE(none, test::why(none));
  BOOST_CHECK(!none->has_value());
}

BOOST_AUTO_TEST_CASE(a_batch_script_is_not_a_task) {
  // sbatch's script: SLURM_PROCID=0 but no step; the program must be
  // started with srun (else it would be a chief waiting for no one).
  auto env = slurm(0);
  env.erase("SLURM_STEP_ID");
  refused(env, {}, {"SLURM_PROCID='0' without SLURM_STEP_ID",
                    "batch script", "start the node programs with srun"});
  // mpirun run by the batch script: its ranks keep SLURM_PROCID=0 (even
  // rank 0, which agrees with it), and are MPI ranks.
  for (const auto& kv : ompi(0, 4))
    env[kv.first] = kv.second;
  BOOST_CHECK_EQUAL(derive(env).source.rfind("mpirun", 0), 0u);
}

BOOST_AUTO_TEST_CASE(mpirun_inside_a_slurm_job_is_mpi) {
  // A batch script's SLURM_PROCID=0 stays in the environment of every rank
  // mpirun starts; the MPI rank disagrees with it and wins.
  auto env = slurm(0, "localhost", "4");
  for (const auto& kv : ompi(3, 4))
    env[kv.first] = kv.second;
  auto x = derive(env);
  BOOST_CHECK_EQUAL(x.source.rfind("mpirun", 0), 0u);
  BOOST_CHECK_EQUAL(x.spec.task->str(), "worker:1");
  // The same rank but another size (a batch job of 8 tasks, mpirun -np 4).
  env = slurm(0, "localhost", "8", 8);
  for (const auto& kv : ompi(0, 4))
    env[kv.first] = kv.second;
  BOOST_CHECK_EQUAL(derive(env).source.rfind("mpirun", 0), 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(resolving)

BOOST_AUTO_TEST_CASE(resolve_cluster_takes_the_launchers_cluster_last) {
  ::unsetenv("TF_CONFIG");
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  auto spec = resolve_cluster("", "", -1);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "ps:0");
  scheduler_options opts;
  opts.layout = "chief=1,ps=2";
  spec = resolve_cluster("", "", -1, opts);
  BOOST_REQUIRE(!spec);
  BOOST_CHECK_MESSAGE(render(spec.error()).find("leaves no worker")
                        != std::string::npos,
                      render(spec.error()));
  // TF_CONFIG wins, and refuses the launcher's flags.
  ::setenv("TF_CONFIG", R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
                            "task": {"type": "worker", "index": 0}})", 1);
  spec = resolve_cluster("", "", -1);
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  BOOST_CHECK_EQUAL(spec->task->str(), "worker:0");
  spec = resolve_cluster("", "", -1, opts);
  BOOST_REQUIRE(!spec);
  BOOST_CHECK_MESSAGE(render(spec.error()).find("TF_CONFIG: --layout")
                        != std::string::npos,
                      render(spec.error()));
  ::unsetenv("TF_CONFIG");
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_SIZE"})
    ::unsetenv(v);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(slurm_variables)

BOOST_AUTO_TEST_CASE(the_jobs_list_with_only_the_steps_counts) {
  environment_map env{{"SLURM_PROCID", "1"},
                      {"SLURM_STEPID", "0"}, // older Slurm's name
                      {"SLURM_NTASKS", "3"},
                      {"SLURM_NODELIST", "n[1-3]"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}};
  auto x = cluster_from_scheduler(env, {});
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  BOOST_REQUIRE(x->has_value());
  BOOST_CHECK_EQUAL((*x)->spec.address(*(*x)->spec.task).str(), "n2:25000");
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  x = cluster_from_scheduler(env, {});
  BOOST_REQUIRE(!x);
  BOOST_CHECK_MESSAGE(render(x.error()).find("SLURM_TASKS_PER_NODE")
                        != std::string::npos,
                      render(x.error()));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(batch_script)

// What a Slurm job's batch script sees: SLURM_PROCID=0 without
// SLURM_STEP_ID, and the batch step's own one-node lists beside the job's.
environment_map batch_env() {
  auto env = slurm(0, "node[01-02]", "3(x2)", 6);
  env.erase("SLURM_STEP_ID");
  env["SLURM_STEP_NODELIST"] = "node01";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1";
  env["SLURM_STEP_NUM_TASKS"] = "1";
  env["SLURM_LOCALID"] = "0";
  return env;
}

BOOST_AUTO_TEST_CASE(the_job_cluster_is_what_sruns_tasks_derive) {
  scheduler_options opts;
  opts.layout = "chief=1,ps=2";
  auto job = slurm_job_cluster(batch_env(), opts);
  BOOST_REQUIRE_MESSAGE(job, test::why(job));
  // srun's rank 3 of the same job, over the whole allocation.
  auto task = derive(slurm(3, "node[01-02]", "3(x2)", 6), opts);
  BOOST_CHECK(job->jobs == task.spec.jobs);
  BOOST_CHECK_EQUAL(addresses(*job),
                    "chief:0=node01:25000 worker:0=node02:25000 "
                    "worker:1=node02:25001 worker:2=node02:25002 "
                    "ps:0=node01:25001 ps:1=node01:25002");
  // The batch script itself is still no task of it.
  refused(batch_env(), opts, {"without SLURM_STEP_ID", "batch script"});
}

BOOST_AUTO_TEST_CASE(outside_a_job_there_is_no_job_cluster) {
  auto none = slurm_job_cluster({}, {});
  BOOST_REQUIRE(!none);
  BOOST_CHECK(render(none.error()).find("SLURM_JOB_NODELIST is not set")
              != std::string::npos);
  auto env = batch_env();
  env["SLURM_TASKS_PER_NODE"] = "3(x3)";
  auto bad = slurm_job_cluster(env, {});
  BOOST_REQUIRE(!bad);
  BOOST_CHECK_MESSAGE(render(bad.error()).find("SLURM_TASKS_PER_NODE")
                        != std::string::npos,
                      render(bad.error()));
}

BOOST_AUTO_TEST_SUITE_END()
