#define BOOST_TEST_MODULE kernels_dense
#include <boost/test/unit_test.hpp>
#include "tests/kernels/isa_fixture.hpp"

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

tensor naive_dense(const tensor& x, const tensor& w, const tensor& b,
                   activation act) {
  auto n = x.dim(0), in = x.dim(1), out = w.dim(1);
  tensor y({n, out});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i)
        s += double{x[r * in + i]} * w[i * out + o];
      y[r * out + o] = static_cast<float>(act_ref(act, s));
    }
  return y;
}

} // namespace

BOOST_AUTO_TEST_CASE(forward_matches_naive) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  for (auto act : all_activations())
    for (auto n : {1, 7, 128}) {
      auto x = random_tensor({n, 37}, rng);
      auto w = random_tensor({37, 10}, rng);
      auto b = random_tensor({10}, rng);
      tensor y;
      SYNCFAC_REQUIRE_OK(dev->dense_forward(x, w, b, act, y));
      check_close(y, naive_dense(x, w, b, act), 1e-5, 1e-4,
                  std::string{"y "} + to_string(act));
    }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      auto x = random_tensor({5, 7}, rng);
      auto w = random_tensor({7, 3}, rng);
      auto b = random_tensor({3}, rng);
      auto r = random_tensor({5, 3}, rng);
      tensor y, ds, dw, db, dx;
      SYNCFAC_REQUIRE_OK(dev->dense_forward(x, w, b, act, y));
      SYNCFAC_REQUIRE_OK(
        dev->dense_backward(x, w, y, r, act, ds, dw, db, &dx));
      check_layer_gradients(
        [&](tensor& out) { return dev->dense_forward(x, w, b, act, out); },
        act, y, r, x, dx, w, dw, b, db);
      // ds is dL/ds: the bias gradient per row.
      tensor ds_sum({3});
      for (int64_t i = 0; i < ds.size(); ++i)
        ds_sum[i % 3] += ds[i];
      check_close(ds_sum, db, 1e-6, 1e-5, "sum of ds");
    }
  }
}

BOOST_AUTO_TEST_CASE(null_dx_and_thread_counts) {
  std::mt19937 rng(3);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  // Large enough that the two-thread backend really splits the work.
  auto x = random_tensor({256, 300}, rng);
  auto w = random_tensor({300, 200}, rng);
  auto b = random_tensor({200}, rng);
  auto dy = random_tensor({256, 200}, rng);
  tensor y1, y2, ds1, dw1, db1, dx1, ds2, dw2, db2, dx2;
  SYNCFAC_REQUIRE_OK(one->dense_forward(x, w, b, activation::tanh, y1));
  SYNCFAC_REQUIRE_OK(two->dense_forward(x, w, b, activation::tanh, y2));
  check_close(y2, y1, 1e-5, 1e-5, "y");
  SYNCFAC_REQUIRE_OK(one->dense_backward(x, w, y1, dy, activation::tanh, ds1,
                                         dw1, db1, &dx1));
  SYNCFAC_REQUIRE_OK(two->dense_backward(x, w, y1, dy, activation::tanh, ds2,
                                         dw2, db2, nullptr));
  check_close(ds2, ds1, 1e-5, 1e-5, "ds");
  check_close(dw2, dw1, 1e-5, 1e-5, "dw");
  check_close(db2, db1, 1e-5, 1e-5, "db");
  SYNCFAC_REQUIRE_OK(two->dense_backward(x, w, y1, dy, activation::tanh, ds2,
                                         dw2, db2, &dx2));
  check_close(dx2, dx1, 1e-5, 1e-5, "dx");
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes) {
  auto dev = make_cpu_backend(1);
  tensor sentinel({1}, {3.0f});
  auto y = sentinel;
  check_error(dev->dense_forward(tensor({4, 5}), tensor({6, 3}), tensor({3}),
                                 activation::relu, y),
              ec::shape_mismatch, {"[4, 5]", "[6, 3]"});
  check_error(dev->dense_forward(tensor({4, 5}), tensor({5, 3}), tensor({4}),
                                 activation::relu, y),
              ec::shape_mismatch, {"[4]", "[3]"});
  BOOST_CHECK(y == sentinel);
  auto ds = sentinel, dw = sentinel, db = sentinel;
  check_error(dev->dense_backward(tensor({4, 5}), tensor({5, 3}),
                                  tensor({4, 3}), tensor({4, 2}),
                                  activation::relu, ds, dw, db, nullptr),
              ec::shape_mismatch, {"[4, 2]", "[4, 3]"});
  check_error(dev->dense_backward(tensor({4, 5}), tensor({5, 3}),
                                  tensor({2, 3}), tensor({2, 3}),
                                  activation::relu, ds, dw, db, nullptr),
              ec::shape_mismatch, {"[2, 3]", "[4, 3]"});
  BOOST_CHECK(ds == sentinel && dw == sentinel && db == sentinel);
}
