// Device selection (kernels/backend_factory.hpp): --device cpu|gpu:N|auto
// in every build. Runs with and without CUDA and GPUs: what is expected
// depends on gpu_count().

#define BOOST_TEST_MODULE kernels_cuda_device_selection
#include <boost/test/unit_test.hpp>

#include "kernels/backend_factory.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

BOOST_AUTO_TEST_CASE(parses_the_accepted_forms) {
  auto check = [](const std::string& str, device_spec::kind_t kind,
                  int index) {
    auto spec = parse_device(str);
    BOOST_REQUIRE_MESSAGE(spec, str << ": "
                                    << (spec ? std::string{}
                                             : render(spec.error())));
    BOOST_CHECK_EQUAL(static_cast<int>(spec->kind), static_cast<int>(kind));
    BOOST_CHECK_EQUAL(spec->index, index);
  };
  check("cpu", device_spec::cpu, 0);
  check("auto", device_spec::automatic, 0);
  check("gpu", device_spec::gpu, 0);
  check("gpu:3", device_spec::gpu, 3);
  check("cuda", device_spec::gpu, 0);
  check("cuda:1", device_spec::gpu, 1);
  for (std::string bad : {"tpu", "gpu:", "gpu:x", "gpu:-1", "GPU", ""}) {
    auto spec = parse_device(bad);
    BOOST_REQUIRE_MESSAGE(!spec, bad);
    check_error(spec.error(), ec::unknown_name,
                {"'" + bad + "'", "cpu, gpu:N or auto"});
  }
}

BOOST_AUTO_TEST_CASE(cpu_is_always_there) {
  auto dev = make_device_backend("cpu", 2);
  BOOST_REQUIRE_MESSAGE(dev, (dev ? std::string{} : render(dev.error())));
  BOOST_CHECK_EQUAL((*dev)->name(), "cpu");
  BOOST_CHECK_EQUAL((*dev)->threads(), 2);
  check_error(make_device_backend("cpu", 0).error(), ec::invalid_argument,
              {"threads"});
}

BOOST_AUTO_TEST_CASE(gpu_without_a_device_is_unavailable) {
  auto count = gpu_count();
  BOOST_TEST_MESSAGE("CUDA built: " << cuda_built() << ", GPUs: " << count);
  if (!cuda_built())
    BOOST_CHECK_EQUAL(count, 0);
  auto missing = "gpu:" + std::to_string(count);
  auto dev = make_device_backend(missing, 1);
  BOOST_REQUIRE(!dev);
  check_error(dev.error(), ec::unavailable, {missing, "not available"});
  if (count > 0) {
    auto first = make_device_backend("gpu:0", 1);
    BOOST_REQUIRE_MESSAGE(first,
                          (first ? std::string{} : render(first.error())));
    BOOST_CHECK_EQUAL((*first)->name(), "cuda:0");
  }
}

BOOST_AUTO_TEST_CASE(auto_takes_a_gpu_if_present_else_cpu) {
  auto dev = make_device_backend("auto", 3);
  BOOST_REQUIRE_MESSAGE(dev, (dev ? std::string{} : render(dev.error())));
  if (gpu_count() > 0) {
    BOOST_CHECK_EQUAL((*dev)->name(), "cuda:0");
  } else {
    BOOST_CHECK_EQUAL((*dev)->name(), "cpu");
    BOOST_CHECK_EQUAL((*dev)->threads(), 3);
  }
}

BOOST_AUTO_TEST_CASE(towers_spread_over_the_gpus) {
  auto count = gpu_count();
  BOOST_CHECK_EQUAL(tower_device("cpu", 3), "cpu");
  BOOST_CHECK_EQUAL(tower_device("tpu", 1), "tpu");
  if (count == 0) {
    BOOST_CHECK_EQUAL(tower_device("gpu", 1), "gpu");
    BOOST_CHECK_EQUAL(tower_device("auto", 2), "auto");
    BOOST_CHECK_EQUAL(tower_device("gpu:1", 0), "gpu:1");
  } else {
    for (int k = 0; k < 2 * count; ++k) {
      BOOST_CHECK_EQUAL(tower_device("gpu", k),
                        "gpu:" + std::to_string(k % count));
      BOOST_CHECK_EQUAL(tower_device("auto", k),
                        "gpu:" + std::to_string(k % count));
    }
  }
}
