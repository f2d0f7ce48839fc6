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
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::ps_shard_parts;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

/// Two dense scalars and a sparse table of two rows, plain SGD at 2.0.
ps_shard_config two_scalars_and_a_table() {
  ps_shard_config cfg;
  cfg.index = 3;
  cfg.variables = {{"v0", scalar(0.0f)},
                   {"v1", scalar(1.0f)},
                   {"table", tensor{{2, 1}, {3.0f, 4.0f}}}};
  cfg.sparse_variables = {"table"};
  cfg.optimizer.kind = optimizer_kind::sgd;
  cfg.optimizer.learning_rate = 2.0f;
  return cfg;
}

/// Worker w's gradients: v0 0.1 + 0.2w, v1 0.9 + 0.2w, row 1 of the table
/// 0.1 + 0.2w.
gradient_push push_of(int32_t worker, int64_t local_step) {
  auto g0 = 0.1f + static_cast<float>(worker) * 0.2f;
  auto g1 = 0.9f + static_cast<float>(worker) * 0.2f;
  gradient_push p;
  p.worker = worker;
  p.local_step = local_step;
  p.dense = {{"v0", scalar(g0)}, {"v1", scalar(g1)}};
  p.sparse = {{"table", {1}, tensor{{1, 1}, {g0}}}};
  return p;
}

struct shard {
  ps_shard_state st;

  shard() {
    auto err = init_state(st, two_scalars_and_a_table());
    BOOST_REQUIRE_MESSAGE(!err, render(err));
  }

  float value(size_t i, int64_t j = 0) const {
    return st.variables[i].value[j];
  }
};

bool has_code(const caf::error& err, ec code) {
  return err.code() == static_cast<uint8_t>(code);
}

bool says(const caf::error& err, const std::string& text) {
  return render(err).find(text) != std::string::npos;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(ps_shard_parts_tests, shard)

BOOST_AUTO_TEST_CASE(an_apply_averages_the_fresh_pushes) {
  for (int32_t w = 0; w < 2; ++w) {
    auto fresh = take_push(st, push_of(w, 0));
    BOOST_REQUIRE(fresh);
    BOOST_TEST(*fresh);
  }
  BOOST_TEST(all_ready(st, 2));
  BOOST_TEST(!all_ready(st, 3));
  auto done = complete(st, 2, 1.0f);
  BOOST_REQUIRE(done);
  BOOST_TEST(done->shard == 3);
  BOOST_TEST(done->global_step == 1);
  BOOST_TEST(done->gradients == 2);
  BOOST_TEST(st.global_step == 1);
  // x - 2 * mean: v0 0 - 2 * 0.2, v1 1 - 2 * 1.0, the table's row 1
  // 4 - 2 * 0.2 and its row 0 untouched.
  BOOST_TEST(value(0) == -0.4f, tt::tolerance(1e-5f));
  BOOST_TEST(value(1) == -1.0f, tt::tolerance(1e-5f));
  BOOST_TEST(value(2, 0) == 3.0f);
  BOOST_TEST(value(2, 1) == 3.6f, tt::tolerance(1e-5f));
  // A push for the step before is stale now, and nothing waits for it.
  auto stale = take_push(st, push_of(0, 0));
  BOOST_REQUIRE(stale);
  BOOST_TEST(!*stale);
  BOOST_TEST(!all_ready(st, 1));
}

BOOST_AUTO_TEST_CASE(a_clip_factor_scales_every_average) {
  for (int32_t w = 0; w < 2; ++w)
    BOOST_REQUIRE(take_push(st, push_of(w, 0)));
  auto norm = norm_of_round(st, 2);
  BOOST_REQUIRE(norm);
  // 0.2² + 1.0² + 0.2², taking nothing.
  BOOST_TEST(norm->sum_of_squares == 1.08, tt::tolerance(1e-5));
  BOOST_TEST(all_ready(st, 2));
  BOOST_REQUIRE(complete(st, 2, 0.5f));
  BOOST_TEST(std::abs(value(1)) < 1e-5f);
}

BOOST_AUTO_TEST_CASE(a_malformed_push_is_refused_whole_and_counted) {
  auto unknown = push_of(0, 0);
  unknown.dense.push_back({"v9", scalar(1.0f)});
  auto refused = take_push(st, unknown);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(has_code(refused.error(), ec::unknown_name));
  BOOST_TEST(says(refused.error(), "ps shard 3: push from worker 0 "
                                   "(local_step 0): unknown variable 'v9'"));
  auto dense_table = push_of(1, 0);
  dense_table.sparse.clear();
  dense_table.dense.push_back({"table", tensor{{2, 1}, {1.0f, 1.0f}}});
  auto dense_rows = take_push(st, dense_table);
  BOOST_REQUIRE(!dense_rows);
  BOOST_TEST(has_code(dense_rows.error(), ec::bad_message));
  BOOST_TEST(says(dense_rows.error(), "variable 'table' is sparse"));
  // Neither push reached an accumulator, though v0 and v1 came first.
  BOOST_TEST(!all_ready(st, 1));
  auto status = make_status(st);
  BOOST_TEST(status.refused_pushes == 2);
  BOOST_TEST(status.variables[0].refused == 0);
  BOOST_TEST(status.variables[2].refused == 1);
}

BOOST_AUTO_TEST_CASE(an_apply_for_another_step_or_no_gradients_is_refused) {
  auto other_step = check_apply(st, 4, 2);
  BOOST_TEST(has_code(other_step, ec::invalid_argument));
  BOOST_TEST(says(other_step, "ps shard 3: apply for step 4, but the shard "
                              "is at step 0"));
  auto none = check_apply(st, 0, 0, "norm");
  BOOST_TEST(says(none, "ps shard 3: norm needs a positive number of "
                        "gradients, got 0"));
  BOOST_TEST(!check_apply(st, 0, 2));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(a_bad_config_builds_no_state) {
  auto cfg = two_scalars_and_a_table();
  cfg.sparse_variables = {"v9"};
  ps_shard_state st;
  auto err = init_state(st, cfg);
  BOOST_TEST(has_code(err, ec::invalid_config));
  BOOST_TEST(says(err, "sparse variable 'v9' is not among the shard's "
                       "variables"));
  BOOST_TEST(st.variables.empty());
}
