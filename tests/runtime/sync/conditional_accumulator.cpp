#define BOOST_TEST_MODULE sync_conditional_accumulator
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "runtime/sync/conditional_accumulator.hpp"
#include "tests/helpers.hpp"
#include "tests/runtime/sync/accumulator_checks.hpp"
#include "tests/wire_fixture.hpp"


using namespace syncfac;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

/// Takes n gradients, requiring success.
tensor take(conditional_accumulator& acc, int64_t n) {
  auto x = acc.take(n);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  return std::move(*x);
}

/// Applies a gradient that must be valid; returns whether it was fresh.
bool push(conditional_accumulator& acc, int64_t local_step, const tensor& g) {
  auto x = acc.apply(local_step, g);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  return *x;
}

/// TF's GradientDescentOptimizer(2.0), as the seeds use it.
void sgd(float& variable, const tensor& average) {
  variable -= 2.0f * average[0];
}

} // namespace

// -- the staleness rule ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(gradients_at_or_after_the_global_step_are_accepted) {
  conditional_accumulator acc{"w", {2}};
  acc.set_global_step(3);
  BOOST_TEST(push(acc, 3, vec({1, 2})));
  BOOST_TEST(push(acc, 7, vec({3, 4})));
  check_counters(acc, 2, 2, 0);
  BOOST_TEST(acc.ready(2));
  BOOST_TEST(!acc.ready(3));
}

BOOST_AUTO_TEST_CASE(stale_gradients_are_dropped_and_counted) {
  conditional_accumulator acc{"w", {2}};
  acc.set_global_step(2);
  BOOST_TEST(!push(acc, 1, vec({1, 2})));
  BOOST_TEST(!push(acc, -5, vec({1, 2})));
  check_counters(acc, 0, 0, 2);
  BOOST_TEST(!acc.ready(1));
  // The dropped values never reach the sum.
  BOOST_TEST(push(acc, 2, vec({5, 6})));
  BOOST_TEST(take(acc, 1) == vec({5, 6}));
}

// -- take ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_sum_of_squares_is_that_of_the_average_take_returns) {
  // --clip_norm's part of a dense variable, taken from the very floats
  // take divides out (over every gradient, as take), taking nothing.
  conditional_accumulator acc{"w", {2}};
  push(acc, 0, vec({1, 2}));
  push(acc, 0, vec({2, 3}));
  push(acc, 0, vec({0, 1}));
  auto squares = acc.average_sum_of_squares(2);
  BOOST_REQUIRE_MESSAGE(squares, test::why(squares));
  auto average = take(acc, 2);
  BOOST_TEST(average == vec({1, 2}));
  BOOST_TEST(*squares == 1.0 + 4.0);
  failure(acc.average_sum_of_squares(1), ec::invalid_argument);
}

BOOST_AUTO_TEST_CASE(take_of_a_non_positive_count_is_an_error) {
  conditional_accumulator acc{"w", {1}};
  push(acc, 0, vec({1}));
  for (int64_t n : {0, -1}) {
    auto msg = failure(acc.take(n), ec::invalid_argument);
    BOOST_TEST(contains(msg, "variable 'w'"), msg);
    BOOST_TEST(!acc.ready(n));
  }
  BOOST_TEST(acc.count() == 1);
  BOOST_TEST(acc.global_step() == 0);
}

BOOST_AUTO_TEST_CASE(take_before_ready_is_an_error_and_changes_nothing) {
  conditional_accumulator acc{"v0", {1}};
  failure(acc.take(1), ec::invalid_argument);
  push(acc, 0, vec({0.5f}));
  BOOST_TEST(!acc.ready(2));
  auto msg = failure(acc.take(2), ec::invalid_argument);
  BOOST_TEST(contains(msg, "variable 'v0'"), msg);
  BOOST_TEST(contains(msg, "not ready: 1 of 2 gradients"), msg);
  BOOST_TEST(acc.count() == 1);
  BOOST_TEST(acc.global_step() == 0);
  // The caller waits; once the second gradient is in, the take succeeds.
  push(acc, 0, vec({1.5f}));
  BOOST_TEST(acc.ready(2));
  BOOST_TEST(take(acc, 2) == vec({1.0f}));
}

BOOST_AUTO_TEST_CASE(a_counter_beyond_n_divides_by_the_counter) {
  conditional_accumulator acc{"w", {2}};
  push(acc, 0, vec({1, 10}));
  push(acc, 0, vec({2, 20}));
  push(acc, 0, vec({6, 30}));
  BOOST_TEST(take(acc, 2) == vec({3, 20}));
}

BOOST_AUTO_TEST_CASE(take_resets_and_increments_the_global_step) {
  conditional_accumulator acc{"w", {2, 2}};
  push(acc, 0, tensor{{2, 2}, {1, 2, 3, 4}});
  auto avg = take(acc, 1);
  BOOST_TEST(avg.shape() == (tensor_shape{2, 2}));
  BOOST_TEST(acc.count() == 0);
  BOOST_TEST(acc.global_step() == 1);
  BOOST_TEST(!acc.ready(1));
  // Step 0 is now stale; the next round starts from a zero sum.
  BOOST_TEST(!push(acc, 0, tensor{{2, 2}, {9, 9, 9, 9}}));
  BOOST_TEST(push(acc, 1, tensor{{2, 2}, {-1, 0, 1, 2}}));
  BOOST_TEST(take(acc, 1) == (tensor{{2, 2}, {-1, 0, 1, 2}}));
  BOOST_TEST(acc.global_step() == 2);
  BOOST_TEST(acc.accepted() == 2);
  BOOST_TEST(acc.dropped_stale() == 1);
}

BOOST_AUTO_TEST_CASE(set_global_step_keeps_a_partial_sum) {
  conditional_accumulator acc{"w", {1}};
  push(acc, 0, vec({1}));
  acc.set_global_step(5);
  BOOST_TEST(acc.global_step() == 5);
  BOOST_TEST(acc.count() == 1);
  BOOST_TEST(!push(acc, 4, vec({100})));
  BOOST_TEST(push(acc, 5, vec({3})));
  BOOST_TEST(take(acc, 2) == vec({2}));
  BOOST_TEST(acc.global_step() == 6);
  // Moving the step back is allowed too (a restore).
  acc.set_global_step(1);
  BOOST_TEST(push(acc, 1, vec({4})));
}

// -- refusals -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_gradient_of_the_wrong_shape_is_refused_and_counted) {
  conditional_accumulator acc{"layer1/w", {3, 2}};
  push(acc, 0, tensor{{3, 2}, {1, 1, 1, 1, 1, 1}});
  auto msg = failure(acc.apply(0, tensor{{2, 3}}), ec::shape_mismatch);
  BOOST_TEST(contains(msg, "variable 'layer1/w'"), msg);
  BOOST_TEST(contains(msg, "[2, 3]"), msg);
  BOOST_TEST(contains(msg, "[3, 2]"), msg);
  failure(acc.apply(0, tensor{{6}}), ec::shape_mismatch);
  // Malformed is refused even when it is also stale.
  failure(acc.apply(-1, tensor{{1}}), ec::shape_mismatch);
  BOOST_TEST(acc.refused() == 3);
  check_counters(acc, 1, 1, 0);
  BOOST_TEST(take(acc, 1) == (tensor{{3, 2}, {1, 1, 1, 1, 1, 1}}));
}

BOOST_AUTO_TEST_CASE(an_empty_tensor_is_not_a_scalar) {
  // A default tensor has shape [] but no value: it must not pass for a
  // scalar gradient (the add would read past its end).
  conditional_accumulator acc{"v0", {}};
  auto msg = failure(acc.apply(0, tensor{}), ec::shape_mismatch);
  BOOST_TEST(contains(msg, "0 values"), msg);
  BOOST_TEST(acc.refused() == 1);
  BOOST_TEST(push(acc, 0, scalar(0.25f)));
  BOOST_TEST(take(acc, 1) == scalar(0.25f));
}

BOOST_AUTO_TEST_CASE(nan_and_inf_are_refused_and_counted) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  conditional_accumulator acc{"v1", {3}};
  push(acc, 0, vec({1, 2, 3}));
  for (float bad : {nan, inf, -inf}) {
    auto msg = failure(acc.apply(0, vec({0, 0, bad})), ec::non_finite);
    BOOST_TEST(contains(msg, "variable 'v1'"), msg);
    BOOST_TEST(contains(msg, "element 2"), msg);
  }
  BOOST_TEST(acc.refused() == 3);
  BOOST_TEST(acc.count() == 1);
  BOOST_TEST(take(acc, 1) == vec({1, 2, 3}));
}

// -- gradients in pieces (pushes in parts) ------------------------------------

BOOST_AUTO_TEST_CASE(pieces_in_any_order_sum_as_the_whole_gradient) {
  conditional_accumulator whole{"w", {2, 3}};
  conditional_accumulator pieces{"w", {2, 3}};
  std::vector<float> g1{0.1f, 0.7f, -1.3f, 2.9f, 1e-3f, 5.5f};
  std::vector<float> g2{3.3f, -0.2f, 0.6f, 1.1f, 4e4f, -7.25f};
  for (const auto* g : {&g1, &g2}) {
    BOOST_TEST(push(whole, 0, tensor{{2, 3}, *g}));
    // The last piece first, as parts may come.
    auto added = pieces.apply(0, {{4, g->data() + 4, 2},
                                  {0, g->data(), 1},
                                  {1, g->data() + 1, 3}});
    BOOST_REQUIRE_MESSAGE(added, test::why(added));
    BOOST_TEST(*added);
  }
  BOOST_TEST(take(pieces, 2) == take(whole, 2));
  // Stale pieces are dropped as a whole gradient would be.
  auto stale = pieces.apply(0, {{0, g1.data(), 6}});
  BOOST_REQUIRE(stale);
  BOOST_TEST(!*stale);
  BOOST_TEST(pieces.dropped_stale() == 1);
}

BOOST_AUTO_TEST_CASE(pieces_with_gaps_overlaps_or_nan_are_refused) {
  conditional_accumulator acc{"v", {6}};
  std::vector<float> g{1, 2, 3, 4, 5, 6};
  auto gap = failure(acc.apply(0, {{0, g.data(), 2}, {3, g.data() + 3, 3}}),
                     ec::shape_mismatch);
  BOOST_TEST(contains(gap, "variable 'v'"), gap);
  BOOST_TEST(contains(gap, "at element 3 where 2 was next"), gap);
  auto overlap = failure(acc.apply(0, {{0, g.data(), 4},
                                       {2, g.data() + 2, 4}}),
                         ec::shape_mismatch);
  BOOST_TEST(contains(overlap, "exactly once"), overlap);
  auto short_ = failure(acc.apply(0, {{0, g.data(), 5}}), ec::shape_mismatch);
  BOOST_TEST(contains(short_, "cover 5 of its 6 elements"), short_);
  auto beyond = failure(acc.apply(0, {{0, g.data(), 6}, {6, g.data(), 1}}),
                        ec::shape_mismatch);
  BOOST_TEST(contains(beyond, "exactly once"), beyond);
  std::vector<float> bad = g;
  bad[4] = std::nanf("");
  auto nan = failure(acc.apply(0, {{3, bad.data() + 3, 3},
                                   {0, bad.data(), 3}}),
                     ec::non_finite);
  BOOST_TEST(contains(nan, "first at element 4"), nan);
  BOOST_TEST(acc.refused() == 5);
  BOOST_TEST(acc.count() == 0);
  // Nothing was added by the refused ones.
  BOOST_TEST(push(acc, 0, vec(g)));
  BOOST_TEST(take(acc, 1) == vec(g));
}

// -- the seeds' scenarios -------------------------------------------------------

// test2Workers: two workers, R = N = 2, SGD with learning rate 2.0; worker
// i pushes 0.1 + 0.2i for v0 and 0.9 + 0.2i for v1.
BOOST_AUTO_TEST_CASE(seed_test2Workers) {
  conditional_accumulator acc0{"v0", {}};
  conditional_accumulator acc1{"v1", {}};
  float v0 = 0.0f;
  float v1 = 1.0f;
  auto round = [&](int64_t local_step) {
    for (int worker = 0; worker < 2; ++worker) {
      push(acc0, local_step, scalar(0.1f + worker * 0.2f));
      push(acc1, local_step, scalar(0.9f + worker * 0.2f));
    }
  };
  auto apply = [&] {
    BOOST_REQUIRE(acc0.ready(2) && acc1.ready(2));
    sgd(v0, take(acc0, 2));
    sgd(v1, take(acc1, 2));
  };
  // Step 1: both push at local_step 0; the chief averages and applies.
  round(0);
  auto avg = acc0.take(2);
  BOOST_REQUIRE_MESSAGE(avg, test::why(avg));
  BOOST_TEST((*avg)[0] == (0.1f + 0.3f) / 2.0f);
  BOOST_TEST((*avg)[0] == 0.2f, tt::tolerance(1e-6f));
  sgd(v0, *avg);
  sgd(v1, take(acc1, 2));
  BOOST_TEST(acc0.global_step() == 1);
  BOOST_TEST(v0 == 0 - (0.1f + 0.3f) / 2 * 2.0f, tt::tolerance(1e-6f));
  BOOST_TEST(v1 == 1 - (0.9f + 1.1f) / 2 * 2.0f, tt::tolerance(1e-6f));
  // Step 2: the initial tokens carried step 0, so both push at local_step
  // 0 again, now stale: dropped, nothing to take, variables unchanged.
  round(0);
  BOOST_TEST(!acc0.ready(1));
  BOOST_TEST(!acc1.ready(1));
  BOOST_TEST(acc0.dropped_stale() == 2);
  BOOST_TEST(acc1.dropped_stale() == 2);
  BOOST_TEST(acc0.global_step() == 1);
  // Step 3: with tokens of step 1, the two workers proceed together.
  round(1);
  apply();
  BOOST_TEST(acc0.global_step() == 2);
  BOOST_TEST(v0 == 0 - 2 * (0.1f + 0.3f) / 2 * 2.0f, tt::tolerance(1e-6f));
  BOOST_TEST(v1 == 1 - 2 * (0.9f + 1.1f) / 2 * 2.0f, tt::tolerance(1e-6f));
  BOOST_TEST(acc0.accepted() == 4);
}

// test3Workers1Backup: N = 3, R = 2; the first two fresh gradients win.
BOOST_AUTO_TEST_CASE(seed_test3Workers1Backup) {
  conditional_accumulator acc0{"v0", {}};
  conditional_accumulator acc1{"v1", {}};
  float v0 = 0.0f;
  float v1 = 1.0f;
  auto push_from = [&](int worker, int64_t local_step) {
    auto fresh = push(acc0, local_step, scalar(0.1f + worker * 0.2f));
    BOOST_TEST(push(acc1, local_step, scalar(0.9f + worker * 0.2f)) == fresh);
    return fresh;
  };
  auto apply = [&] {
    sgd(v0, take(acc0, 2));
    sgd(v1, take(acc1, 2));
  };
  // Workers 0 and 2 finish first; with two gradients the chief applies.
  BOOST_TEST(push_from(0, 0));
  BOOST_TEST(!acc0.ready(2));
  BOOST_TEST(push_from(2, 0));
  BOOST_REQUIRE(acc0.ready(2));
  apply();
  BOOST_TEST(acc0.global_step() == 1);
  BOOST_TEST(v0 == 0 - (0.1f + 0.5f) / 2 * 2.0f, tt::tolerance(1e-6f));
  BOOST_TEST(v1 == 1 - (0.9f + 1.3f) / 2 * 2.0f, tt::tolerance(1e-6f));
  // Worker 1, the backup, finishes later: stale.
  BOOST_TEST(!push_from(1, 0));
  // Everyone's next push still carries local_step 0: all dropped.
  for (int worker : {0, 1, 2})
    BOOST_TEST(!push_from(worker, 0));
  BOOST_TEST(acc0.dropped_stale() == 4);
  BOOST_TEST(acc0.global_step() == 1);
  // Worker 0 alone is not enough; worker 1 completes the step.
  BOOST_TEST(push_from(0, 1));
  BOOST_TEST(!acc0.ready(2));
  BOOST_TEST(push_from(1, 1));
  apply();
  BOOST_TEST(acc0.global_step() == 2);
  BOOST_TEST(v0 == -0.6f - (0.1f + 0.3f) / 2 * 2.0f, tt::tolerance(1e-6f));
  BOOST_TEST(v1 == -1.2f - (0.9f + 1.1f) / 2 * 2.0f, tt::tolerance(1e-6f));
}

// -- stats and the wire -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(stats_report_every_counter) {
  conditional_accumulator acc{"v0", {}};
  push(acc, 0, scalar(1));
  take(acc, 1);
  push(acc, 0, scalar(1));
  (void) acc.apply(1, scalar(std::nanf("")));
  push(acc, 1, scalar(2));
  auto stats = acc.stats();
  check_stats(stats, "v0", 2, 1, 1, 1);
  BOOST_TEST(acc.variable() == "v0");
  BOOST_TEST(acc.shape() == tensor_shape{});
}

BOOST_FIXTURE_TEST_CASE(stats_round_trip_through_the_wire, wire_fixture) {
  accumulator_stats stats{"layer2/conv/w", 41, 7, 2, 1234567890123};
  BOOST_TEST((round_trip(stats) == stats));
  BOOST_TEST((message_round_trip(stats) == stats));
  BOOST_TEST((round_trip(accumulator_stats{}) == accumulator_stats{}));
}
