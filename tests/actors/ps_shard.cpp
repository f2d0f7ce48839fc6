#define BOOST_TEST_MODULE actors_ps_shard
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/ps_shard.hpp"
#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/actors/shard_seeds.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::test;
using namespace std::chrono_literals;
namespace tt = boost::test_tools;

namespace {

float value_of(const shard_params& p, const std::string& name, int64_t i) {
  for (const auto& x : p.values)
    if (x.name == name)
      return x.value[i];
  BOOST_FAIL("no variable " << name);
  return 0;
}

struct fixture : actor_fixture {
  ps_actor ps;

  fixture() {
    start(seed_config());
  }

  /// Replaces the shard with one of `shard`.
  void start(ps_shard_config shard) {
    if (ps)
      self->send_exit(ps, caf::exit_reason::user_shutdown);
    ps = keep(spawn_ps_shard(sys, std::move(shard)));
  }

  /// The shard's answer to a request, or the error it produced.
  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    return actor_fixture::ask<T>(ps, std::forward<Ts>(xs)...);
  }

  push_ack push(const gradient_push& p) {
    auto ack = ask<push_ack>(push_atom::value, p);
    BOOST_REQUIRE_MESSAGE(ack, test::why(ack));
    return *ack;
  }

  caf::expected<push_ack> try_push(const gradient_push& p) {
    return ask<push_ack>(push_atom::value, p);
  }

  caf::expected<applied> apply(int64_t step, int64_t n) {
    return ask<applied>(apply_atom::value, step, n);
  }

  shard_params pull() {
    auto p = ask<shard_params>(pull_atom::value);
    BOOST_REQUIRE_MESSAGE(p, test::why(p));
    return *p;
  }

  /// The shard's moving averages of its variables.
  shard_params pull_averages() {
    auto p = ask<shard_params>(pull_atom::value, average_atom::value);
    BOOST_REQUIRE_MESSAGE(p, test::why(p));
    return *p;
  }

  shard_status status() {
    auto s = ask<shard_status>(status_atom::value);
    BOOST_REQUIRE_MESSAGE(s, test::why(s));
    return *s;
  }

  void set_step(int64_t step) {
    auto ok = ask<caf::ok_atom>(set_step_atom::value, step);
    BOOST_REQUIRE_MESSAGE(ok, test::why(ok));
  }

  /// Requires that nothing reached any accumulator or variable.
  void require_untouched(int64_t refused_pushes) {
    auto st = status();
    BOOST_TEST(st.refused_pushes == refused_pushes);
    BOOST_TEST(st.accepted_pushes == 0);
    BOOST_TEST(st.stale_pushes == 0);
    for (const auto& v : st.variables) {
      BOOST_TEST(v.accepted == 0, v.variable);
      BOOST_TEST(v.dropped_stale == 0, v.variable);
    }
    BOOST_TEST(same(pull().values, seed_variables()));
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(ps_shard_tests, fixture)

// -- pull and push ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(pull_returns_the_initial_variables) {
  auto p = pull();
  BOOST_TEST(p.shard == 1);
  BOOST_TEST(p.global_step == 0);
  BOOST_TEST(same(p.values, seed_variables()));
}

BOOST_AUTO_TEST_CASE(fresh_and_stale_pushes_are_acked_and_counted) {
  auto ack = push(seed_push(0, 0));
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.global_step == 0);
  // A gradient from the future is fresh too (TF: local_step >= step).
  BOOST_TEST(push(seed_push(1, 3)).accepted);
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  auto late = push(seed_push(2, 0));
  BOOST_TEST(!late.accepted);
  BOOST_TEST(late.global_step == 1);
  auto st = status();
  BOOST_TEST(st.shard == 1);
  BOOST_TEST(st.global_step == 1);
  BOOST_TEST(st.accepted_pushes == 2);
  BOOST_TEST(st.stale_pushes == 1);
  BOOST_TEST(st.refused_pushes == 0);
  BOOST_REQUIRE_EQUAL(st.variables.size(), 3u);
  for (const auto& v : st.variables) {
    BOOST_TEST(v.accepted == 2, v.variable);
    BOOST_TEST(v.dropped_stale == 1, v.variable);
    BOOST_TEST(v.refused == 0, v.variable);
    BOOST_TEST(v.global_step == 1, v.variable);
  }
  BOOST_TEST(st.variables[2].variable == "v_sparse");
}

// -- apply --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(test2workers_numbers_come_out) {
  // Round 1: both workers push at step 0; the average moves the variables.
  push(seed_push(0, 0));
  push(seed_push(1, 0));
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->shard == 1);
  BOOST_TEST(done->global_step == 1);
  BOOST_TEST(done->gradients == 2);
  auto p = pull();
  BOOST_TEST(p.global_step == 1);
  BOOST_TEST(value_of(p, "v0", 0) == 0 - (0.1f + 0.3f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == 1 - (0.9f + 1.1f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
  // The sparse variable changes only on the row that had gradients.
  BOOST_TEST(value_of(p, "v_sparse", 0) == 3.0f);
  BOOST_TEST(value_of(p, "v_sparse", 1) == 3.6f, tt::tolerance(1e-6f));
  // Round 2: the initial tokens carried step 0, so these are wasted.
  BOOST_TEST(!push(seed_push(0, 0)).accepted);
  BOOST_TEST(!push(seed_push(1, 0)).accepted);
  BOOST_TEST(same(pull().values, p.values));
  // Round 3: both at step 1.
  push(seed_push(0, 1));
  push(seed_push(1, 1));
  done = apply(1, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->global_step == 2);
  p = pull();
  BOOST_TEST(value_of(p, "v0", 0) == 0 - 2 * (0.1f + 0.3f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == 1 - 2 * (0.9f + 1.1f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(test3workers1backup_numbers_come_out) {
  // Workers 0 and 2 first; the apply needs only two.
  push(seed_push(0, 0));
  push(seed_push(2, 0));
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  // Worker 1 is late: stale.
  BOOST_TEST(!push(seed_push(1, 0)).accepted);
  auto p = pull();
  BOOST_TEST(value_of(p, "v0", 0) == -0.6f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == -1.2f, tt::tolerance(1e-6f));
  // Next round, workers 0 and 1 at step 1.
  push(seed_push(0, 1));
  push(seed_push(1, 1));
  BOOST_REQUIRE(apply(1, 2));
  p = pull();
  BOOST_TEST(value_of(p, "v0", 0) == -0.6f - (0.1f + 0.3f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == -1.2f - (0.9f + 1.1f) / 2 * 2.0f,
             tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(apply_waits_for_the_last_gradient) {
  // The apply is sent first; the mailbox keeps the order of one sender,
  // so the shard holds it before either push arrives.
  auto pending = self->request(ps, 10s, apply_atom::value, int64_t{0},
                               int64_t{2});
  BOOST_TEST(push(seed_push(0, 0)).accepted);
  // One gradient of two: the shard has not moved.
  BOOST_TEST(status().global_step == 0);
  BOOST_TEST(same(pull().values, seed_variables()));
  // The second gradient completes the apply; its ack still reports the
  // step it was judged against.
  auto ack = push(seed_push(1, 0));
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.global_step == 0);
  auto done = answer<applied>(pending);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->global_step == 1);
  BOOST_TEST(done->gradients == 2);
  BOOST_TEST(value_of(pull(), "v0", 0) == -0.4f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(more_gradients_than_n_are_all_averaged) {
  push(seed_push(0, 0));
  push(seed_push(1, 0));
  push(seed_push(2, 0));
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->gradients == 3);
  BOOST_TEST(value_of(pull(), "v0", 0) == -2.0f * (0.1f + 0.3f + 0.5f) / 3,
             tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(a_partial_push_completes_the_apply_it_counts_for) {
  // Worker 0 pushes only v0 (TF's grad=None for v1 and v_sparse): the
  // apply of one push goes ahead instead of stalling for gradients no push
  // of the round carries; v1 and v_sparse stay as they are, and worker 1's
  // later push of them is stale (the shard is at step 1 then).
  auto only_v0 = seed_push(0, 0);
  only_v0.dense.resize(1);
  only_v0.sparse.clear();
  auto pending = self->request(ps, 10s, apply_atom::value, int64_t{0},
                               int64_t{1});
  BOOST_TEST(push(only_v0).accepted);
  auto done = answer<applied>(pending);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->global_step == 1);
  // The fewest gradients any variable averaged over: none for v1.
  BOOST_TEST(done->gradients == 0);
  auto st = status();
  BOOST_TEST(st.global_step == 1);
  BOOST_TEST(st.variables[0].accepted == 1);
  BOOST_TEST(st.variables[1].accepted == 0);
  auto p = pull();
  BOOST_TEST(value_of(p, "v0", 0) == -0.2f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == 1.0f);
  BOOST_TEST(value_of(p, "v_sparse", 1) == 4.0f);
  auto rest = seed_push(1, 0);
  rest.dense.erase(rest.dense.begin());
  BOOST_TEST(!push(rest).accepted);
}

BOOST_AUTO_TEST_CASE(momentum_keeps_its_velocity_and_sparse_rows_stay_apart) {
  auto shard = seed_config();
  shard.variables.push_back({"layer/w", vec({0, 0})});
  shard.optimizer = test::optimizer_of(optimizer_kind::momentum, 0.5f);
  shard.optimizer.momentum = 0.9f;
  start(shard);
  auto with_w = [](gradient_push p, tensor w) {
    p.dense.push_back({"layer/w", std::move(w)});
    return p;
  };
  push(with_w(seed_push(0, 0), vec({1, 2})));
  push(with_w(seed_push(1, 0), vec({3, 4})));
  BOOST_REQUIRE(apply(0, 2));
  // v = [2, 3]; w = -0.5 v. Sparse row 1: v = 0.2, 4 - 0.1.
  auto p = pull();
  BOOST_TEST(value_of(p, "layer/w", 0) == -1.0f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "layer/w", 1) == -1.5f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v_sparse", 1) == 3.9f, tt::tolerance(1e-6f));
  // Round 2, one gradient touching only row 0 of v_sparse.
  auto g = with_w(seed_push(0, 1), vec({1, 1}));
  g.sparse = {{"v_sparse", {0}, tensor{{1, 1}, {1.0f}}}};
  push(g);
  BOOST_REQUIRE(apply(1, 1));
  // v = 0.9 [2, 3] + [1, 1] = [2.8, 3.7]; w -= 0.5 v.
  p = pull();
  BOOST_TEST(value_of(p, "layer/w", 0) == -2.4f, tt::tolerance(1e-5f));
  BOOST_TEST(value_of(p, "layer/w", 1) == -3.35f, tt::tolerance(1e-5f));
  // Row 0: v = 1, 3 - 0.5. Row 1 untouched: neither it nor its velocity
  // moves (TF's sparse apply).
  BOOST_TEST(value_of(p, "v_sparse", 0) == 2.5f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v_sparse", 1) == 3.9f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(kfac_preconditions_its_layers_and_moves_tables_first_order) {
  // A dense layer fc (weight [1, 1], bias [1]) under K-FAC beside a sparse
  // table: the table takes momentum SGD with K-FAC's learning rate and
  // momentum on its touched rows (docs/models.md), in the same apply that
  // preconditions fc, and the status names it first-order.
  ps_shard_config shard;
  shard.index = 0;
  shard.variables = {{"fc/w", tensor{{1, 1}, {1.0f}}},
                     {"fc/b", vec({0.0f})},
                     {"emb", tensor{{3, 1}, {3.0f, 4.0f, 5.0f}}}};
  shard.sparse_variables = {"emb"};
  shard.optimizer = test::optimizer_of(optimizer_kind::kfac, 0.5f);
  shard.optimizer.momentum = 0.9f;
  shard.kfac_layers = {kfac_layer{"fc", layer_kind::dense, "fc/w", "fc/b",
                                  2, 1, 1}};
  start(shard);
  layer_inverse identity;
  identity.layer = "fc";
  identity.a = tensor{{2, 2}, {1, 0, 0, 1}};
  identity.g = tensor{{1, 1}, {1}};
  auto installed = ask<caf::ok_atom>(inverse_atom::value,
                                     inverse_set{0, {identity}, {}, 0});
  BOOST_REQUIRE_MESSAGE(installed, test::why(installed));
  auto grads = [](int64_t step, std::vector<int64_t> rows, float value) {
    gradient_push p;
    p.local_step = step;
    p.dense = {{"fc/w", tensor{{1, 1}, {0.1f}}}, {"fc/b", vec({0.1f})}};
    auto n = static_cast<int64_t>(rows.size());
    p.sparse = {{"emb", std::move(rows),
                 tensor{{n, 1}, std::vector<float>(static_cast<size_t>(n),
                                                   value)}}};
    return p;
  };
  push(grads(0, {0, 2}, 1.0f));
  push(grads(0, {2}, 3.0f));
  BOOST_REQUIRE(apply(0, 2));
  // Row 0: one gradient 1 (averaged over the push that touched it), v = 1,
  // 3 - 0.5. Row 2: (1 + 3) / 2 = 2, v = 2, 5 - 1. Row 1 untouched.
  auto p = pull();
  BOOST_TEST(value_of(p, "emb", 0) == 2.5f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "emb", 1) == 4.0f);
  BOOST_TEST(value_of(p, "emb", 2) == 4.0f, tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "fc/w", 0) < 1.0f);
  // Round 2 touches row 0 only: v = 0.9 + 2 = 2.9, 2.5 - 1.45; row 2 and
  // its velocity stay (TF's sparse apply).
  push(grads(1, {0}, 2.0f));
  BOOST_REQUIRE(apply(1, 1));
  p = pull();
  BOOST_TEST(value_of(p, "emb", 0) == 1.05f, tt::tolerance(1e-5f));
  BOOST_TEST(value_of(p, "emb", 1) == 4.0f);
  BOOST_TEST(value_of(p, "emb", 2) == 4.0f, tt::tolerance(1e-6f));
  auto st = status();
  BOOST_TEST(st.preconditioned_applies == 2);
  BOOST_TEST(st.first_order_variables == std::vector<std::string>{"emb"},
             tt::per_element());
  // A K-FAC layer may still not hold a sparse variable.
  shard.kfac_layers[0].weight_name = "emb";
  auto refused = spawn_ps_shard(sys, shard);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(contains(render(refused.error()), "has a sparse variable"),
             render(refused.error()));
}

// -- refused pushes -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(an_unknown_variable_is_refused_by_name) {
  auto p = seed_push(0, 0);
  p.dense.push_back({"conv9/kernel", scalar(1)});
  auto msg = failure(try_push(p), ec::unknown_name);
  BOOST_TEST(contains(msg, "'conv9/kernel'"), msg);
  BOOST_TEST(contains(msg, "ps shard 1"), msg);
  BOOST_TEST(contains(msg, "worker 0"), msg);
  auto q = seed_push(0, 0);
  q.sparse[0].variable = "emb";
  msg = failure(try_push(q), ec::unknown_name);
  BOOST_TEST(contains(msg, "'emb'"), msg);
  require_untouched(2);
}

BOOST_AUTO_TEST_CASE(a_wrong_shape_is_refused_and_nothing_is_applied) {
  // v0 and v1 are fine, the sparse rows are not: v0 and v1 must not have
  // been accumulated either.
  auto p = seed_push(0, 0);
  p.sparse[0].rows = tensor{{1, 2}};
  auto msg = failure(try_push(p), ec::shape_mismatch);
  BOOST_TEST(contains(msg, "'v_sparse'"), msg);
  BOOST_TEST(contains(msg, "[1, 2]"), msg);
  BOOST_TEST(contains(msg, "[1, 1]"), msg);
  auto q = seed_push(0, 0);
  q.dense[1].value = vec({1, 2});
  msg = failure(try_push(q), ec::shape_mismatch);
  BOOST_TEST(contains(msg, "'v1'"), msg);
  BOOST_TEST(contains(msg, "[2]"), msg);
  // An empty tensor is not a scalar.
  auto r = seed_push(0, 0);
  r.dense[0].value = tensor{};
  failure(try_push(r), ec::shape_mismatch);
  require_untouched(3);
  auto st = status();
  BOOST_TEST(st.variables[0].refused == 1);
  BOOST_TEST(st.variables[1].refused == 1);
  BOOST_TEST(st.variables[2].refused == 1);
}

BOOST_AUTO_TEST_CASE(non_finite_gradients_are_refused) {
  auto p = seed_push(0, 0);
  p.dense[1].value[0] = std::numeric_limits<float>::quiet_NaN();
  auto msg = failure(try_push(p), ec::non_finite);
  BOOST_TEST(contains(msg, "'v1'"), msg);
  auto q = seed_push(0, 0);
  q.sparse[0].rows[0] = std::numeric_limits<float>::infinity();
  msg = failure(try_push(q), ec::non_finite);
  BOOST_TEST(contains(msg, "'v_sparse'"), msg);
  BOOST_TEST(contains(msg, "index 1 at position 0"), msg);
  require_untouched(2);
}

BOOST_AUTO_TEST_CASE(a_variable_twice_or_of_the_wrong_kind_is_refused) {
  auto p = seed_push(0, 0);
  p.dense.push_back({"v0", scalar(0.5f)});
  auto msg = failure(try_push(p), ec::bad_message);
  BOOST_TEST(contains(msg, "'v0' appears twice"), msg);
  auto q = seed_push(0, 0);
  q.sparse.push_back(q.sparse[0]);
  msg = failure(try_push(q), ec::bad_message);
  BOOST_TEST(contains(msg, "'v_sparse' appears twice"), msg);
  auto dense_for_sparse = seed_push(0, 0);
  dense_for_sparse.sparse.clear();
  dense_for_sparse.dense.push_back({"v_sparse", tensor{{2, 1}}});
  msg = failure(try_push(dense_for_sparse), ec::bad_message);
  BOOST_TEST(contains(msg, "'v_sparse' is sparse"), msg);
  auto sparse_for_dense = seed_push(0, 0);
  sparse_for_dense.dense.pop_back();
  sparse_for_dense.sparse.push_back({"v1", {}, tensor{{0}}});
  msg = failure(try_push(sparse_for_dense), ec::bad_message);
  BOOST_TEST(contains(msg, "'v1' is dense"), msg);
  require_untouched(4);
}

BOOST_AUTO_TEST_CASE(bad_sparse_indices_are_refused) {
  auto unsorted = seed_push(0, 0);
  unsorted.sparse[0] = {"v_sparse", {1, 0}, tensor{{2, 1}, {1, 1}}};
  auto msg = failure(try_push(unsorted), ec::invalid_argument);
  BOOST_TEST(contains(msg, "'v_sparse'"), msg);
  BOOST_TEST(contains(msg, "index 0 at position 1"), msg);
  BOOST_TEST(contains(msg, "strictly increasing"), msg);
  auto repeated = seed_push(0, 0);
  repeated.sparse[0] = {"v_sparse", {1, 1}, tensor{{2, 1}, {1, 1}}};
  failure(try_push(repeated), ec::invalid_argument);
  auto out_of_range = seed_push(0, 0);
  out_of_range.sparse[0] = {"v_sparse", {2}, tensor{{1, 1}, {1}}};
  msg = failure(try_push(out_of_range), ec::invalid_argument);
  BOOST_TEST(contains(msg, "out of range [0, 2)"), msg);
  auto negative = seed_push(0, 0);
  negative.sparse[0] = {"v_sparse", {-1}, tensor{{1, 1}, {1}}};
  failure(try_push(negative), ec::invalid_argument);
  require_untouched(4);
  BOOST_TEST(status().variables[2].refused == 4);
  // A refused push is refused even when it would be stale.
  set_step(3);
  failure(try_push(unsorted), ec::invalid_argument);
  BOOST_TEST(status().stale_pushes == 0);
}

BOOST_AUTO_TEST_CASE(refusals_leave_the_sums_clean) {
  auto bad = seed_push(5, 0);
  bad.dense[1].value[0] = std::numeric_limits<float>::quiet_NaN();
  failure(try_push(bad), ec::non_finite);
  push(seed_push(0, 0));
  failure(try_push(bad), ec::non_finite);
  push(seed_push(1, 0));
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->gradients == 2);
  BOOST_TEST(value_of(pull(), "v0", 0) == -0.4f, tt::tolerance(1e-6f));
  auto st = status();
  BOOST_TEST(st.accepted_pushes == 2);
  BOOST_TEST(st.refused_pushes == 2);
}

// -- apply errors and set_step ------------------------------------------------

BOOST_AUTO_TEST_CASE(apply_needs_a_positive_n_and_the_shard_step) {
  push(seed_push(0, 0));
  for (int64_t n : {0, -2}) {
    auto msg = failure(apply(0, n), ec::invalid_argument);
    BOOST_TEST(contains(msg, "ps shard 1"), msg);
    BOOST_TEST(contains(msg, "positive"), msg);
  }
  auto msg = failure(apply(3, 1), ec::invalid_argument);
  BOOST_TEST(contains(msg, "step 3"), msg);
  BOOST_TEST(contains(msg, "at step 0"), msg);
  // None of these took anything.
  auto st = status();
  BOOST_TEST(st.global_step == 0);
  BOOST_TEST(same(pull().values, seed_variables()));
  BOOST_REQUIRE(apply(0, 1));
}

BOOST_AUTO_TEST_CASE(a_norm_request_waits_for_the_round_and_takes_nothing) {
  // --clip_norm's first phase: sent before the pushes, answered with the
  // last one; the averages stay for the apply that follows.
  auto pending = self->request(ps, 10s, norm_atom::value, int64_t{0},
                               int64_t{2});
  push(seed_push(0, 0));
  BOOST_TEST(push(seed_push(1, 0)).accepted);
  auto part = answer<norm_part>(pending);
  BOOST_REQUIRE_MESSAGE(part, test::why(part));
  BOOST_TEST(part->shard == 1);
  BOOST_TEST(part->global_step == 0);
  // Averages v0 0.2, v1 1.0, v_sparse's row 1 0.2 (row 0 untouched).
  float v0 = (0.1f + 0.3f) / 2, v1 = (0.9f + 1.1f) / 2;
  BOOST_TEST(part->sum_of_squares == double{v0} * v0 + double{v1} * v1
                                       + double{v0} * v0,
             tt::tolerance(1e-12));
  BOOST_TEST(status().global_step == 0);
  // Asked again, the same answer: nothing was taken.
  auto again = ask<norm_part>(norm_atom::value, int64_t{0}, int64_t{2});
  BOOST_REQUIRE_MESSAGE(again, test::why(again));
  BOOST_TEST(again->sum_of_squares == part->sum_of_squares);
  // The apply with a factor moves every variable by that share of the
  // plain step.
  auto done = ask<applied>(apply_atom::value, int64_t{0}, int64_t{2},
                           gradient_scale{0.25f});
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->global_step == 1);
  auto p = pull();
  BOOST_TEST(value_of(p, "v0", 0) == 0 - 0.25f * v0 * 2.0f,
             tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v1", 0) == 1 - 0.25f * v1 * 2.0f,
             tt::tolerance(1e-6f));
  BOOST_TEST(value_of(p, "v_sparse", 0) == 3.0f);
  BOOST_TEST(value_of(p, "v_sparse", 1) == 4 - 0.25f * v0 * 2.0f,
             tt::tolerance(1e-6f));
  // The next plain apply is unscaled again.
  push(seed_push(0, 1));
  push(seed_push(1, 1));
  BOOST_REQUIRE(apply(1, 2));
  BOOST_TEST(value_of(pull(), "v1", 0)
               == 1 - 0.25f * v1 * 2.0f - v1 * 2.0f,
             tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(a_bad_clip_factor_or_norm_request_is_refused) {
  push(seed_push(0, 0));
  for (float f : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    auto msg = failure(ask<applied>(apply_atom::value, int64_t{0},
                                    int64_t{1}, gradient_scale{f}),
                       ec::invalid_argument);
    BOOST_TEST(contains(msg, "clip factor"), msg);
  }
  BOOST_TEST(status().global_step == 0);
  auto msg = failure(ask<norm_part>(norm_atom::value, int64_t{3}, int64_t{1}),
                     ec::invalid_argument);
  BOOST_TEST(contains(msg, "norm for step 3, but the shard is at step 0"),
             msg);
  msg = failure(ask<norm_part>(norm_atom::value, int64_t{0}, int64_t{0}),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "positive number of gradients"), msg);
  // A norm still waiting holds off an apply, and set_step abandons it.
  auto waiting = self->request(ps, 10s, norm_atom::value, int64_t{0},
                               int64_t{2});
  msg = failure(apply(0, 2), ec::invalid_argument);
  BOOST_TEST(contains(msg, "norm for step 0 is still pending"), msg);
  set_step(4);
  auto part = answer<norm_part>(waiting);
  msg = failure(part, ec::invalid_argument);
  BOOST_TEST(contains(msg, "the norm for step 0 (n = 2) was abandoned"), msg);
}

BOOST_AUTO_TEST_CASE(a_second_apply_while_one_is_pending_is_an_error) {
  auto first = self->request(ps, 10s, apply_atom::value, int64_t{0},
                             int64_t{1});
  auto msg = failure(apply(0, 1), ec::invalid_argument);
  BOOST_TEST(contains(msg, "pending"), msg);
  // The first one is still alive and completes with the next push.
  push(seed_push(0, 0));
  auto done = answer<applied>(first);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->global_step == 1);
}

BOOST_AUTO_TEST_CASE(set_step_makes_older_pushes_stale_and_fails_the_apply) {
  push(seed_push(0, 0));
  auto pending = self->request(ps, 10s, apply_atom::value, int64_t{0},
                               int64_t{2});
  set_step(5);
  auto done = answer<applied>(pending);
  auto msg = failure(done, ec::invalid_argument);
  BOOST_TEST(contains(msg, "abandoned"), msg);
  BOOST_TEST(contains(msg, "set to 5"), msg);
  auto late = push(seed_push(1, 4));
  BOOST_TEST(!late.accepted);
  BOOST_TEST(late.global_step == 5);
  BOOST_TEST(push(seed_push(1, 5)).accepted);
  auto st = status();
  BOOST_TEST(st.global_step == 5);
  for (const auto& v : st.variables)
    BOOST_TEST(v.global_step == 5, v.variable);
  BOOST_TEST(st.stale_pushes == 1);
  // As TF, set_step keeps the partial sum: the step-0 gradient was fresh
  // when it came and is averaged in.
  failure(apply(0, 2), ec::invalid_argument);
  auto now = apply(5, 2);
  BOOST_REQUIRE_MESSAGE(now, test::why(now));
  BOOST_TEST(now->global_step == 6);
  BOOST_TEST(value_of(pull(), "v0", 0) == -0.4f, tt::tolerance(1e-6f));
  // A negative step is refused and changes nothing.
  auto bad = ask<caf::ok_atom>(set_step_atom::value, int64_t{-1});
  failure(bad, ec::invalid_argument);
  BOOST_TEST(status().global_step == 6);
}

BOOST_AUTO_TEST_CASE(a_shard_that_stops_fails_its_pending_apply) {
  auto pending = self->request(ps, 10s, apply_atom::value, int64_t{0},
                               int64_t{1});
  // Makes sure the shard holds the apply before it is told to stop.
  status();
  self->send_exit(ps, caf::exit_reason::user_shutdown);
  auto done = answer<applied>(pending);
  auto msg = failure(done, ec::peer_down);
  BOOST_TEST(contains(msg, "ps shard 1"), msg);
}

BOOST_AUTO_TEST_CASE(a_shard_without_variables_just_counts_steps) {
  ps_shard_config empty;
  empty.index = 4;
  start(empty);
  gradient_push nothing;
  BOOST_TEST(push(nothing).accepted);
  auto done = apply(0, 2);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  BOOST_TEST(done->shard == 4);
  BOOST_TEST(done->global_step == 1);
  BOOST_TEST(done->gradients == 0);
  BOOST_TEST(!push(nothing).accepted);
  failure(try_push(seed_push(0, 1)), ec::unknown_name);
  set_step(7);
  auto p = pull();
  BOOST_TEST(p.global_step == 7);
  BOOST_TEST(p.values.empty());
  BOOST_REQUIRE(apply(7, 1));
  auto st = status();
  BOOST_TEST(st.global_step == 8);
  BOOST_TEST(st.accepted_pushes == 1);
  BOOST_TEST(st.stale_pushes == 1);
  BOOST_TEST(st.refused_pushes == 1);
  BOOST_TEST(st.variables.empty());
}

BOOST_AUTO_TEST_SUITE_END()

// -- configuration --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(invalid_configs_are_refused_by_name) {
  program_config pcfg;
  caf::actor_system sys{pcfg};
  // The seeds' config changed by `change` must be refused naming `needle`.
  auto expect = [&](void (*change)(ps_shard_config&),
                    const std::string& needle) {
    auto shard = seed_config();
    change(shard);
    auto err = shard.validate();
    BOOST_REQUIRE_MESSAGE(err, "expected an error for " << needle);
    BOOST_TEST(static_cast<int>(err.code())
               == static_cast<int>(ec::invalid_config), render(err));
    BOOST_TEST(contains(render(err), needle), render(err));
    auto spawned = spawn_ps_shard(sys, std::move(shard));
    BOOST_TEST(!spawned);
  };
  BOOST_TEST(!seed_config().validate());
  expect([](ps_shard_config& x) { x.variables.push_back({"v0", scalar(2)}); },
         "'v0' appears twice");
  expect([](ps_shard_config& x) { x.variables[1].name.clear(); },
         "variable #1 has an empty name");
  expect(
    [](ps_shard_config& x) {
      x.variables[2].value[1] = std::numeric_limits<float>::infinity();
    },
    "'v_sparse' holds NaN or Inf");
  expect([](ps_shard_config& x) { x.sparse_variables.push_back("embedding"); },
         "sparse variable 'embedding' is not among");
  expect([](ps_shard_config& x) { x.sparse_variables.push_back("v0"); },
         "sparse variable 'v0' needs rank >= 1");
  expect([](ps_shard_config& x) { x.sparse_variables.push_back("v_sparse"); },
         "'v_sparse' is listed twice");
  expect([](ps_shard_config& x) { x.unaveraged_variables.push_back("nope"); },
         "unaveraged variable 'nope' is not among");
  expect([](ps_shard_config& x) { x.optimizer.learning_rate = -1; },
         "learning_rate");
  expect([](ps_shard_config& x) { x.index = -1; },
         "index");
  auto ok = spawn_ps_shard(sys, seed_config());
  BOOST_REQUIRE_MESSAGE(ok, test::why(ok));
  caf::anon_send_exit(*ok, caf::exit_reason::user_shutdown);
}

namespace {

/// A shard of `variables` under plain SGD with learning rate 1.
ps_shard_config sgd_shard(parameter_set variables) {
  ps_shard_config sc;
  sc.optimizer = test::optimizer_of(optimizer_kind::sgd, 1.0f);
  sc.variables = std::move(variables);
  return sc;
}

/// A dense push of `grads` by `worker` at `local_step`.
gradient_push dense_push(parameter_set grads, int32_t worker = 0,
                         int64_t local_step = 0) {
  gradient_push p;
  p.worker = worker;
  p.local_step = local_step;
  p.dense = std::move(grads);
  return p;
}

} // namespace

// -- moving averages and pushes of some variables ---------------------------

BOOST_FIXTURE_TEST_CASE(every_apply_moves_the_moving_averages, fixture) {
  auto sc = sgd_shard({{"w", tensor{{2}, {1.0f, 2.0f}}}});
  sc.moving_average_decay = 0.75f;
  start(sc);
  BOOST_TEST(pull_averages().values.at(0).value[1] == 2.0f);
  push(dense_push({{"w", tensor{{2}, {1.0f, 1.0f}}}}));
  auto done = apply(0, 1);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  // w is now {0, 1}; with decay 0.75 the shadow moved a quarter of the way.
  auto avg = pull_averages().values.at(0).value;
  BOOST_TEST(std::abs(avg[0] - 0.75f) < 1e-6);
  BOOST_TEST(std::abs(avg[1] - 1.75f) < 1e-6);
  // A snapshot of the step holds the averages of its apply, and a restore
  // brings them back with the variables.
  auto snap = ask<shard_snapshot>(checkpoint_atom::value);
  BOOST_REQUIRE_MESSAGE(snap, test::why(snap));
  push(dense_push({{"w", tensor{{2}, {1.0f, 1.0f}}}}, 0, 1));
  BOOST_REQUIRE(apply(1, 1));
  BOOST_TEST(std::abs(pull_averages().values.at(0).value[0] - 0.3125f) < 1e-6);
  auto back = ask<caf::ok_atom>(restore_atom::value, *snap);
  BOOST_REQUIRE_MESSAGE(back, test::why(back));
  BOOST_TEST(std::abs(pull_averages().values.at(0).value[0] - 0.75f) < 1e-6);
}

BOOST_FIXTURE_TEST_CASE(without_a_decay_the_averages_stay_at_the_start,
                        fixture) {
  start(sgd_shard({{"w", tensor{{2}, {1.0f, 2.0f}}}}));
  push(dense_push({{"w", tensor{{2}, {1.0f, 1.0f}}}}));
  BOOST_REQUIRE(apply(0, 1));
  BOOST_TEST(pull_averages().values.at(0).value[0] == 1.0f);
  for (float decay : {1.0f, 1.5f, -0.25f}) {
    auto sc = sgd_shard({{"w", tensor{{2}, {1.0f, 2.0f}}}});
    sc.moving_average_decay = decay;
    auto refused = spawn_ps_shard(sys, sc);
    check_error(refused, ec::invalid_config,
                {"moving-average decay must be in [0, 1)"});
  }
}

BOOST_FIXTURE_TEST_CASE(only_the_variables_to_average_keep_averages,
                        fixture) {
  // TF's ExponentialMovingAverage over variables_to_average: "b" is left
  // out, so its average entry follows its current value.
  auto sc = sgd_shard({{"w", tensor{{2}, {1.0f, 2.0f}}},
                       {"b", tensor{{1}, std::vector<float>{4.0f}}}});
  sc.unaveraged_variables = {"b"};
  sc.moving_average_decay = 0.75f;
  start(sc);
  push(dense_push({{"w", tensor{{2}, {1.0f, 1.0f}}},
                   {"b", tensor{{1}, std::vector<float>{2.0f}}}}));
  auto done = apply(0, 1);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  auto out = pull_averages();
  BOOST_REQUIRE_EQUAL(out.values.size(), 2u);
  // w = {0, 1}: its shadow moves a quarter of the way from {1, 2}.
  BOOST_TEST(std::abs(out.values[0].value[0] - 0.75f) < 1e-6);
  BOOST_TEST(std::abs(out.values[0].value[1] - 1.75f) < 1e-6);
  // b = 4 - 2 = 2, taken as it is (an average would be 3.5).
  BOOST_TEST(out.values[1].value[0] == 2.0f);
}

BOOST_FIXTURE_TEST_CASE(a_push_lacking_a_gradient_counts_for_the_ones_it_has,
                        fixture) {
  // TF's grad=None: worker 1's push has no gradient for b and neither push
  // one for c. The apply of 2 goes ahead with the two pushes instead of
  // waiting for b's second gradient: w averages two, b the one it got, c
  // stays as it is, and every accumulator moves on to the next step.
  start(sgd_shard({{"w", tensor{{2}, {1.0f, 2.0f}}},
                   {"b", tensor{{1}, std::vector<float>{4.0f}}},
                   {"c", tensor{{1}, std::vector<float>{7.0f}}}}));
  auto apply_two = [&](int64_t step) {
    auto out = apply(step, 2);
    BOOST_REQUIRE_MESSAGE(out, test::why(out));
    return *out;
  };
  BOOST_TEST(push(dense_push({{"w", tensor{{2}, {1.0f, 3.0f}}},
                              {"b", tensor{{1}, std::vector<float>{2.0f}}}},
                             0, 0))
               .accepted);
  BOOST_TEST(
    push(dense_push({{"w", tensor{{2}, {3.0f, 1.0f}}}}, 1, 0)).accepted);
  auto first = apply_two(0);
  BOOST_TEST(first.global_step == 1);
  auto v = pull().values;
  BOOST_REQUIRE_EQUAL(v.size(), 3u);
  BOOST_TEST(v[0].value[0] == -1.0f); // 1 - (1 + 3) / 2
  BOOST_TEST(v[0].value[1] == 0.0f);  // 2 - (3 + 1) / 2
  BOOST_TEST(v[1].value[0] == 2.0f);  // 4 - 2 / 1
  BOOST_TEST(v[2].value[0] == 7.0f);  // no gradient: unchanged
  // Step 1 with every gradient: all three accumulators are at step 1.
  parameter_set full = {{"w", tensor{{2}, {1.0f, 1.0f}}},
                        {"b", tensor{{1}, std::vector<float>{1.0f}}},
                        {"c", tensor{{1}, std::vector<float>{1.0f}}}};
  BOOST_TEST(push(dense_push(full, 0, 1)).accepted);
  BOOST_TEST(push(dense_push(full, 1, 1)).accepted);
  BOOST_TEST(apply_two(1).global_step == 2);
  v = pull().values;
  BOOST_TEST(v[2].value[0] == 6.0f);
  // A stale push (step 0) neither counts nor moves anything.
  BOOST_TEST(!push(dense_push(full, 0, 0)).accepted);
}

// -- row pulls (messages/row_pull.hpp) -----------------------------------------

namespace {

/// A shard with an embedding table "emb" [5, 2] (row r holds 10r, 10r + 1)
/// beside the dense "w" [2] and "b" [1].
ps_shard_config table_shard() {
  ps_shard_config cfg;
  cfg.index = 2;
  cfg.variables = {
    {"w", tensor{{2}, {0.5f, -0.5f}}},
    {"emb", tensor{{5, 2}, {0, 1, 10, 11, 20, 21, 30, 31, 40, 41}}},
    {"b", tensor{{1}, std::vector<float>{7.0f}}}};
  cfg.sparse_variables = {"emb"};
  cfg.optimizer = test::optimizer_of(optimizer_kind::sgd, 1.0f);
  return cfg;
}

/// A row pull of `rows` of "emb" for step 0 (answered at once).
std::vector<row_request> emb_rows(std::vector<int64_t> rows) {
  return {row_request{"emb", std::move(rows)}};
}

const named_tensor* named(const parameter_set& xs, const std::string& name) {
  for (const auto& x : xs)
    if (x.name == name)
      return &x;
  return nullptr;
}

} // namespace

BOOST_FIXTURE_TEST_CASE(a_row_pull_returns_exactly_those_rows_and_dense_whole, fixture) {
  start(table_shard());
  auto p = ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                             emb_rows({1, 4}));
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  BOOST_TEST(p->has_values);
  BOOST_TEST(p->shard == 2);
  // The table comes as its rows, not among the whole variables.
  BOOST_TEST(named(p->values, "emb") == nullptr);
  BOOST_REQUIRE_EQUAL(p->rows.size(), 1u);
  const auto& r = p->rows[0];
  BOOST_TEST(r.variable == "emb");
  BOOST_TEST(r.indices == (std::vector<int64_t>{1, 4}),
             tt::per_element());
  BOOST_TEST(r.rows.shape() == (tensor_shape{2, 2}), tt::per_element());
  BOOST_TEST(r.rows[0] == 10.0f);
  BOOST_TEST(r.rows[1] == 11.0f);
  BOOST_TEST(r.rows[2] == 40.0f);
  BOOST_TEST(r.rows[3] == 41.0f);
  // The dense variables of the same pull come whole.
  BOOST_REQUIRE_EQUAL(p->values.size(), 2u);
  auto cfg = table_shard();
  BOOST_REQUIRE(named(p->values, "w") && named(p->values, "b"));
  BOOST_TEST((named(p->values, "w")->value == cfg.variables[0].value));
  BOOST_TEST((named(p->values, "b")->value == cfg.variables[2].value));
  // Sent: 2 ids and 4 floats of rows, 3 floats of dense values.
  BOOST_TEST(status().sent.bytes == 2 * 8 + 4 * 4 + 3 * 4);
}

BOOST_FIXTURE_TEST_CASE(a_pull_of_no_rows_sends_the_dense_variables_only, fixture) {
  start(table_shard());
  auto p = ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                             emb_rows({}));
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  BOOST_REQUIRE_EQUAL(p->rows.size(), 1u);
  BOOST_TEST(p->rows[0].indices.empty());
  BOOST_TEST(p->rows[0].rows.shape() == (tensor_shape{0, 2}),
             tt::per_element());
  BOOST_TEST(p->values.size() == 2u);
  BOOST_TEST(named(p->values, "emb") == nullptr);
  // No request at all: every variable whole, as a plain pull.
  auto whole = ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                                 std::vector<row_request>{});
  BOOST_REQUIRE_MESSAGE(whole, test::why(whole));
  BOOST_TEST(whole->rows.empty());
  BOOST_TEST(same(whole->values, table_shard().variables));
}

BOOST_FIXTURE_TEST_CASE(a_row_id_out_of_range_is_refused_naming_it, fixture) {
  start(table_shard());
  auto msg = failure(ask<shard_params>(pull_atom::value, int64_t{0},
                                       int64_t{0}, emb_rows({2, 5})),
                     ec::invalid_argument);
  BOOST_TEST(contains(msg, "ps shard 2"), msg);
  BOOST_TEST(contains(msg, "'emb'"), msg);
  BOOST_TEST(contains(msg, "row id 5"), msg);
  BOOST_TEST(contains(msg, "the table has 5 rows"), msg);
  msg = failure(ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                                  emb_rows({-1})),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "row id -1"), msg);
  msg = failure(ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                                  emb_rows({3, 1})),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "strictly increasing"), msg);
  // A dense variable, or one the shard lacks, is not pulled by rows.
  msg = failure(ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                                  std::vector<row_request>{{"w", {0}}}),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "'w' is dense"), msg);
  msg = failure(ask<shard_params>(pull_atom::value, int64_t{0}, int64_t{0},
                                  std::vector<row_request>{{"nope", {0}}}),
                ec::unknown_name);
  BOOST_TEST(contains(msg, "'nope'"), msg);
  // A waiting pull is checked on arrival, not when its step comes.
  msg = failure(ask<shard_params>(pull_atom::value, int64_t{3},
                                  int64_t{60000}, emb_rows({9})),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "row id 9"), msg);
  // Nothing crashed: the shard answers on.
  BOOST_TEST(same(pull().values, table_shard().variables));
}

BOOST_FIXTURE_TEST_CASE(a_cancelled_row_pull_gets_its_rows_at_the_shard_s_step,
                        fixture) {
  // The worker's token is for the step it holds (step 0): it cancels its
  // pull for step 1. A plain pull is then answered without values; a row
  // pull with its rows at step 0 and nothing else, since the worker's
  // copies of those rows may be older than its other values.
  start(table_shard());
  auto waiting = self->request(ps, 10s, pull_atom::value, int64_t{1},
                               int64_t{60000}, emb_rows({2}));
  self->send(ps, pull_atom::value, cancel_atom::value);
  shard_params got;
  waiting.receive([&](shard_params& p) { got = std::move(p); },
                  [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_TEST(got.has_values);
  BOOST_TEST(got.global_step == 0);
  BOOST_TEST(got.values.empty());
  BOOST_REQUIRE_EQUAL(got.rows.size(), 1u);
  BOOST_TEST(got.rows[0].indices == (std::vector<int64_t>{2}),
             tt::per_element());
  BOOST_TEST(got.rows[0].rows[0] == 20.0f);
  BOOST_TEST(got.rows[0].rows[1] == 21.0f);
  auto plain = self->request(ps, 10s, pull_atom::value, int64_t{1},
                             int64_t{60000});
  self->send(ps, pull_atom::value, cancel_atom::value);
  plain.receive([&](shard_params& p) { got = std::move(p); },
                [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_TEST(!got.has_values);
  BOOST_TEST(got.rows.empty());
}

BOOST_FIXTURE_TEST_CASE(a_waiting_row_pull_gets_the_rows_of_its_step, fixture) {
  start(table_shard());
  // Asks for step 1 before it exists; answered after the apply with row 3
  // as updated (lr 1: 30 - 2, 31 - 4).
  auto waiting = self->request(ps, 10s, pull_atom::value, int64_t{1},
                               int64_t{60000}, emb_rows({0, 3}));
  gradient_push g;
  g.worker = 0;
  g.local_step = 0;
  g.sparse = {{"emb", {3}, tensor{{1, 2}, {2.0f, 4.0f}}}};
  BOOST_TEST(push(g).accepted);
  auto done = apply(0, 1);
  BOOST_REQUIRE_MESSAGE(done, test::why(done));
  shard_params got;
  waiting.receive([&](shard_params& p) { got = std::move(p); },
                  [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_TEST(got.global_step == 1);
  BOOST_REQUIRE_EQUAL(got.rows.size(), 1u);
  BOOST_TEST(got.rows[0].indices == (std::vector<int64_t>{0, 3}),
             tt::per_element());
  BOOST_TEST(got.rows[0].rows[0] == 0.0f);
  BOOST_TEST(got.rows[0].rows[2] == 28.0f);
  BOOST_TEST(got.rows[0].rows[3] == 27.0f);
}
