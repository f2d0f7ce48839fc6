#define BOOST_TEST_MODULE device_actor
#include <boost/test/unit_test.hpp>

#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/device_actor.hpp"
#include "messages/row_pull.hpp"
#include "runtime/model_builder.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/base/error.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/helpers.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

struct fixture : test::actor_fixture {
  device_actor dev = keep(spawn_device(sys, device_config{"cpu", 2}));

  /// The device's answer to a request, or the error it produced.
  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    return actor_fixture::ask<T>(dev, std::forward<Ts>(xs)...);
  }

  model_info load(model_spec spec = {}) {
    auto info = ask<model_info>(load_model_atom::value, spec, uint64_t{7});
    BOOST_REQUIRE_MESSAGE(info, test::why(info));
    return *info;
  }

  batch fake_batch(int64_t n) {
    static auto data = make_fake_dataset(256, 3);
    batch b;
    slice(data, 0, n, b);
    return b;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(device_actor_tests, fixture)

BOOST_AUTO_TEST_CASE(describes_its_backend) {
  auto info = ask<device_info>(info_atom::value);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->backend == "cpu");
  BOOST_TEST(info->threads == 2);
}

BOOST_AUTO_TEST_CASE(requests_before_a_model_are_errors) {
  auto res = ask<step_result>(grads_atom::value, fake_batch(4));
  BOOST_REQUIRE(!res);
  BOOST_TEST(render(res.error()).find("no model loaded") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(loads_a_model_and_serves_its_parameters) {
  auto info = load();
  BOOST_TEST(info.parameter_count == 14682);
  auto params = ask<parameter_set>(params_atom::value);
  BOOST_REQUIRE(params);
  BOOST_TEST(params->size() == 6u);
  BOOST_TEST((*params)[0].value == info.initial[0].value);
  // Write modified parameters, read them back.
  (*params)[5].value[3] = 0.25f;
  BOOST_REQUIRE(ask<caf::ok_atom>(params_atom::value, *params));
  auto again = ask<parameter_set>(params_atom::value);
  BOOST_TEST((*again)[5].value[3] == 0.25f);
}

BOOST_AUTO_TEST_CASE(refuses_parameters_of_the_wrong_shape) {
  auto info = load();
  auto params = info.initial;
  params[4].value = tensor{10, 784};
  auto res = ask<caf::ok_atom>(params_atom::value, params);
  BOOST_REQUIRE(!res);
  auto text = render(res.error());
  BOOST_TEST(text.find("fc4/weights") != std::string::npos);
  BOOST_TEST(text.find("[10, 784]") != std::string::npos);
  params = info.initial;
  params[0].value[0] = NAN;
  BOOST_TEST(!ask<caf::ok_atom>(params_atom::value, params));
  // Nothing was applied.
  auto now = ask<parameter_set>(params_atom::value);
  BOOST_TEST((*now)[0].value == info.initial[0].value);
}

BOOST_AUTO_TEST_CASE(a_step_with_table_rows_equals_one_with_every_variable) {
  // A row-pulling worker sends its device the rows pulled since its last
  // step instead of the table (messages/row_pull.hpp): the replica's other
  // rows stay as they were, and the step computes what it would at the
  // whole parameters.
  auto desc = model_builder{"bags", {3}}.embedding_bag(6, 2).dense(2).build();
  BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
  auto info = load(described_spec(*desc));
  auto params = info.initial;
  BOOST_REQUIRE_EQUAL(params.size(), 3u);
  BOOST_REQUIRE(params[0].name == "emb0/embeddings");
  for (int64_t i = 0; i < params[0].value.size(); ++i)
    params[0].value[i] = 0.1f * static_cast<float>(i);
  batch b;
  b.images = tensor{{2, 1, 1, 3}, {1, 4, -1, 4, 5, 0}};
  b.labels = {0, 1};
  // The whole table first, then rows 4 and 5 changed and sent as rows.
  auto first = ask<step_result>(grads_atom::value, params, b);
  BOOST_REQUIRE_MESSAGE(first, test::why(first));
  params[0].value[8] = 2.5f;
  params[0].value[11] = -1.5f;
  auto rows = gather_rows(params[0], {4, 5});
  BOOST_REQUIRE_MESSAGE(rows, test::why(rows));
  parameter_set others{params[1], params[2]};
  auto by_rows = ask<step_result>(grads_atom::value, others,
                                  std::vector<sparse_update>{*rows}, b);
  BOOST_REQUIRE_MESSAGE(by_rows, test::why(by_rows));
  auto whole = ask<step_result>(grads_atom::value, params, b);
  BOOST_REQUIRE_MESSAGE(whole, test::why(whole));
  BOOST_TEST(by_rows->loss == whole->loss);
  BOOST_TEST(test::same(by_rows->gradients, whole->gradients));
  BOOST_REQUIRE_EQUAL(by_rows->sparse_gradients.size(), 1u);
  BOOST_TEST((by_rows->sparse_gradients[0].rows
              == whole->sparse_gradients[0].rows));
  // Rows of a variable the model lacks, or out of its table: refused.
  auto bad = ask<step_result>(
    grads_atom::value, others,
    std::vector<sparse_update>{{"emb0/embeddings", {6}, tensor{{1, 2}}}}, b);
  auto msg = test::failure(bad, ec::invalid_argument);
  BOOST_TEST(test::contains(msg, "row id 6"), msg);
}

BOOST_AUTO_TEST_CASE(computes_gradients_and_evaluates) {
  load();
  auto b = fake_batch(16);
  auto res = ask<step_result>(grads_atom::value, b);
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  BOOST_TEST(res->count == 16);
  BOOST_TEST(std::isfinite(res->loss));
  BOOST_TEST(res->gradients.size() == 6u);
  auto eval = ask<eval_result>(eval_atom::value, b);
  BOOST_REQUIRE(eval);
  BOOST_TEST(eval->count == 16);
  BOOST_TEST(std::abs(eval->mean_loss() - res->loss) < 1e-4);
}

BOOST_AUTO_TEST_CASE(trains_only_with_an_optimizer_and_then_improves) {
  load();
  auto b = fake_batch(64);
  BOOST_TEST(!ask<step_result>(train_atom::value, b));
  auto opt = test::optimizer_of(optimizer_kind::adam, 1e-3f);
  BOOST_REQUIRE(ask<caf::ok_atom>(optimizer_atom::value, opt));
  auto first = ask<step_result>(train_atom::value, b);
  BOOST_REQUIRE(first);
  BOOST_TEST(first->gradients.empty());
  float last = first->loss;
  for (int i = 0; i < 20; ++i)
    last = ask<step_result>(train_atom::value, b)->loss;
  BOOST_TEST(last < first->loss);
  opt.learning_rate = -1;
  BOOST_TEST(!ask<caf::ok_atom>(optimizer_atom::value, opt));
}

BOOST_AUTO_TEST_CASE(runs_raw_gemm_requests) {
  tensor a{{2, 3}, {1, 2, 3, 4, 5, 6}};
  tensor b{{2, 2}, {1, 0, 0, 1}};
  auto c = ask<tensor>(gemm_atom::value, a, true, b, false);
  BOOST_REQUIRE_MESSAGE(c, test::why(c));
  BOOST_TEST(c->shape() == (tensor_shape{3, 2}));
  BOOST_TEST((*c)[0] == 1.0f);
  BOOST_TEST((*c)[1] == 4.0f);
  auto bad = ask<tensor>(gemm_atom::value, a, false, b, false);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("[2, 3]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(keeps_serving_after_errors_in_order) {
  load();
  // A burst of bad and good requests; every one is answered.
  auto good = fake_batch(8);
  batch bad = good;
  bad.labels.pop_back();
  for (int i = 0; i < 5; ++i) {
    BOOST_TEST(!ask<eval_result>(eval_atom::value, bad));
    BOOST_TEST(ask<eval_result>(eval_atom::value, good));
  }
}

BOOST_AUTO_TEST_CASE(the_delay_device_answers_zeros_or_random_gradients) {
  // A benchmark's payload: zeros by default, with :random values of the
  // model's shapes, none of them zero, so that no part of the way can
  // send less for them.
  for (std::string spec : {"bench_delay:0", "bench_delay:0:random",
                           "bench_delay:0:pareto:2:random"}) {
    bool random = spec.find(":random") != std::string::npos;
    auto delay = keep(spawn_device(sys, device_config{spec, 1}));
    auto info = actor_fixture::ask<model_info>(delay, load_model_atom::value,
                                               model_spec{}, uint64_t{7});
    BOOST_REQUIRE_MESSAGE(info, spec << ": " << test::why(info));
    auto res = actor_fixture::ask<step_result>(delay, grads_atom::value,
                                               fake_batch(4));
    BOOST_REQUIRE_MESSAGE(res, spec << ": " << test::why(res));
    BOOST_REQUIRE_EQUAL(res->gradients.size(), info->initial.size());
    int64_t zeros = 0;
    int64_t values = 0;
    for (size_t i = 0; i < res->gradients.size(); ++i) {
      const auto& g = res->gradients[i].value;
      BOOST_TEST(g.shape() == info->initial[i].value.shape(), spec);
      values += g.size();
      for (auto v : g.values())
        zeros += v == 0.0f ? 1 : 0;
    }
    BOOST_TEST(values == 14682);
    BOOST_TEST(zeros == (random ? 0 : values), spec << ": " << zeros
                                                   << " zeros of " << values);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(unknown_backends_and_bad_configs_are_refused) {
  program_config cfg;
  caf::actor_system sys{cfg};
  auto unknown = spawn_device(sys, device_config{"tpu", 1});
  BOOST_REQUIRE(!unknown);
  BOOST_TEST(render(unknown.error()).find("tpu") != std::string::npos);
  BOOST_TEST(!spawn_device(sys, device_config{"cpu", 0}));
}
