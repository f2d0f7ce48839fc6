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

/// What --worker_replicas n and --replicas_to_aggregate r resolve to.
void check_counts(int32_t n, int32_t r, bool kfac, int32_t workers,
                  int32_t replicas_to_aggregate) {
  auto c = counts(n, r, kfac);
  BOOST_TEST(c.workers == workers, "N = " << n << ", R = " << r);
  BOOST_TEST(c.replicas_to_aggregate == replicas_to_aggregate,
             "N = " << n << ", R = " << r);
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
  check_counts(0, 0, false, 1, 1);
  check_counts(2, 0, false, 2, 2);
  check_counts(0, 3, false, 3, 3);
  check_counts(3, 2, false, 3, 2);
}

BOOST_AUTO_TEST_CASE(under_kfac_r_defaults_to_the_seeds_gradient_tasks) {
  check_counts(5, 0, true, 5, 3);
  BOOST_TEST(counts(1, 0, true).replicas_to_aggregate == 1);
  BOOST_TEST(counts(2, 0, true).replicas_to_aggregate == 2);
  // R given: N defaults to it, with or without K-FAC.
  check_counts(0, 4, true, 4, 4);
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
