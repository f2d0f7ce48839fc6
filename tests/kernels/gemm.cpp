#define BOOST_TEST_MODULE kernels_gemm
#include <boost/test/unit_test.hpp>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// alpha * op(a) op(b) + beta * c in double.
tensor naive_gemm(const tensor& a, bool ta, const tensor& b, bool tb,
                  float alpha, float beta, const tensor& c) {
  auto m = ta ? a.dim(1) : a.dim(0);
  auto k = ta ? a.dim(0) : a.dim(1);
  auto n = tb ? b.dim(0) : b.dim(1);
  auto at = [&](int64_t i, int64_t j) {
    return double{ta ? a[j * a.dim(1) + i] : a[i * a.dim(1) + j]};
  };
  auto bt = [&](int64_t i, int64_t j) {
    return double{tb ? b[j * b.dim(1) + i] : b[i * b.dim(1) + j]};
  };
  tensor out({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += at(i, p) * bt(p, j);
      double prev = beta != 0 ? double{c[i * n + j]} : 0.0;
      out[i * n + j] = static_cast<float>(alpha * sum + beta * prev);
    }
  return out;
}

tensor_shape shape_of(int64_t rows, int64_t cols, bool trans) {
  return trans ? tensor_shape{cols, rows} : tensor_shape{rows, cols};
}

} // namespace

BOOST_AUTO_TEST_CASE(all_transpose_combinations_match_naive) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  struct dims {
    int64_t m, n, k;
  };
  for (auto d : {dims{1, 1, 1}, dims{3, 5, 7}, dims{17, 9, 33},
                 dims{130, 70, 50}, dims{7, 300, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          BOOST_TEST_CONTEXT("m" << d.m << " n" << d.n << " k" << d.k
                                 << " ta" << ta << " tb" << tb << " beta"
                                 << beta) {
            auto a = random_tensor(shape_of(d.m, d.k, ta), rng);
            auto b = random_tensor(shape_of(d.k, d.n, tb), rng);
            auto c = random_tensor({d.m, d.n}, rng);
            auto ref = naive_gemm(a, ta, b, tb, 1.5f, beta, c);
            SYNCFAC_REQUIRE_OK(dev->gemm(a, ta, b, tb, 1.5f, beta, c));
            check_close(c, ref, 1e-5, 1e-4, "c");
          }
        }
}

BOOST_AUTO_TEST_CASE(beta_zero_resizes_and_ignores_c) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  auto a = random_tensor({4, 3}, rng);
  auto b = random_tensor({3, 5}, rng);
  tensor c({2, 2}, {NAN, NAN, NAN, NAN});
  SYNCFAC_REQUIRE_OK(dev->gemm(a, false, b, false, 1, 0, c));
  check_close(c, naive_gemm(a, false, b, false, 1, 0, c), 1e-6, 1e-5, "c");
}

BOOST_AUTO_TEST_CASE(output_may_alias_an_input) {
  std::mt19937 rng(3);
  auto dev = make_cpu_backend(2);
  auto a = random_tensor({6, 6}, rng);
  auto b = random_tensor({6, 6}, rng);
  auto ref = naive_gemm(a, true, b, false, 1, 1, a);
  SYNCFAC_REQUIRE_OK(dev->gemm(a, true, b, false, 1, 1, a));
  check_close(a, ref, 1e-5, 1e-4, "a = a^T b + a");
}

BOOST_AUTO_TEST_CASE(zero_inner_dimension) {
  auto dev = make_cpu_backend(2);
  tensor a({3, 0}), b({0, 4});
  tensor c({3, 4});
  c.fill(2.0f);
  SYNCFAC_REQUIRE_OK(dev->gemm(a, false, b, false, 1, 0.5f, c));
  for (auto v : c.values())
    BOOST_CHECK_EQUAL(v, 1.0f);
}

BOOST_AUTO_TEST_CASE(one_and_two_threads_agree) {
  std::mt19937 rng(4);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  for (bool ta : {false, true}) {
    auto a = random_tensor(shape_of(300, 200, ta), rng);
    auto b = random_tensor({200, 250}, rng);
    tensor c1, c2;
    SYNCFAC_REQUIRE_OK(one->gemm(a, ta, b, false, 1, 0, c1));
    SYNCFAC_REQUIRE_OK(two->gemm(a, ta, b, false, 1, 0, c2));
    check_close(c2, c1, 1e-5, 1e-5, "c");
  }
  // Few rows: the split runs along the columns.
  auto a = random_tensor({4, 500}, rng);
  auto b = random_tensor({500, 600}, rng);
  tensor c1, c2;
  SYNCFAC_REQUIRE_OK(one->gemm(a, false, b, false, 1, 0, c1));
  SYNCFAC_REQUIRE_OK(two->gemm(a, false, b, false, 1, 0, c2));
  check_close(c2, c1, 1e-5, 1e-5, "c");
  check_close(c2, naive_gemm(a, false, b, false, 1, 0, c2), 1e-4, 1e-4,
              "naive");
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes) {
  auto dev = make_cpu_backend(1);
  tensor sentinel({1}, {7.0f});
  auto c = sentinel;
  check_error(dev->gemm(tensor({2, 3}), false, tensor({4, 5}), false, 1, 0,
                        c),
              ec::shape_mismatch, {"[2, 3]", "[4, 5]"});
  check_error(dev->gemm(tensor({2, 3}), true, tensor({3, 5}), false, 1, 0, c),
              ec::shape_mismatch, {"[2, 3]", "[3, 5]"});
  check_error(dev->gemm(tensor({2, 3, 1}), false, tensor({3, 5}), false, 1,
                        0, c),
              ec::shape_mismatch, {"[2, 3, 1]", "[3, 5]"});
  check_error(dev->gemm(tensor({2, 3}), false, tensor({3, 5}), false, 1, 1,
                        c),
              ec::shape_mismatch, {"[1]", "[2, 5]"});
  BOOST_CHECK(c == sentinel);
}
