#define BOOST_TEST_MODULE kernels_backend
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

BOOST_AUTO_TEST_CASE(cpu_is_available) {
  auto names = available_backends();
  BOOST_CHECK(std::find(names.begin(), names.end(), "cpu") != names.end());
  auto dev = make_backend("cpu", 2);
  BOOST_REQUIRE(dev);
  BOOST_CHECK_EQUAL((*dev)->name(), "cpu");
  BOOST_CHECK_EQUAL((*dev)->threads(), 2);
  BOOST_CHECK_EQUAL(make_cpu_backend(1)->threads(), 1);
}

BOOST_AUTO_TEST_CASE(unknown_and_unavailable_backends) {
  check_error(make_backend("tpu", 1).error(), ec::unknown_name,
              {"tpu", "cpu"});
  check_error(make_backend("cuda:0", 1).error(), ec::unavailable,
              {"cuda:0", "cpu"});
  check_error(make_backend("cpu", 0).error(), ec::invalid_argument, {"0"});
  BOOST_CHECK_THROW(make_cpu_backend(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(activation_names_round_trip) {
  for (auto act : all_activations()) {
    auto parsed = parse_activation(to_string(act));
    BOOST_REQUIRE(parsed);
    BOOST_CHECK(*parsed == act);
  }
  BOOST_CHECK(parse_activation("linear") == activation::identity);
  check_error(parse_activation("gelu").error(), ec::invalid_argument,
              {"gelu"});
}
