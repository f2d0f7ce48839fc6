#define BOOST_TEST_MODULE runtime_cpu_share
#include <boost/test/unit_test.hpp>

// The CPU share of a process (runtime/cpu_share.hpp): cgroup v2 cpu.max
// texts, the documented order of the budget's sources, the threads planned
// on it, and this test process's own affinity mask narrowed for real.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <sched.h>

#include "runtime/base/error.hpp"
#include "runtime/cgroup.hpp"
#include "runtime/cpu_share.hpp"

using namespace syncfac;

BOOST_AUTO_TEST_CASE(cpu_max_is_quota_over_period_or_no_limit) {
  auto half = parse_cpu_max("50000 100000\n");
  BOOST_REQUIRE(half);
  BOOST_REQUIRE(half->has_value());
  BOOST_TEST(**half == 0.5);
  auto two = parse_cpu_max("200000 100000");
  BOOST_REQUIRE(two && two->has_value());
  BOOST_TEST(**two == 2.0);
  auto none = parse_cpu_max("max 100000\n");
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->has_value());
  auto quota_only = parse_cpu_max("150000");
  BOOST_REQUIRE(quota_only && quota_only->has_value());
  BOOST_TEST(**quota_only == 1.5);
  for (const char* bad : {"", "abc 100000", "100000 0", "-5 100000",
                          "1 2 3", "max max"}) {
    auto r = parse_cpu_max(bad);
    BOOST_TEST(!r, "'" << bad << "' accepted");
    if (!r)
      BOOST_TEST(render(r.error()).find("cpu.max '") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_cgroup_chain_goes_up_to_the_root) {
  BOOST_TEST(cgroup_chain("/a/b/c")
             == (std::vector<std::string>{"/a/b/c", "/a/b", "/a", "/"}));
  BOOST_TEST(cgroup_chain("/") == std::vector<std::string>{"/"});
  BOOST_TEST(cgroup_chain("").empty());
}

BOOST_AUTO_TEST_CASE(this_process_cgroup_directories_exist) {
  // Whichever hierarchy this machine has (v2, v1 or both): each directory
  // named is there, its own group first and the root last.
  for (const char* controller : {"cpu", "memory"}) {
    auto dirs = cgroup_dirs(controller);
    for (const auto& d : dirs)
      BOOST_TEST(std::filesystem::is_directory(d.path),
                 controller << ": " << d.path);
    if (!dirs.empty())
      BOOST_TEST(dirs.back().group == "/");
  }
}

BOOST_AUTO_TEST_CASE(cgroup_v1_quota_is_quota_over_period_or_no_limit) {
  auto one = parse_cfs_quota("100000\n", "100000\n");
  BOOST_REQUIRE(one && one->has_value());
  BOOST_TEST(**one == 1.0);
  auto half = parse_cfs_quota("50000", "100000");
  BOOST_REQUIRE(half && half->has_value());
  BOOST_TEST(**half == 0.5);
  auto none = parse_cfs_quota("-1\n", "100000\n");
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->has_value());
  for (auto [quota, period] : std::vector<std::pair<const char*, const char*>>{
         {"", "100000"}, {"100000", "0"}, {"x", "100000"}, {"-2", "100000"},
         {"100000", ""}}) {
    auto r = parse_cfs_quota(quota, period);
    BOOST_TEST(!r, "'" << quota << "', '" << period << "' accepted");
    if (!r)
      BOOST_TEST(render(r.error()).find("cpu.cfs_quota_us '")
                 != std::string::npos);
  }
  // Named as its file when it is the smallest.
  cpu_share_inputs in;
  in.hardware_cpus = 8;
  in.cgroup_cpus = 2.0;
  in.cgroup_file = "cpu.cfs_quota_us";
  BOOST_TEST(resolve_cpu_budget(in).source == "cgroup cpu.cfs_quota_us");
}

BOOST_AUTO_TEST_CASE(the_smallest_source_wins_named_in_the_documented_order) {
  cpu_share_inputs in;
  in.hardware_cpus = 64;
  // Nothing narrower than the machine: its own count.
  auto all = resolve_cpu_budget(in);
  BOOST_TEST(all.cpus == 64);
  BOOST_TEST(all.source == "hardware");
  // taskset -c 0-3.
  in.affinity_cpus = 4;
  BOOST_TEST(resolve_cpu_budget(in).cpus == 4);
  BOOST_TEST(resolve_cpu_budget(in).source == "affinity");
  // A pod limit of 2.5 CPUs: 2 (rounded down).
  in.cgroup_cpus = 2.5;
  BOOST_TEST(resolve_cpu_budget(in).cpus == 2);
  BOOST_TEST(resolve_cpu_budget(in).source == "cgroup cpu.max");
  // Half a CPU is still one.
  in.cgroup_cpus = 0.5;
  BOOST_TEST(resolve_cpu_budget(in).cpus == 1);
  // A larger SLURM_CPUS_PER_TASK changes nothing; a tie goes to the
  // earlier source.
  in.cgroup_cpus = 3.0;
  in.slurm_cpus_per_task = "8";
  BOOST_TEST(resolve_cpu_budget(in).source == "cgroup cpu.max");
  in.slurm_cpus_per_task = "3";
  BOOST_TEST(resolve_cpu_budget(in).source == "cgroup cpu.max");
  in.slurm_cpus_per_task = "2";
  BOOST_TEST(resolve_cpu_budget(in).cpus == 2);
  BOOST_TEST(resolve_cpu_budget(in).source == "SLURM_CPUS_PER_TASK");
  in.omp_num_threads = "1";
  BOOST_TEST(resolve_cpu_budget(in).cpus == 1);
  BOOST_TEST(resolve_cpu_budget(in).source == "OMP_NUM_THREADS");
  // Values that are no count are ignored, and said so.
  in.omp_num_threads = "four";
  in.slurm_cpus_per_task = "0";
  std::string ignored;
  auto b = resolve_cpu_budget(in, &ignored);
  BOOST_TEST(b.cpus == 3);
  BOOST_TEST(b.source == "cgroup cpu.max");
  BOOST_TEST(ignored.find("SLURM_CPUS_PER_TASK='0'") != std::string::npos,
             ignored);
  BOOST_TEST(ignored.find("OMP_NUM_THREADS='four'") != std::string::npos,
             ignored);
}

BOOST_AUTO_TEST_CASE(caf_threads_are_counted_in_the_budget) {
  cpu_budget one{1, "affinity"};
  auto p1 = plan_threads(one, 0, 0);
  BOOST_TEST(p1.compute == 1);
  BOOST_TEST(p1.caf == 1);
  BOOST_TEST(p1.source == "affinity");
  BOOST_TEST(p1.describe()
             == "1 compute thread (affinity: 1 CPU) + 1 CAF scheduler thread");
  cpu_budget two{2, "cgroup cpu.max"};
  BOOST_TEST(plan_threads(two, 0, 0).compute == 2);
  BOOST_TEST(plan_threads(two, 0, 0).caf == 2);
  cpu_budget four{4, "affinity"};
  BOOST_TEST(plan_threads(four, 0, 0).compute == 4);
  BOOST_TEST(plan_threads(four, 0, 0).caf == 2);
  cpu_budget eight{8, "SLURM_CPUS_PER_TASK"};
  auto p8 = plan_threads(eight, 0, 0);
  BOOST_TEST(p8.caf == 2);
  BOOST_TEST(p8.compute == 6);
  cpu_budget big{64, "hardware"};
  auto p64 = plan_threads(big, 0, 0);
  BOOST_TEST(p64.caf == 4);
  BOOST_TEST(p64.compute == 60);
  // Explicit counts win; --caf_threads comes out of the compute share.
  auto px = plan_threads(eight, 3, 0);
  BOOST_TEST(px.compute == 3);
  BOOST_TEST(px.source == "--threads");
  BOOST_TEST(px.describe()
             == "3 compute threads (--threads) + 2 CAF scheduler threads");
  auto pc = plan_threads(eight, 0, 4);
  BOOST_TEST(pc.caf == 4);
  BOOST_TEST(pc.compute == 4);
}

BOOST_AUTO_TEST_CASE(this_process_affinity_mask_is_read) {
  // Narrowed for real to one CPU of those it has, then restored.
  cpu_set_t before;
  CPU_ZERO(&before);
  BOOST_REQUIRE(::sched_getaffinity(0, sizeof before, &before) == 0);
  BOOST_TEST(read_cpu_share().affinity_cpus == CPU_COUNT(&before));
  int first = 0;
  while (!CPU_ISSET(first, &before))
    ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  BOOST_REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
  auto in = read_cpu_share();
  ::sched_setaffinity(0, sizeof before, &before);
  BOOST_TEST(in.affinity_cpus == 1);
  auto b = resolve_cpu_budget(in);
  BOOST_TEST(b.cpus == 1);
}
