#define BOOST_TEST_MODULE kernels_activation
#include <boost/test/unit_test.hpp>

#include <limits>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

double derivative_from_output(activation act, double y) {
  switch (act) {
    case activation::identity: return 1;
    case activation::relu: return y > 0 ? 1 : 0;
    case activation::tanh: return 1 - y * y;
    case activation::sigmoid: return y * (1 - y);
  }
  return 0;
}

} // namespace

BOOST_AUTO_TEST_CASE(forward_matches_std) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  for (auto act : all_activations())
    for (int64_t n : {1, 7, 8, 9, 1000, 100003}) {
      auto x = random_tensor({n}, rng, -6.0f, 6.0f);
      tensor y, ref({n});
      for (int64_t i = 0; i < n; ++i)
        ref[i] = static_cast<float>(act_ref(act, double{x[i]}));
      SYNCFAC_REQUIRE_OK(dev->activation_forward(act, x, y));
      // Eigen's vectorised tanh and logistic are accurate to a few ulp.
      check_close(y, ref, 2e-6, 2e-6,
                  std::string{to_string(act)} + " n=" + std::to_string(n));
    }
}

BOOST_AUTO_TEST_CASE(forward_in_place_and_rank_kept) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  auto x = random_tensor({2, 3, 4}, rng);
  auto copy = x;
  SYNCFAC_REQUIRE_OK(dev->activation_forward(activation::relu, x, x));
  BOOST_CHECK(x.shape() == copy.shape());
  for (int64_t i = 0; i < x.size(); ++i)
    BOOST_CHECK_EQUAL(x[i], std::max(copy[i], 0.0f));
}

BOOST_AUTO_TEST_CASE(relu_keeps_nan_visible) {
  auto dev = make_cpu_backend(1);
  auto nan = std::numeric_limits<float>::quiet_NaN();
  tensor x({11}), y;
  x[0] = nan;  // vector body
  x[10] = nan; // scalar tail
  SYNCFAC_REQUIRE_OK(dev->activation_forward(activation::relu, x, y));
  BOOST_CHECK(std::isnan(y[0]));
  BOOST_CHECK(std::isnan(y[10]));
  BOOST_CHECK_EQUAL(y[1], 0.0f);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  std::mt19937 rng(3);
  auto dev = make_cpu_backend(1);
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      auto x = random_tensor({4, 9}, rng, -2.0f, 2.0f);
      auto r = random_tensor({4, 9}, rng);
      tensor y, dx;
      SYNCFAC_REQUIRE_OK(dev->activation_forward(act, x, y));
      SYNCFAC_REQUIRE_OK(dev->activation_backward(act, y, r, dx));
      for (int64_t i = 0; i < y.size(); ++i)
        BOOST_CHECK_CLOSE(double{dx[i]},
                          r[i] * derivative_from_output(act, y[i]) + 0.0,
                          1e-4);
      auto base = y;
      tensor probe_y;
      auto loss = [&] {
        SYNCFAC_REQUIRE_OK(dev->activation_forward(act, x, probe_y));
        return probe(probe_y, r);
      };
      auto unswitched = [&] {
        return act != activation::relu || same_signs(probe_y, base);
      };
      check_gradient("dx", x, dx, loss, unswitched);
    }
  }
}

BOOST_AUTO_TEST_CASE(one_and_two_threads_agree) {
  std::mt19937 rng(4);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  auto x = random_tensor({3, 100000}, rng, -3.0f, 3.0f);
  auto dy = random_tensor({3, 100000}, rng);
  for (auto act : all_activations()) {
    tensor y1, y2, d1, d2;
    SYNCFAC_REQUIRE_OK(one->activation_forward(act, x, y1));
    SYNCFAC_REQUIRE_OK(two->activation_forward(act, x, y2));
    BOOST_CHECK(y1 == y2);
    SYNCFAC_REQUIRE_OK(one->activation_backward(act, y1, dy, d1));
    SYNCFAC_REQUIRE_OK(two->activation_backward(act, y1, dy, d2));
    BOOST_CHECK(d1 == d2);
  }
}

BOOST_AUTO_TEST_CASE(backward_shape_error) {
  auto dev = make_cpu_backend(1);
  tensor sentinel({1}, {5.0f});
  auto dx = sentinel;
  check_error(dev->activation_backward(activation::tanh, tensor({2, 3}),
                                       tensor({3, 2}), dx),
              ec::shape_mismatch, {"[2, 3]", "[3, 2]"});
  BOOST_CHECK(dx == sentinel);
}
