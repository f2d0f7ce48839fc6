#define BOOST_TEST_MODULE kernels_backend
#include <boost/test/unit_test.hpp>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

// Choosing a device by name (cpu, gpu:N, auto) and its errors are
// kernels_cuda_device_selection's.
BOOST_AUTO_TEST_CASE(the_cpu_backend_has_its_threads) {
  auto dev = make_cpu_backend(2);
  BOOST_CHECK_EQUAL(dev->name(), "cpu");
  BOOST_CHECK_EQUAL(dev->threads(), 2);
  BOOST_CHECK_EQUAL(make_cpu_backend(1)->threads(), 1);
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
