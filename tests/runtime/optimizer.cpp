#define BOOST_TEST_MODULE optimizer
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"
#include "runtime/gradient_clip.hpp"
#include "runtime/moving_statistic.hpp"
#include "runtime/optimizer.hpp"

using namespace syncfac;

namespace {

parameter_set one(float value) {
  return {{"w", tensor{{2}, {value, -value}}}};
}

optimizer make(optimizer_config cfg) {
  auto opt = optimizer::make(cfg, one(0));
  BOOST_REQUIRE_MESSAGE(opt, test::why(opt));
  return std::move(*opt);
}

} // namespace

BOOST_AUTO_TEST_CASE(sgd_steps_against_the_gradient) {
  auto cfg = test::optimizer_of(optimizer_kind::sgd, 0.5f);
  auto opt = make(cfg);
  auto params = one(1);
  BOOST_REQUIRE(!opt.apply(params, one(2)));
  BOOST_TEST(params[0].value[0] == 0.0f);
  BOOST_TEST(params[0].value[1] == 0.0f);
}

BOOST_AUTO_TEST_CASE(momentum_accumulates_velocity_as_tf_does) {
  auto cfg = test::optimizer_of(optimizer_kind::momentum, 0.1f);
  cfg.momentum = 0.9f;
  auto opt = make(cfg);
  auto params = one(0);
  BOOST_REQUIRE(!opt.apply(params, one(1))); // v = 1
  BOOST_REQUIRE(!opt.apply(params, one(1))); // v = 1.9
  BOOST_TEST(std::abs(params[0].value[0] - (-0.1f - 0.19f)) < 1e-6);
  BOOST_TEST(std::abs(opt.slots().first[0].value[0] - 1.9f) < 1e-6);
  BOOST_TEST(opt.slots().step == 2);
}

BOOST_AUTO_TEST_CASE(nesterov_steps_from_where_the_velocity_goes) {
  // TF's use_nesterov: v = mu v + g; theta -= lr (g + mu v).
  auto cfg = test::optimizer_of(optimizer_kind::momentum, 0.1f);
  cfg.momentum = 0.9f;
  cfg.nesterov = true;
  auto opt = make(cfg);
  auto params = one(0);
  BOOST_REQUIRE(!opt.apply(params, one(1))); // v = 1, step 1 + 0.9
  BOOST_TEST(std::abs(params[0].value[0] - (-0.19f)) < 1e-6);
  BOOST_REQUIRE(!opt.apply(params, one(1))); // v = 1.9, step 1 + 1.71
  BOOST_TEST(std::abs(params[0].value[0] - (-0.19f - 0.271f)) < 1e-6);
  BOOST_TEST(std::abs(params[0].value[1] - (0.19f + 0.271f)) < 1e-6);
  BOOST_TEST(std::abs(opt.slots().first[0].value[0] - 1.9f) < 1e-6);
  BOOST_TEST(describe(cfg).find("momentum 0.9 (nesterov)")
             != std::string::npos, describe(cfg));
}

BOOST_AUTO_TEST_CASE(nesterov_with_another_optimizer_is_refused_by_name) {
  for (auto kind : {optimizer_kind::sgd, optimizer_kind::adam,
                    optimizer_kind::kfac}) {
    auto cfg = test::optimizer_of(kind, 0.1f);
    cfg.nesterov = true;
    auto opt = optimizer::make(cfg, one(0));
    BOOST_REQUIRE(!opt);
    BOOST_TEST(test::why(opt).find("--nesterov") != std::string::npos,
               test::why(opt));
    BOOST_TEST(test::why(opt).find(to_string(kind)) != std::string::npos,
               test::why(opt));
  }
}

BOOST_AUTO_TEST_CASE(adam_first_step_is_lr_times_sign) {
  auto cfg = test::optimizer_of(optimizer_kind::adam, 0.01f);
  auto opt = make(cfg);
  auto params = one(0);
  BOOST_REQUIRE(!opt.apply(params, one(3)));
  BOOST_TEST(std::abs(params[0].value[0] + 0.01f) < 1e-6);
  BOOST_TEST(std::abs(params[0].value[1] - 0.01f) < 1e-6);
  BOOST_REQUIRE(!opt.apply(params, one(3)));
  BOOST_TEST(std::abs(params[0].value[0] + 0.02f) < 1e-6);
}

BOOST_AUTO_TEST_CASE(mismatched_or_non_finite_gradients_change_nothing) {
  auto opt = make(optimizer_config{});
  auto params = one(1);
  parameter_set wrong{{"w", tensor{{3}, {1, 2, 3}}}};
  auto err = opt.apply(params, wrong);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("[3]") != std::string::npos);
  BOOST_TEST(render(err).find("[2]") != std::string::npos);
  parameter_set renamed{{"v", tensor{{2}, {1, 2}}}};
  BOOST_TEST(render(opt.apply(params, renamed)).find("'v'") != std::string::npos);
  auto nan = one(NAN);
  BOOST_TEST(opt.apply(params, nan) == ec::non_finite);
  BOOST_TEST(params[0].value[0] == 1.0f);
  BOOST_TEST(opt.slots().step == 0);
}

BOOST_AUTO_TEST_CASE(invalid_hyperparameters_are_refused) {
  optimizer_config cfg;
  cfg.learning_rate = -1;
  BOOST_TEST(!optimizer::make(cfg, one(0)));
  cfg = optimizer_config{};
  cfg.momentum = 1.0f;
  BOOST_TEST(!optimizer::make(cfg, one(0)));
  BOOST_TEST(!parse_optimizer_kind("rmsprop"));
  BOOST_TEST(*parse_optimizer_kind("adam") == optimizer_kind::adam);
}

BOOST_AUTO_TEST_CASE(slots_restore_round_trip) {
  auto opt = make(optimizer_config{});
  auto params = one(0);
  BOOST_REQUIRE(!opt.apply(params, one(1)));
  auto saved = opt.slots();
  auto other = make(optimizer_config{});
  BOOST_REQUIRE(!other.restore(saved));
  BOOST_TEST(other.slots().step == 1);
  optimizer_slots wrong;
  wrong.first = {{"w", tensor{{5}}}};
  BOOST_TEST(other.restore(wrong));
}

BOOST_AUTO_TEST_CASE(per_variable_and_row_updates_follow_tf_sparse_apply) {
  auto cfg = test::optimizer_of(optimizer_kind::momentum, 1.0f);
  cfg.momentum = 0.5f;
  parameter_set params{{"emb", tensor{{3, 2}, {1, 1, 2, 2, 3, 3}}}};
  auto opt = optimizer::make(cfg, params);
  BOOST_REQUIRE(opt);
  opt->begin_step();
  tensor rows{{1, 2}, {1, 1}};
  BOOST_REQUIRE(!opt->update_rows(0, params[0].value, {2}, rows));
  // Only row 2 moved, and only its slot row holds velocity.
  BOOST_TEST(params[0].value[0] == 1.0f);
  BOOST_TEST(params[0].value[4] == 2.0f);
  BOOST_TEST(opt->slots().first[0].value[0] == 0.0f);
  BOOST_TEST(opt->slots().first[0].value[4] == 1.0f);
  BOOST_TEST(opt->update_rows(0, params[0].value, {3}, rows));
  BOOST_TEST(opt->update_rows(0, params[0].value, {0, 1}, rows));
  tensor dense{{3, 2}, {1, 1, 1, 1, 1, 1}};
  opt->begin_step();
  BOOST_REQUIRE(!opt->update(0, params[0].value, dense));
  BOOST_TEST(params[0].value[4] == 2.0f - 1.5f); // v = 0.5 * 1 + 1
  BOOST_TEST(opt->update(0, params[0].value, tensor{{2}, {1, 1}}));
  BOOST_TEST(opt->update(1, params[0].value, dense));
}

// -- the schedule and the decays ----------------------------------------------

namespace {

/// A weight [1, 2] and a bias [2], both at `value`.
parameter_set weight_and_bias(float value) {
  return {{"w", tensor{{1, 2}, {value, value}}},
          {"b", tensor{{2}, {value, value}}}};
}

/// An optimizer of `cfg` for a weight and a bias, and the two after its
/// first step from 2 with every gradient `grad`.
struct first_step {
  optimizer opt;
  parameter_set params;
};

first_step after_first_step(const optimizer_config& cfg, float grad) {
  auto opt = optimizer::make(cfg, weight_and_bias(0));
  BOOST_REQUIRE(opt);
  auto params = weight_and_bias(2);
  BOOST_REQUIRE(!opt->apply(params, weight_and_bias(grad)));
  return {std::move(*opt), std::move(params)};
}

} // namespace

BOOST_AUTO_TEST_CASE(the_rate_follows_the_schedule_of_the_global_step) {
  auto cfg = test::optimizer_of(optimizer_kind::sgd, 1.0f);
  cfg.schedule.kind = lr_schedule_kind::step;
  cfg.schedule.boundaries = {10};
  cfg.schedule.decay_rate = 0.5f;
  cfg.schedule.warmup_steps = 2;
  auto opt = make(cfg);
  BOOST_TEST(opt.rate() == 1.0f); // the base rate until a step is set
  opt.set_global_step(0);
  BOOST_TEST(opt.rate() == 0.5f); // warming up: 1 of 2
  opt.set_global_step(10);
  BOOST_TEST(opt.rate() == 0.5f); // past the boundary
  auto params = one(1);
  opt.set_global_step(12);
  opt.begin_step();
  BOOST_REQUIRE(!opt.update(0, params[0].value, one(2)[0].value));
  BOOST_TEST(params[0].value[0] == 0.0f); // 1 - 0.5 * 2
}

BOOST_AUTO_TEST_CASE(decoupled_weight_decay_shrinks_weights_not_biases) {
  auto cfg = test::optimizer_of(optimizer_kind::sgd, 0.5f);
  cfg.weight_decay = 0.1f;
  auto [opt, params] = after_first_step(cfg, 0);
  // w: 2 * (1 - 0.5 * 0.1) = 1.9 with a zero gradient; the bias stays.
  BOOST_TEST(std::abs(params[0].value[0] - 1.9f) < 1e-6);
  BOOST_TEST(params[1].value[0] == 2.0f);
}

BOOST_AUTO_TEST_CASE(the_l2_penalty_joins_the_gradient_of_weights) {
  auto cfg = test::optimizer_of(optimizer_kind::momentum, 0.5f);
  cfg.l2_penalty = 0.1f;
  auto [opt, params] = after_first_step(cfg, 1);
  // w: g = 1 + 0.1 * 2 = 1.2, v = 1.2, w = 2 - 0.5 * 1.2 = 1.4; the bias
  // sees only its gradient: 2 - 0.5 = 1.5. The velocity keeps the penalty.
  BOOST_TEST(std::abs(params[0].value[0] - 1.4f) < 1e-6);
  BOOST_TEST(std::abs(params[1].value[0] - 1.5f) < 1e-6);
  BOOST_TEST(std::abs(opt.slots().first[0].value[0] - 1.2f) < 1e-6);
}

BOOST_AUTO_TEST_CASE(decays_out_of_range_are_refused_by_name) {
  auto cfg = test::optimizer_of(optimizer_kind::sgd, 0.5f);
  cfg.weight_decay = 1.5f;
  auto bad = optimizer::make(cfg, one(0));
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("--weight_decay must be in [0, 1)")
             != std::string::npos);
  cfg.weight_decay = 0;
  cfg.l2_penalty = -1;
  bad = optimizer::make(cfg, one(0));
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("--l2_penalty") != std::string::npos);
}

// -- clipping by the global norm (--clip_norm) --------------------------------

BOOST_AUTO_TEST_CASE(clip_factor_is_clip_over_the_larger_of_norm_and_clip) {
  BOOST_TEST(clip_factor(100.0, 5.0f) == 0.5f);
  BOOST_TEST(clip_factor(4.0, 5.0f) == 1.0f);
  BOOST_TEST(clip_factor(25.0, 5.0f) == 1.0f);
  BOOST_TEST(clip_factor(1e6, 0.0f) == 1.0f);
  float x[] = {3, -4};
  BOOST_TEST(sum_of_squares(x, 2) == 25.0);
}

BOOST_AUTO_TEST_CASE(apply_clips_every_gradient_by_their_global_norm) {
  // Gradients w [6, 6] and b [6, 6] (plus l2 x w on w): the global norm
  // of the gradients alone is 12, so with --clip_norm 3 each is
  // multiplied by 1/4; the L2 penalty's gradient joins after the clip.
  auto cfg = test::optimizer_of(optimizer_kind::sgd, 1.0f);
  cfg.clip_norm = 3.0f;
  cfg.l2_penalty = 0.5f;
  auto [opt, params] = after_first_step(cfg, 6);
  BOOST_TEST(opt.gradient_scale() == 0.25f);
  // w: 2 - (6 / 4 + 0.5 x 2) = -0.5; b: 2 - 6 / 4 = 0.5.
  BOOST_TEST(std::abs(params[0].value[0] + 0.5f) < 1e-6);
  BOOST_TEST(std::abs(params[1].value[1] - 0.5f) < 1e-6);
  // Within the norm: unscaled.
  params = weight_and_bias(2);
  BOOST_REQUIRE(!opt.apply(params, weight_and_bias(1)));
  BOOST_TEST(opt.gradient_scale() == 1.0f);
  BOOST_TEST(std::abs(params[1].value[0] - 1.0f) < 1e-6);
}

BOOST_AUTO_TEST_CASE(a_negative_or_infinite_clip_norm_is_refused_by_name) {
  auto cfg = test::optimizer_of(optimizer_kind::momentum, 0.5f);
  for (float bad_norm : {-1.0f, std::numeric_limits<float>::infinity()}) {
    cfg.clip_norm = bad_norm;
    auto bad = optimizer::make(cfg, one(0));
    BOOST_REQUIRE(!bad);
    BOOST_TEST(render(bad.error()).find("--clip_norm must be >= 0")
               != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_moving_statistic_takes_its_push_as_it_is) {
  // batch_norm's moving statistics (runtime/moving_statistic.hpp): the
  // averaged push is subtracted whole, whatever the optimizer, rate,
  // schedule, clip or decay; nor does it count in the clip's norm.
  for (auto kind : {optimizer_kind::sgd, optimizer_kind::momentum,
                    optimizer_kind::adam}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      auto cfg = test::optimizer_of(kind, 0.1f);
      cfg.clip_norm = 1.0f;
      cfg.weight_decay = 0.5f;
      parameter_set vars{{"bn/moving_mean", tensor{{2}, {1, 2}}},
                         {"bn/moving_variance", tensor{{2}, {3, 4}}},
                         {"w", tensor{{1, 2}, {1, 1}}}};
      auto opt = optimizer::make(cfg, vars);
      BOOST_REQUIRE(opt);
      BOOST_TEST(opt->is_moving_statistic(0));
      BOOST_TEST(opt->is_moving_statistic(1));
      BOOST_TEST(!opt->is_moving_statistic(2));
      // The statistics' pushes alone are far over the clip: were they
      // counted, w's gradient (norm 0.5) would be scaled down.
      parameter_set grads{{"bn/moving_mean", tensor{{2}, {100, -50}}},
                          {"bn/moving_variance", tensor{{2}, {0.5f, 1}}},
                          {"w", tensor{{1, 2}, {0.3f, 0.4f}}}};
      for (int step = 0; step < 2; ++step) {
        BOOST_REQUIRE(!opt->apply(vars, grads));
        BOOST_TEST(opt->gradient_scale() == 1.0f);
      }
      BOOST_TEST(vars[0].value.values() == (std::vector<float>{-199, 102}));
      BOOST_TEST(vars[1].value.values() == (std::vector<float>{2, 2}));
    }
  }
  BOOST_TEST(is_moving_statistic("block1/bn/moving_variance"));
  BOOST_TEST(!is_moving_statistic("moving_mean"));
  BOOST_TEST(!is_moving_statistic("bn/moving_mean_of_something"));
}
