#define BOOST_TEST_MODULE tower_combine
#include <boost/test/unit_test.hpp>

// How the tower device splits a batch and combines its towers' answers,
// without actors (actors/tower_split.hpp, actors/tower_combine.hpp); the
// actor itself is tests/actors/tower_device.cpp's.

#include <string>
#include <vector>

#include "actors/tower_combine.hpp"
#include "actors/tower_split.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// n examples of 2 values each, example i holding i and -i.
batch numbered_batch(int64_t n) {
  batch b;
  b.images = tensor(tensor_shape{n, 2});
  for (int64_t i = 0; i < n; ++i) {
    b.images[2 * i] = static_cast<float>(i);
    b.images[2 * i + 1] = static_cast<float>(-i);
    b.labels.push_back(static_cast<int32_t>(i));
  }
  return b;
}

/// A tower's answer for `count` examples: loss v, one dense gradient
/// (v, -v), and rows `index` and 5 of "emb" with v in every entry.
step_result answer(int64_t count, float v, int64_t index) {
  step_result r;
  r.count = count;
  r.correct = count;
  r.loss = v;
  r.compute_s = v;
  r.gradients = {named_tensor{"w", tensor{{2}, {v, -v}}}};
  r.sparse_gradients = {
    sparse_update{"emb", {index, 5}, tensor{{2, 2}, {v, v, v, v}}}};
  return r;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_plan_leaves_out_towers_without_examples) {
  auto plan = tower::plan_split(numbered_batch(2), 4, "grads");
  BOOST_REQUIRE(plan);
  BOOST_TEST(plan->total == 2);
  BOOST_TEST((plan->towers == std::vector<size_t>{0, 1}));
  BOOST_TEST(plan->examples(0) == 1);
  BOOST_TEST(plan->examples(1) == 1);
  // An empty batch goes to tower 0 alone, which answers as one device.
  auto empty = tower::plan_split(numbered_batch(0), 3, "grads");
  BOOST_REQUIRE(empty);
  BOOST_TEST((empty->towers == std::vector<size_t>{0}));
  BOOST_TEST(empty->examples(0) == 0);
}

BOOST_AUTO_TEST_CASE(a_plan_refuses_images_that_do_not_match_the_labels) {
  auto b = numbered_batch(3);
  b.labels.pop_back();
  BOOST_TEST(contains(failure(tower::plan_split(b, 2, "eval"),
                              ec::shape_mismatch),
                      "tower device (eval): batch of 2 labels"));
}

BOOST_AUTO_TEST_CASE(batch_ranges_copy_their_examples) {
  auto b = numbered_batch(5);
  auto part = tower::batch_range(b, 2, 4);
  BOOST_TEST(part.images.shape() == (tensor_shape{2, 2}));
  BOOST_TEST(part.images[0] == 2.0f);
  BOOST_TEST(part.images[3] == -3.0f);
  BOOST_TEST((part.labels == label_vector{2, 3}));
  BOOST_TEST(part.noise_seed != b.noise_seed);
}

BOOST_AUTO_TEST_CASE(statistics_examples_are_shared_like_the_batch) {
  stats_request req;
  req.sampling.max_examples = 3;
  req.sampling.seed = 7;
  req.rows = true;
  bool skip = true;
  // 3 of 10 examples over 4 towers: 1, 1, 1, 0.
  auto first = tower::tower_request(req, 10, 4, 0, skip);
  BOOST_TEST(!skip);
  BOOST_TEST(first.sampling.max_examples == 1);
  BOOST_TEST(!first.rows);
  auto last = tower::tower_request(req, 10, 4, 3, skip);
  BOOST_TEST(skip);
  BOOST_TEST(last.sampling.max_examples == 0);
  BOOST_TEST(first.sampling.seed != last.sampling.seed);
  // All examples asked for: every tower uses all of its part.
  req.sampling.max_examples = 0;
  auto all = tower::tower_request(req, 10, 4, 2, skip);
  BOOST_TEST(!skip);
  BOOST_TEST(all.sampling.max_examples == 0);
}

BOOST_AUTO_TEST_CASE(steps_are_weighted_by_the_examples_of_each_part) {
  tower::split_plan plan{4, {0, 1}, {0, 3}, {3, 4}};
  std::vector<step_result> rs{answer(3, 1.0f, 0), answer(1, 2.0f, 1)};
  auto out = tower::combine_steps(2, "grads", plan, rs);
  BOOST_REQUIRE(out);
  BOOST_TEST(out->count == 4);
  BOOST_TEST(out->correct == 4);
  BOOST_TEST(out->loss == 1.25f);
  BOOST_TEST(out->compute_s == 2.0);
  BOOST_REQUIRE(out->gradients.size() == 1u);
  BOOST_TEST(out->gradients[0].value[0] == 1.25f);
  BOOST_TEST(out->gradients[0].value[1] == -1.25f);
  // Rows 0, 1 and 5: 5 from both towers, summed; indices ascending.
  BOOST_REQUIRE(out->sparse_gradients.size() == 1u);
  const auto& emb = out->sparse_gradients[0];
  BOOST_TEST((emb.indices == std::vector<int64_t>{0, 1, 5}));
  BOOST_TEST(emb.rows.shape() == (tensor_shape{3, 2}));
  BOOST_TEST(emb.rows[0] == 0.75f);
  BOOST_TEST(emb.rows[2] == 0.5f);
  BOOST_TEST(emb.rows[4] == 1.25f);
}

BOOST_AUTO_TEST_CASE(a_count_other_than_the_examples_sent_names_the_tower) {
  tower::split_plan plan{4, {0, 2}, {0, 2}, {2, 4}};
  std::vector<step_result> rs{answer(2, 1.0f, 0), answer(3, 1.0f, 1)};
  BOOST_TEST(contains(failure(tower::combine_steps(3, "grads", plan, rs),
                              ec::bad_message),
                      "tower device: tower 2 of 3 (grads): answered for 3 "
                      "examples, was sent 2"));
}

BOOST_AUTO_TEST_CASE(gradients_that_differ_by_name_are_refused) {
  tower::split_plan plan{2, {0, 1}, {0, 1}, {1, 2}};
  std::vector<step_result> rs{answer(1, 1.0f, 0), answer(1, 1.0f, 1)};
  rs[1].gradients[0].name = "v";
  BOOST_TEST(contains(failure(tower::combine_steps(2, "grads", plan, rs),
                              ec::bad_message),
                      "tower 1 of 2 (grads): gradient 'v'"));
}

BOOST_AUTO_TEST_CASE(statistics_are_averaged_over_the_examples) {
  std::vector<layer_stats> x{{"fc", tensor{{1, 1}, {1.0f}},
                              tensor{{1, 1}, {4.0f}}, {}, {}}};
  std::vector<layer_stats> y{{"fc", tensor{{1, 1}, {3.0f}},
                              tensor{{1, 1}, {8.0f}}, {}, {}}};
  auto out = tower::combine_stats(2, "statistics", {0, 1}, {&x, &y}, {1, 3});
  BOOST_REQUIRE(out);
  BOOST_REQUIRE(out->size() == 1u);
  BOOST_TEST((*out)[0].a[0] == 2.5f);
  BOOST_TEST((*out)[0].g[0] == 7.0f);
  // A tower that reports another layer is named.
  std::vector<layer_stats> z{{"conv", tensor{{1, 1}, {1.0f}},
                              tensor{{1, 1}, {1.0f}}, {}, {}}};
  std::vector<layer_stats> x2{{"fc", tensor{{1, 1}, {1.0f}},
                               tensor{{1, 1}, {4.0f}}, {}, {}}};
  auto bad = tower::combine_stats(2, "statistics", {0, 1}, {&x2, &z}, {1, 1});
  BOOST_TEST(contains(failure(bad, ec::bad_message),
                      "tower 1 of 2 (statistics): statistics of layer "
                      "'conv'"));
}

BOOST_AUTO_TEST_CASE(statistics_updates_sum_their_examples) {
  auto update = [](int64_t examples, float a) {
    stats_update u;
    u.worker = 2;
    u.step = 9;
    u.examples = examples;
    u.layers = {{"fc", tensor{{1, 1}, {a}}, tensor{{1, 1}, {a}}, {}, {}}};
    return u;
  };
  std::vector<stats_update> us{update(1, 1.0f), update(3, 3.0f)};
  auto out = tower::combine_stats_updates(3, "statistics", {0, 2}, us);
  BOOST_REQUIRE(out);
  BOOST_TEST(out->worker == 2);
  BOOST_TEST(out->step == 9);
  BOOST_TEST(out->examples == 4);
  BOOST_REQUIRE(out->layers.size() == 1u);
  BOOST_TEST(out->layers[0].a[0] == 2.5f);
  // A tower whose layers differ is named by its own index, not its place.
  std::vector<stats_update> bad{update(1, 1.0f), update(1, 1.0f)};
  bad[1].layers[0].layer = "conv";
  auto refused = tower::combine_stats_updates(3, "statistics", {0, 2}, bad);
  BOOST_TEST(contains(failure(refused, ec::bad_message),
                      "tower 2 of 3 (statistics)"));
}
