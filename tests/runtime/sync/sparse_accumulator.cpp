#define BOOST_TEST_MODULE sync_sparse_accumulator
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "runtime/sync/sparse_accumulator.hpp"
#include "tests/helpers.hpp"
#include "tests/runtime/sync/accumulator_checks.hpp"
#include "tests/wire_fixture.hpp"

namespace syncfac {

// Readable values in failure messages (tensors print with operator<<).
std::ostream& boost_test_print_type(std::ostream& os,
                                    const sparse_gradient& x) {
  os << "indices {";
  for (size_t i = 0; i < x.indices.size(); ++i)
    os << (i > 0 ? ", " : "") << x.indices[i];
  return os << "} rows " << x.rows;
}

} // namespace syncfac

using namespace syncfac;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

using index_list = std::vector<int64_t>;

/// k rows of width `width`, row i filled with values[i].
tensor rows_of(int64_t width, std::vector<float> values) {
  auto k = static_cast<int64_t>(values.size());
  tensor t{{k, width}};
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < width; ++j)
      t[i * width + j] = values[static_cast<size_t>(i)];
  return t;
}

bool push(sparse_accumulator& acc, int64_t local_step,
          const index_list& indices, const tensor& rows) {
  auto x = acc.apply(local_step, indices, rows);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  return *x;
}

sparse_gradient take(sparse_accumulator& acc, int64_t n) {
  auto x = acc.take(n);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  return std::move(*x);
}

/// Requires a refusal with `code` whose message names the variable and
/// `needle`, and that nothing but refused() changed.
void refused(sparse_accumulator& acc, const index_list& indices,
             const tensor& rows, ec code, const std::string& needle) {
  auto before = acc.stats();
  auto count = acc.count();
  auto touched = acc.touched_rows();
  auto msg = failure(acc.apply(0, indices, rows), code);
  BOOST_TEST(contains(msg, "variable '" + acc.variable() + "'"), msg);
  BOOST_TEST(contains(msg, needle), msg);
  BOOST_TEST(acc.refused() == before.refused + 1);
  BOOST_TEST(acc.accepted() == before.accepted);
  BOOST_TEST(acc.dropped_stale() == before.dropped_stale);
  BOOST_TEST(acc.count() == count);
  BOOST_TEST(acc.touched_rows() == touched);
}

} // namespace

// -- averaging ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(each_row_is_averaged_over_the_gradients_that_touched_it) {
  sparse_accumulator acc{"emb", {5, 2}};
  push(acc, 0, {0, 2}, rows_of(2, {1, 3}));
  push(acc, 0, {2, 3}, rows_of(2, {6, 8}));
  push(acc, 0, {2}, rows_of(2, {0}));
  BOOST_TEST(acc.touched_rows() == 3);
  auto g = take(acc, 3);
  BOOST_TEST(g.indices == (index_list{0, 2, 3}));
  // Row 0: 1/1; row 2: (3+6+0)/3; row 3: 8/1 -- not divided by the counter.
  BOOST_TEST(g.rows == rows_of(2, {1, 3, 8}));
}

BOOST_AUTO_TEST_CASE(the_sum_of_squares_is_that_of_the_rows_take_returns) {
  // --clip_norm's part of a sparse variable: the rows as take averages
  // them (each over its own hits), squared and summed; nothing is taken.
  sparse_accumulator acc{"emb", {5, 2}};
  push(acc, 0, {0, 2}, rows_of(2, {1, 3}));
  push(acc, 0, {2, 3}, rows_of(2, {6, 8}));
  push(acc, 0, {2}, rows_of(2, {0}));
  auto squares = acc.average_sum_of_squares(3);
  BOOST_REQUIRE_MESSAGE(squares, test::why(squares));
  BOOST_TEST(*squares == 2 * (1.0 + 9.0 + 64.0));
  BOOST_TEST(acc.touched_rows() == 3);
  failure(acc.average_sum_of_squares(4), ec::invalid_argument);
  BOOST_TEST(take(acc, 3).rows == rows_of(2, {1, 3, 8}));
}

BOOST_AUTO_TEST_CASE(rows_come_out_in_increasing_index_order) {
  sparse_accumulator acc{"emb", {6, 1}};
  push(acc, 0, {5}, rows_of(1, {5}));
  push(acc, 0, {1, 4}, rows_of(1, {1, 4}));
  push(acc, 0, {0, 3}, rows_of(1, {0, 3}));
  auto g = take(acc, 3);
  BOOST_TEST(g.indices == (index_list{0, 1, 3, 4, 5}));
  BOOST_TEST(g.rows == rows_of(1, {0, 1, 3, 4, 5}));
}

BOOST_AUTO_TEST_CASE(rows_keep_the_variables_trailing_shape) {
  sparse_accumulator acc{"t", {4, 2, 3}};
  tensor r{{1, 2, 3}, {1, 2, 3, 4, 5, 6}};
  push(acc, 0, {2}, r);
  auto g = take(acc, 1);
  BOOST_TEST(g.indices == (index_list{2}));
  BOOST_TEST(g.rows == r);
}

BOOST_AUTO_TEST_CASE(an_empty_gradient_counts_but_touches_nothing) {
  sparse_accumulator acc{"emb", {3, 2}};
  BOOST_TEST(push(acc, 0, {}, tensor{{0, 2}}));
  BOOST_TEST(acc.count() == 1);
  auto g = take(acc, 1);
  BOOST_TEST(g.indices.empty());
  BOOST_TEST(g.rows == (tensor{{0, 2}}));
}

// -- staleness and take ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(staleness_and_counters_follow_the_dense_rule) {
  sparse_accumulator acc{"emb", {3, 1}};
  acc.set_global_step(2);
  BOOST_TEST(!push(acc, 1, {0}, rows_of(1, {7})));
  BOOST_TEST(push(acc, 2, {1}, rows_of(1, {1})));
  BOOST_TEST(push(acc, 9, {1}, rows_of(1, {3})));
  check_counters(acc, 2, 2, 1);
  BOOST_TEST(acc.touched_rows() == 1);
  BOOST_TEST(acc.ready(2));
  BOOST_TEST(!acc.ready(3));
}

BOOST_AUTO_TEST_CASE(take_errors_leave_the_state_alone) {
  sparse_accumulator acc{"emb", {3, 1}};
  for (int64_t n : {0, -3})
    failure(acc.take(n), ec::invalid_argument);
  push(acc, 0, {1}, rows_of(1, {0.1f}));
  auto msg = failure(acc.take(2), ec::invalid_argument);
  BOOST_TEST(contains(msg, "variable 'emb'"), msg);
  BOOST_TEST(contains(msg, "not ready: 1 of 2 gradients"), msg);
  BOOST_TEST(acc.count() == 1);
  BOOST_TEST(acc.global_step() == 0);
  push(acc, 0, {1}, rows_of(1, {0.3f}));
  BOOST_TEST(take(acc, 2).indices == (index_list{1}));
}

BOOST_AUTO_TEST_CASE(take_resets_rows_and_increments_the_global_step) {
  sparse_accumulator acc{"emb", {4, 2}};
  push(acc, 0, {0, 3}, rows_of(2, {1, 2}));
  push(acc, 0, {3}, rows_of(2, {4}));
  push(acc, 0, {1}, rows_of(2, {5}));
  take(acc, 2); // the counter (3) exceeds n; rows use their own counts
  BOOST_TEST(acc.global_step() == 1);
  BOOST_TEST(acc.count() == 0);
  BOOST_TEST(acc.touched_rows() == 0);
  BOOST_TEST(!push(acc, 0, {2}, rows_of(2, {9})));
  push(acc, 1, {3}, rows_of(2, {-1}));
  auto g = take(acc, 1);
  BOOST_TEST(g.indices == (index_list{3}));
  BOOST_TEST(g.rows == rows_of(2, {-1}));
  BOOST_TEST(acc.global_step() == 2);
}

BOOST_AUTO_TEST_CASE(set_global_step_keeps_partial_rows) {
  sparse_accumulator acc{"emb", {2, 1}};
  push(acc, 0, {0}, rows_of(1, {2}));
  acc.set_global_step(4);
  push(acc, 4, {0, 1}, rows_of(1, {4, 1}));
  auto g = take(acc, 2);
  BOOST_TEST(g.indices == (index_list{0, 1}));
  BOOST_TEST(g.rows == rows_of(1, {3, 1}));
  BOOST_TEST(acc.global_step() == 5);
}

// -- refusals -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bad_indices_are_refused_naming_the_index) {
  sparse_accumulator acc{"emb", {4, 1}};
  push(acc, 0, {1}, rows_of(1, {1}));
  auto two = rows_of(1, {1, 2});
  auto three = rows_of(1, {1, 2, 3});
  refused(acc, {2, 1}, two, ec::invalid_argument,
          "index 1 at position 1 follows index 2");
  refused(acc, {0, 3, 1}, three, ec::invalid_argument,
          "index 1 at position 2");
  refused(acc, {1, 1}, two, ec::invalid_argument,
          "index 1 at position 1 follows index 1: indices must be strictly "
          "increasing");
  refused(acc, {0, 4}, two, ec::invalid_argument,
          "index 4 at position 1 is out of range [0, 4)");
  refused(acc, {-1, 2}, two, ec::invalid_argument,
          "index -1 at position 0 is out of range");
  BOOST_TEST(acc.refused() == 5);
  // A stale gradient with bad indices is refused too, not merely dropped.
  failure(acc.apply(-1, {3, 3}, two), ec::invalid_argument);
  BOOST_TEST(acc.dropped_stale() == 0);
  // The accepted row is still the only one.
  auto g = take(acc, 1);
  BOOST_TEST(g.indices == (index_list{1}));
  BOOST_TEST(g.rows == rows_of(1, {1}));
}

BOOST_AUTO_TEST_CASE(rows_of_the_wrong_shape_are_refused_naming_both) {
  sparse_accumulator acc{"emb", {4, 2}};
  refused(acc, {0, 1}, rows_of(2, {1, 2, 3}), ec::shape_mismatch,
          "2 indices need rows of shape [2, 2], got [3, 2]");
  refused(acc, {0, 1}, rows_of(3, {1, 2}), ec::shape_mismatch,
          "got [2, 3]");
  refused(acc, {0}, tensor{{2}}, ec::shape_mismatch, "got [2]");
  refused(acc, {0}, tensor{}, ec::shape_mismatch, "0 values");
}

BOOST_AUTO_TEST_CASE(non_finite_rows_are_refused_naming_the_index) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  sparse_accumulator acc{"emb", {5, 2}};
  for (float bad : {std::nanf(""), inf, -inf}) {
    auto rows = rows_of(2, {1, 1, 1});
    rows[5] = bad; // second value of position 2
    refused(acc, {0, 2, 4}, rows, ec::non_finite,
            "row for index 4 at position 2 holds NaN or Inf");
  }
}

BOOST_AUTO_TEST_CASE(variables_without_rows_are_a_programming_error) {
  BOOST_CHECK_THROW((sparse_accumulator{"s", {}}), std::invalid_argument);
  BOOST_CHECK_THROW((sparse_accumulator{"s", {-1, 2}}), std::invalid_argument);
}

// -- the seeds' scenario ----------------------------------------------------------

// test2Workers: v_sparse = [[3], [4]]; worker i sends row 1 with 0.1 + 0.2i;
// SGD with learning rate 2.0.
BOOST_AUTO_TEST_CASE(seed_test2Workers_v_sparse) {
  sparse_accumulator acc{"v_sparse", {2, 1}};
  std::vector<float> var{3.0f, 4.0f};
  auto round = [&](int64_t local_step) {
    bool fresh = true;
    for (int worker = 0; worker < 2; ++worker)
      fresh &= push(acc, local_step, {1}, rows_of(1, {0.1f + worker * 0.2f}));
    return fresh;
  };
  auto apply = [&] {
    auto g = take(acc, 2);
    for (size_t i = 0; i < g.indices.size(); ++i)
      var[static_cast<size_t>(g.indices[i])] -= 2.0f * g.rows[int64_t(i)];
    return g;
  };
  BOOST_TEST(round(0));
  auto g = apply();
  BOOST_TEST(g.indices == (index_list{1}));
  BOOST_TEST(g.rows[0] == (0.1f + 0.3f) / 2.0f);
  BOOST_TEST(var[0] == 3.0f);
  BOOST_TEST(var[1] == 4.0f - (0.1f + 0.3f) / 2 * 2.0f, tt::tolerance(1e-6f));
  // Round two carries local_step 0 after the step moved to 1: dropped.
  BOOST_TEST(!round(0));
  BOOST_TEST(acc.dropped_stale() == 2);
  BOOST_TEST(!acc.ready(1));
  BOOST_TEST(round(1));
  apply();
  BOOST_TEST(acc.global_step() == 2);
  BOOST_TEST(var[0] == 3.0f);
  BOOST_TEST(var[1] == 4.0f - 2 * (0.1f + 0.3f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
}

// -- stats and the wire -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(stats_count_every_outcome) {
  sparse_accumulator acc{"emb", {3, 1}};
  push(acc, 0, {0}, rows_of(1, {1}));
  take(acc, 1);
  push(acc, 0, {0}, rows_of(1, {1}));
  (void) acc.apply(1, {1, 0}, rows_of(1, {1, 1}));
  auto stats = acc.stats();
  check_stats(stats, "emb", 1, 1, 1, 1);
  BOOST_TEST(acc.shape() == (tensor_shape{3, 1}));
}

BOOST_FIXTURE_TEST_CASE(sparse_gradients_round_trip_through_the_wire,
                        wire_fixture) {
  sparse_accumulator acc{"emb", {1000, 3}};
  push(acc, 0, {2, 17, 999}, tensor{{3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}});
  push(acc, 0, {17}, tensor{{1, 3}, {-4, -5, -6}});
  auto g = take(acc, 2);
  BOOST_TEST(round_trip(g) == g);
  BOOST_TEST(message_round_trip(g) == g);
  sparse_gradient empty{{}, tensor{{0, 3}}};
  BOOST_TEST(round_trip(empty) == empty);
  auto stats = acc.stats();
  BOOST_TEST((message_round_trip(stats) == stats));
}
