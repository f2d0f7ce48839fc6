#define BOOST_TEST_MODULE actors_ps_shard_parts
#include <boost/test/unit_test.hpp>

// The PS shard's logic on its state alone, without an actor
// (actors/ps_shard_parts.hpp): pushes, applies, norms and their checks.
// The actor's messages are tests/actors/ps_shard.cpp's.

#include <cmath>
#include <string>
#include <vector>

#include "actors/ps_shard_parts.hpp"
#include "runtime/base/error.hpp"
#include "tests/actors/shard_seeds.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::ps_shard_parts;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

/// The seeds' shard: v0, v1 and the table v_sparse, plain SGD at 2.0.
struct shard {
  ps_shard_state st;

  shard() {
    auto err = init_state(st, seed_config());
    BOOST_REQUIRE_MESSAGE(!err, render(err));
  }

  float value(size_t i, int64_t j = 0) const {
    return st.variables[i].value[j];
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(ps_shard_parts_tests, shard)

BOOST_AUTO_TEST_CASE(an_apply_averages_the_fresh_pushes) {
  for (int32_t w = 0; w < 2; ++w) {
    auto fresh = take_push(st, seed_push(w, 0));
    BOOST_REQUIRE_MESSAGE(fresh, why(fresh));
    BOOST_TEST(*fresh);
  }
  BOOST_TEST(all_ready(st, 2));
  BOOST_TEST(!all_ready(st, 3));
  auto done = complete(st, 2, 1.0f);
  BOOST_REQUIRE_MESSAGE(done, why(done));
  BOOST_TEST(done->shard == 1);
  BOOST_TEST(done->global_step == 1);
  BOOST_TEST(done->gradients == 2);
  BOOST_TEST(st.counters.global_step == 1);
  // x - 2 * mean: v0 0 - 2 * 0.2, v1 1 - 2 * 1.0, the table's row 1
  // 4 - 2 * 0.2 and its row 0 untouched.
  BOOST_TEST(value(0) == -0.4f, tt::tolerance(1e-5f));
  BOOST_TEST(value(1) == -1.0f, tt::tolerance(1e-5f));
  BOOST_TEST(value(2, 0) == 3.0f);
  BOOST_TEST(value(2, 1) == 3.6f, tt::tolerance(1e-5f));
  // A push for the step before is stale now, and nothing waits for it.
  auto stale = take_push(st, seed_push(0, 0));
  BOOST_REQUIRE_MESSAGE(stale, why(stale));
  BOOST_TEST(!*stale);
  BOOST_TEST(!all_ready(st, 1));
}

BOOST_AUTO_TEST_CASE(a_clip_factor_scales_every_average) {
  for (int32_t w = 0; w < 2; ++w)
    BOOST_REQUIRE(take_push(st, seed_push(w, 0)));
  auto norm = norm_of_round(st, 2);
  BOOST_REQUIRE_MESSAGE(norm, why(norm));
  // 0.2² + 1.0² + 0.2², taking nothing.
  BOOST_TEST(norm->sum_of_squares == 1.08, tt::tolerance(1e-5));
  BOOST_TEST(all_ready(st, 2));
  BOOST_REQUIRE(complete(st, 2, 0.5f));
  BOOST_TEST(std::abs(value(1)) < 1e-5f);
}

BOOST_AUTO_TEST_CASE(a_malformed_push_is_refused_whole_and_counted) {
  auto unknown = seed_push(0, 0);
  unknown.dense.push_back({"v9", scalar(1.0f)});
  BOOST_TEST(contains(failure(take_push(st, unknown), ec::unknown_name),
                      "ps shard 1: push from worker 0 (local_step 0): "
                      "unknown variable 'v9'"));
  auto dense_table = seed_push(1, 0);
  dense_table.sparse.clear();
  dense_table.dense.push_back({"v_sparse", tensor{{2, 1}, {1.0f, 1.0f}}});
  BOOST_TEST(contains(failure(take_push(st, dense_table), ec::bad_message),
                      "variable 'v_sparse' is sparse"));
  // Neither push reached an accumulator, though v0 and v1 came first.
  BOOST_TEST(!all_ready(st, 1));
  auto status = make_status(st);
  BOOST_TEST(status.refused_pushes == 2);
  BOOST_TEST(status.variables[0].refused == 0);
  BOOST_TEST(status.variables[2].refused == 1);
}

BOOST_AUTO_TEST_CASE(an_apply_for_another_step_or_no_gradients_is_refused) {
  BOOST_TEST(contains(failure(check_apply(st, 4, 2), ec::invalid_argument),
                      "ps shard 1: apply for step 4, but the shard is at "
                      "step 0"));
  BOOST_TEST(contains(failure(check_apply(st, 0, 0, "norm"),
                              ec::invalid_argument),
                      "ps shard 1: norm needs a positive number of "
                      "gradients, got 0"));
  BOOST_TEST(!check_apply(st, 0, 2));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(a_bad_config_builds_no_state) {
  auto cfg = seed_config();
  cfg.sparse_variables = {"v9"};
  ps_shard_state st;
  BOOST_TEST(contains(failure(init_state(st, cfg), ec::invalid_config),
                      "sparse variable 'v9' is not among the shard's "
                      "variables"));
  BOOST_TEST(st.variables.empty());
}
