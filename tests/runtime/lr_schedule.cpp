#define BOOST_TEST_MODULE lr_schedule
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "runtime/base/error.hpp"
#include "runtime/lr_schedule.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

// The schedule's factor at chosen global steps against values worked out
// by hand, and its flags' checks.

namespace {

bool near(double a, double b) {
  return std::abs(a - b) < 1e-7;
}

std::string refusal(const lr_schedule& s) {
  auto err = s.validate();
  BOOST_REQUIRE_MESSAGE(err, "the schedule was accepted");
  return render(err);
}

} // namespace

BOOST_AUTO_TEST_CASE(constant_is_one_after_a_linear_warmup) {
  lr_schedule s;
  BOOST_TEST(!s.validate());
  BOOST_TEST(s.factor_at(0) == 1.0);
  BOOST_TEST(s.factor_at(123456) == 1.0);
  s.warmup_steps = 4;
  BOOST_TEST(near(s.factor_at(0), 0.25));
  BOOST_TEST(near(s.factor_at(2), 0.75));
  BOOST_TEST(s.factor_at(3) == 1.0);
  BOOST_TEST(s.factor_at(10) == 1.0);
}

BOOST_AUTO_TEST_CASE(step_multiplies_at_each_boundary) {
  lr_schedule s;
  s.kind = lr_schedule_kind::step;
  s.boundaries = {100, 200};
  s.decay_rate = 0.1f;
  BOOST_TEST(!s.validate());
  BOOST_TEST(s.factor_at(99) == 1.0);
  BOOST_TEST(near(s.factor_at(100), 0.1f));
  BOOST_TEST(near(s.factor_at(199), 0.1f));
  BOOST_TEST(near(s.factor_at(200), double{0.1f} * 0.1f));
}

BOOST_AUTO_TEST_CASE(cosine_falls_from_the_warmup_to_its_end) {
  lr_schedule s;
  s.kind = lr_schedule_kind::cosine;
  s.warmup_steps = 10;
  s.decay_steps = 110;
  s.end_factor = 0.0f;
  BOOST_TEST(!s.validate());
  BOOST_TEST(near(s.factor_at(4), 0.5));  // warming up: 5/10
  BOOST_TEST(near(s.factor_at(10), 1.0)); // the decay starts
  BOOST_TEST(near(s.factor_at(60), 0.5)); // halfway: (1 + cos(pi/2)) / 2
  BOOST_TEST(near(s.factor_at(35), 0.5 * (1 + std::cos(M_PI * 0.25))));
  BOOST_TEST(near(s.factor_at(110), 0.0));
  BOOST_TEST(near(s.factor_at(5000), 0.0)); // stays at its end
  s.end_factor = 0.1f;
  BOOST_TEST(near(s.factor_at(60), 0.1f + (1 - 0.1f) * 0.5));
  BOOST_TEST(near(s.factor_at(110), 0.1f));
}

BOOST_AUTO_TEST_CASE(polynomial_of_power_one_is_linear) {
  lr_schedule s;
  s.kind = lr_schedule_kind::polynomial;
  s.decay_steps = 100;
  s.power = 1.0f;
  BOOST_TEST(near(s.factor_at(0), 1.0));
  BOOST_TEST(near(s.factor_at(25), 0.75));
  BOOST_TEST(near(s.factor_at(100), 0.0));
  s.power = 2.0f;
  BOOST_TEST(near(s.factor_at(50), 0.25));
}

BOOST_AUTO_TEST_CASE(bad_schedules_name_the_flag) {
  lr_schedule s;
  s.kind = lr_schedule_kind::step;
  BOOST_TEST(refusal(s).find("--lr_boundaries is empty") != std::string::npos);
  s.boundaries = {100, 50};
  BOOST_TEST(refusal(s).find("positive and increasing; item 2 is 50")
             != std::string::npos);
  s.boundaries = {100};
  s.decay_rate = 0.0f;
  BOOST_TEST(refusal(s).find("--lr_decay_rate") != std::string::npos);
  lr_schedule c;
  c.kind = lr_schedule_kind::cosine;
  c.warmup_steps = 100;
  c.decay_steps = 50;
  BOOST_TEST(refusal(c)
             == "invalid_config: --lr_decay_steps 50 must be greater than "
                "--warmup_steps 100 (schedule cosine)");
  c.decay_steps = 500;
  c.end_factor = 2.0f;
  BOOST_TEST(refusal(c).find("--lr_end_factor") != std::string::npos);
  lr_schedule p;
  p.kind = lr_schedule_kind::polynomial;
  p.decay_steps = 10;
  p.power = -1.0f;
  BOOST_TEST(refusal(p).find("--lr_power") != std::string::npos);
  p.power = NAN;
  BOOST_TEST(refusal(p).find("--lr_power") != std::string::npos);
  lr_schedule w;
  w.warmup_steps = -1;
  BOOST_TEST(refusal(w).find("--warmup_steps -1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(boundaries_and_kinds_parse_or_are_named) {
  auto b = parse_lr_boundaries("100,2000");
  BOOST_REQUIRE(b);
  BOOST_TEST((*b == std::vector<int64_t>{100, 2000}));
  auto bad = parse_lr_boundaries("100,x");
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("'x' is not a positive global step")
             != std::string::npos);
  BOOST_TEST(!parse_lr_boundaries("100,,200"));
  BOOST_TEST(!parse_lr_boundaries("-5"));
  BOOST_TEST((parse_lr_schedule_kind("cosine").value()
              == lr_schedule_kind::cosine));
  auto k = parse_lr_schedule_kind("linear");
  BOOST_REQUIRE(!k);
  BOOST_TEST(render(k.error()).find("--lr_schedule 'linear'")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(describe_says_what_the_log_shows) {
  lr_schedule s;
  BOOST_TEST(describe(s).empty());
  s.kind = lr_schedule_kind::cosine;
  s.warmup_steps = 100;
  s.decay_steps = 2000;
  BOOST_TEST(describe(s) == "cosine to 0x at step 2000 after 100 warm-up steps");
}
