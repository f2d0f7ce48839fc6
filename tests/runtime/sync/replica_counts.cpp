#define BOOST_TEST_MODULE sync_replica_counts
#include <boost/test/unit_test.hpp>

#include <string>

#include "runtime/base/error.hpp"
#include "runtime/sync/replica_counts.hpp"

using namespace syncfac;

namespace {

replica_counts counts(int32_t n, int32_t r, bool kfac) {
  auto c = resolve_replica_counts(n, r, kfac);
  BOOST_REQUIRE(c);
  return *c;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_seeds_kfac_rule_is_ceil_of_six_tenths) {
  // _num_gradient_tasks of the seeds: int(np.ceil(0.6 * num_tasks)).
  int32_t expected[] = {0, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6};
  for (int32_t n = 0; n <= 10; ++n)
    BOOST_TEST(kfac_gradient_tasks(n) == expected[n], "N = " << n);
  BOOST_TEST(kfac_gradient_tasks(100) == 60);
  BOOST_TEST(kfac_gradient_tasks(101) == 61);
}

BOOST_AUTO_TEST_CASE(r_defaults_to_n_and_n_to_r) {
  auto both = counts(0, 0, false);
  BOOST_TEST(both.workers == 1);
  BOOST_TEST(both.replicas_to_aggregate == 1);
  auto n_only = counts(2, 0, false);
  BOOST_TEST(n_only.workers == 2);
  BOOST_TEST(n_only.replicas_to_aggregate == 2);
  auto r_only = counts(0, 3, false);
  BOOST_TEST(r_only.workers == 3);
  BOOST_TEST(r_only.replicas_to_aggregate == 3);
  auto given = counts(3, 2, false);
  BOOST_TEST(given.workers == 3);
  BOOST_TEST(given.replicas_to_aggregate == 2);
}

BOOST_AUTO_TEST_CASE(under_kfac_r_defaults_to_the_seeds_gradient_tasks) {
  auto seeds = counts(5, 0, true);
  BOOST_TEST(seeds.workers == 5);
  BOOST_TEST(seeds.replicas_to_aggregate == 3);
  BOOST_TEST(counts(1, 0, true).replicas_to_aggregate == 1);
  BOOST_TEST(counts(2, 0, true).replicas_to_aggregate == 2);
  // R given: N defaults to it, with or without K-FAC.
  auto r_only = counts(0, 4, true);
  BOOST_TEST(r_only.workers == 4);
  BOOST_TEST(r_only.replicas_to_aggregate == 4);
  BOOST_TEST(counts(5, 5, true).replicas_to_aggregate == 5);
}

BOOST_AUTO_TEST_CASE(negative_counts_name_the_flag) {
  auto n = resolve_replica_counts(-1, 0, false);
  BOOST_REQUIRE(!n);
  BOOST_TEST(render(n.error()).find("--worker_replicas") != std::string::npos,
             render(n.error()));
  auto r = resolve_replica_counts(2, -3, true);
  BOOST_REQUIRE(!r);
  BOOST_TEST(render(r.error()).find("--replicas_to_aggregate")
               != std::string::npos,
             render(r.error()));
  BOOST_TEST(render(r.error()).find("-3") != std::string::npos);
}
