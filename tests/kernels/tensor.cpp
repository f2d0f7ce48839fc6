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

// Device memory played by host memory (this machine has no GPU; the CUDA
// backend's copies are tested in kernels_cuda_backend): what a tensor must
// do with a copy whatever device holds it.
struct host_memory_copy : device_copy {
  explicit host_memory_copy(std::vector<float> xs) : values(std::move(xs)) {
  }

  void copy_to_host(float* dst, int64_t n) const override {
    ++fetches;
    std::copy(values.begin(), values.begin() + n, dst);
  }

  int64_t capacity() const noexcept override {
    return static_cast<int64_t>(values.size());
  }

  std::vector<float> values;
  mutable int fetches = 0;
};

/// x with device values `xs` that the host has not seen yet.
std::shared_ptr<host_memory_copy> put_on_device(tensor& x,
                                                std::vector<float> xs) {
  auto copy = std::make_shared<host_memory_copy>(std::move(xs));
  x.attach_device(copy, residency::device);
  return copy;
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

BOOST_AUTO_TEST_CASE(reading_fetches_device_values_once) {
  tensor x({2, 2}, {1, 2, 3, 4});
  auto copy = put_on_device(x, {5, 6, 7, 8});
  BOOST_CHECK(x.where() == residency::device);
  const auto& cx = x;
  BOOST_CHECK_EQUAL(cx[2], 7.0f);
  BOOST_CHECK(x.where() == residency::both);
  BOOST_CHECK_EQUAL(cx.data()[3], 8.0f);
  BOOST_CHECK((cx.values() == std::vector<float>{5, 6, 7, 8}));
  BOOST_CHECK_EQUAL(copy->fetches, 1);
  // Shape queries need no values.
  auto y = tensor({3});
  auto ycopy = put_on_device(y, {1, 1, 1});
  BOOST_CHECK_EQUAL(y.size(), 3);
  BOOST_CHECK_EQUAL(y.shape_string(), "[3]");
  BOOST_CHECK_EQUAL(ycopy->fetches, 0);
}

BOOST_AUTO_TEST_CASE(writing_on_the_host_makes_the_device_copy_stale) {
  tensor x({3}, {1, 2, 3});
  auto copy = put_on_device(x, {4, 5, 6});
  x[0] = 9; // fetches first: the other values are the device's
  BOOST_CHECK(x.where() == residency::host);
  BOOST_CHECK((x.values() == std::vector<float>{9, 5, 6}));
  BOOST_CHECK_EQUAL(copy->fetches, 1);
  // A backend that copied the host values over marks both current.
  x.attach_device(copy, residency::both);
  BOOST_CHECK(x.where() == residency::both);
  x.fill(0.0f);
  BOOST_CHECK(x.where() == residency::host);
  BOOST_CHECK(x.device() != nullptr); // kept for reuse
}

BOOST_AUTO_TEST_CASE(copies_moves_equality_and_the_wire_see_device_values) {
  tensor x({2}, {0, 0});
  put_on_device(x, {1.5f, -2.5f});
  tensor copied = x;
  BOOST_CHECK(copied.where() == residency::host);
  BOOST_CHECK(copied.device() == nullptr);
  BOOST_CHECK((copied.values() == std::vector<float>{1.5f, -2.5f}));

  tensor y({2}, {0, 0});
  put_on_device(y, {1.5f, -2.5f});
  BOOST_CHECK(y == copied);
  tensor moved = std::move(y);
  BOOST_CHECK(y.where() == residency::host); // NOLINT: checked after move
  BOOST_CHECK(y.empty());
  BOOST_CHECK(moved.where() == residency::both);

  tensor z({2}, {0, 0});
  put_on_device(z, {7, 8});
  tensor assigned({5});
  assigned = z;
  BOOST_CHECK((assigned.values() == std::vector<float>{7, 8}));

  tensor w({2}, {0, 0});
  put_on_device(w, {3, 4});
  auto buf = save(w);
  tensor loaded;
  SYNCFAC_REQUIRE_OK(load(buf, loaded));
  BOOST_CHECK((loaded.values() == std::vector<float>{3, 4}));
  BOOST_CHECK(w.all_finite());
}

BOOST_AUTO_TEST_CASE(resize_keeps_device_values_only_for_the_same_count) {
  tensor x({2, 3});
  auto copy = put_on_device(x, {1, 2, 3, 4, 5, 6});
  x.resize({3, 2}); // same count: still the device's values
  BOOST_CHECK(x.where() == residency::device);
  BOOST_CHECK_EQUAL(static_cast<const tensor&>(x)[5], 6.0f);
  x.resize({4});
  BOOST_CHECK(x.where() == residency::host);
  BOOST_CHECK_EQUAL(x.size(), 4);
  BOOST_CHECK_THROW(x.attach_device(copy, residency::host),
                    std::invalid_argument);
  tensor big({7});
  BOOST_CHECK_THROW(big.attach_device(copy, residency::device),
                    std::invalid_argument);
}
