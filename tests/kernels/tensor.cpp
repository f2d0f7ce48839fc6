#define BOOST_TEST_MODULE kernels_tensor
#include <boost/test/unit_test.hpp>

#include <limits>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// CAF 0.17 serializers take an execution_unit only for actor handles; a
// null one suffices for plain data, so no actor_system is needed.
std::vector<char> save(tensor& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  SYNCFAC_REQUIRE_OK(inspect(sink, x));
  return buf;
}

caf::error load(const std::vector<char>& buf, tensor& x) {
  caf::binary_deserializer source{nullptr, buf};
  return inspect(source, x);
}

} // namespace

BOOST_AUTO_TEST_CASE(shapes_and_counts) {
  BOOST_CHECK_EQUAL(to_string(tensor_shape{128, 28, 28, 1}),
                    "[128, 28, 28, 1]");
  BOOST_CHECK_EQUAL(to_string(tensor_shape{}), "[]");
  BOOST_CHECK_EQUAL(element_count({}), 1);
  BOOST_CHECK_EQUAL(element_count({3, 0, 2}), 0);
  tensor t{2, 3};
  BOOST_CHECK_EQUAL(t.rank(), 2);
  BOOST_CHECK_EQUAL(t.size(), 6);
  BOOST_CHECK_EQUAL(t.dim(1), 3);
  BOOST_CHECK_EQUAL(t[5], 0.0f);
  BOOST_CHECK_THROW(tensor({2, 2}, std::vector<float>(3)),
                    std::invalid_argument);
  BOOST_CHECK_THROW(tensor({-1, 2}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(resize_reuses_storage_and_reshape_checks_count) {
  tensor t({4, 4});
  const float* before = t.data();
  t.resize({2, 8});
  BOOST_CHECK(t.data() == before);
  t.resize({3, 3});
  BOOST_CHECK(t.data() == before);
  BOOST_CHECK(t.shape() == (tensor_shape{3, 3}));
  t.reshape({9});
  BOOST_CHECK_EQUAL(t.rank(), 1);
  BOOST_CHECK_THROW(t.reshape({10}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(fill_equality_and_finiteness) {
  tensor a({2, 2}), b({2, 2});
  a.fill(1.5f);
  BOOST_CHECK(a != b);
  b.fill(1.5f);
  BOOST_CHECK(a == b);
  BOOST_CHECK(a.all_finite());
  a[3] = std::numeric_limits<float>::infinity();
  BOOST_CHECK(!a.all_finite());
  a[3] = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK(!a.all_finite());
  BOOST_CHECK(a != tensor({4}, {1.5f, 1.5f, 1.5f, 1.5f}));
}

BOOST_AUTO_TEST_CASE(caf_round_trip) {
  std::mt19937 rng(1);
  for (auto shape : {tensor_shape{3, 5, 7, 2}, tensor_shape{}, tensor_shape{0},
                     tensor_shape{1000}}) {
    BOOST_TEST_CONTEXT(to_string(shape)) {
      auto x = random_tensor(shape, rng);
      auto buf = save(x);
      // The values travel as one raw block: 4 bytes each plus the shape.
      BOOST_CHECK_GE(buf.size(), 4 * static_cast<size_t>(x.size()));
      BOOST_CHECK_LE(buf.size(), 4 * static_cast<size_t>(x.size())
                                   + 8 * (shape.size() + 2));
      tensor y({9, 9});
      SYNCFAC_REQUIRE_OK(load(buf, y));
      BOOST_CHECK(x == y);
    }
  }
}

BOOST_AUTO_TEST_CASE(caf_refuses_bad_shapes) {
  for (auto shape : {tensor_shape{2, -3}, tensor_shape{1 << 20, 1 << 20}}) {
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    SYNCFAC_REQUIRE_OK(sink(shape));
    tensor y;
    check_error(load(buf, y), ec::bad_message, {to_string(shape)});
  }
  // A truncated value block is an error, not a short tensor.
  tensor x({4}, {1, 2, 3, 4});
  auto buf = save(x);
  buf.resize(buf.size() - 3);
  tensor y;
  BOOST_CHECK(load(buf, y));
}
