#define BOOST_TEST_MODULE kernels_gemm
#include <boost/test/unit_test.hpp>
#include "tests/kernels/isa_fixture.hpp"

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

// -- gemm_batched ------------------------------------------------------------

namespace {

// Entry i of a [batch, rows, cols] tensor as a [rows, cols] one.
tensor entry(const tensor& x, int64_t i) {
  auto rows = x.dim(1);
  auto cols = x.dim(2);
  auto first = x.values().begin() + i * rows * cols;
  return tensor({rows, cols}, std::vector<float>(first, first + rows * cols));
}

// The batch's entries side by side as one [batch, rows, cols] tensor.
tensor stack(const std::vector<tensor>& entries) {
  std::vector<float> values;
  for (const auto& x : entries)
    values.insert(values.end(), x.values().begin(), x.values().end());
  return tensor({static_cast<int64_t>(entries.size()), entries[0].dim(0),
                 entries[0].dim(1)},
                std::move(values));
}

// gemm_batched by naive_gemm per entry; b of rank 2 is used by every entry.
tensor naive_gemm_batched(const tensor& a, bool ta, const tensor& b, bool tb,
                          float alpha, float beta, const tensor& c) {
  std::vector<tensor> out;
  for (int64_t i = 0; i < a.dim(0); ++i)
    out.push_back(naive_gemm(entry(a, i), ta,
                             b.rank() == 2 ? b : entry(b, i), tb, alpha, beta,
                             beta != 0 ? entry(c, i) : tensor{}));
  return stack(out);
}

tensor_shape batch_shape_of(int64_t batch, int64_t rows, int64_t cols,
                            bool trans) {
  auto entry_shape = shape_of(rows, cols, trans);
  return {batch, entry_shape[0], entry_shape[1]};
}

struct batched_dims {
  int64_t batch, m, n, k;
};

// Batch 1, odd sizes, small entries (one thread), entries whose rows the
// threads split between them (at entry boundaries or, 3 x 101 rows on two
// threads, within an entry) and one entry worth more threads than the
// batch has (split by matmul on its own).
const std::vector<batched_dims> batched_cases{
  {1, 1, 1, 1},      {1, 17, 9, 33},     {3, 5, 7, 2},
  {7, 13, 11, 19},   {64, 9, 10, 11},    {2, 130, 170, 150},
  {3, 101, 64, 90},  {1, 120, 90, 100}};

} // namespace

BOOST_AUTO_TEST_CASE(batched_matches_naive_for_all_transposes) {
  std::mt19937 rng(5);
  auto dev = make_cpu_backend(2);
  for (auto d : batched_cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, -0.5f}) {
          BOOST_TEST_CONTEXT("batch" << d.batch << " m" << d.m << " n" << d.n
                                     << " k" << d.k << " ta" << ta << " tb"
                                     << tb << " beta" << beta) {
            auto a = random_tensor(batch_shape_of(d.batch, d.m, d.k, ta), rng);
            auto b = random_tensor(batch_shape_of(d.batch, d.k, d.n, tb), rng);
            auto c = random_tensor({d.batch, d.m, d.n}, rng);
            auto ref = naive_gemm_batched(a, ta, b, tb, 1.5f, beta, c);
            SYNCFAC_REQUIRE_OK(dev->gemm_batched(a, ta, b, tb, 1.5f, beta, c));
            check_close(c, ref, 1e-5, 1e-4, "c");
          }
        }
}

BOOST_AUTO_TEST_CASE(batched_matches_gemm_per_entry) {
  std::mt19937 rng(6);
  for (int threads : {1, 2, 3}) {
    auto dev = make_cpu_backend(threads);
    for (auto d : batched_cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          BOOST_TEST_CONTEXT("threads" << threads << " batch" << d.batch
                                       << " ta" << ta << " tb" << tb) {
            auto a = random_tensor(batch_shape_of(d.batch, d.m, d.k, ta), rng);
            auto b = random_tensor(batch_shape_of(d.batch, d.k, d.n, tb), rng);
            auto c = random_tensor({d.batch, d.m, d.n}, rng);
            std::vector<tensor> per_entry;
            for (int64_t i = 0; i < d.batch; ++i) {
              auto ci = entry(c, i);
              SYNCFAC_REQUIRE_OK(dev->gemm(entry(a, i), ta, entry(b, i), tb,
                                           0.5f, 2.0f, ci));
              per_entry.push_back(ci);
            }
            SYNCFAC_REQUIRE_OK(dev->gemm_batched(a, ta, b, tb, 0.5f, 2.0f, c));
            // Equal up to summation order: on two threads an entry may be
            // split along other lines than gemm splits it (Eigen blocks
            // each part on its own).
            check_close(c, stack(per_entry), 1e-5, 1e-5, "c");
          }
        }
  }
}

BOOST_AUTO_TEST_CASE(batched_shares_a_rank_2_b) {
  std::mt19937 rng(7);
  auto dev = make_cpu_backend(2);
  for (auto d : batched_cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        BOOST_TEST_CONTEXT("batch" << d.batch << " ta" << ta << " tb" << tb) {
          auto a = random_tensor(batch_shape_of(d.batch, d.m, d.k, ta), rng);
          auto b = random_tensor(shape_of(d.k, d.n, tb), rng);
          auto c = random_tensor({d.batch, d.m, d.n}, rng);
          auto ref = naive_gemm_batched(a, ta, b, tb, 1.0f, 1.0f, c);
          SYNCFAC_REQUIRE_OK(dev->gemm_batched(a, ta, b, tb, 1.0f, 1.0f, c));
          check_close(c, ref, 1e-5, 1e-4, "c");
        }
      }
}

BOOST_AUTO_TEST_CASE(batched_beta_zero_resizes_and_ignores_c) {
  std::mt19937 rng(8);
  auto dev = make_cpu_backend(2);
  auto a = random_tensor({3, 4, 5}, rng);
  auto b = random_tensor({3, 5, 2}, rng);
  tensor c({2, 2}, {NAN, NAN, NAN, NAN});
  SYNCFAC_REQUIRE_OK(dev->gemm_batched(a, false, b, false, 1, 0, c));
  check_close(c, naive_gemm_batched(a, false, b, false, 1, 0, c), 1e-6, 1e-5,
              "c");
}

BOOST_AUTO_TEST_CASE(batched_output_may_alias_an_input) {
  std::mt19937 rng(9);
  auto dev = make_cpu_backend(2);
  auto a = random_tensor({4, 6, 6}, rng);
  auto b = random_tensor({4, 6, 6}, rng);
  auto ref = naive_gemm_batched(a, true, b, false, 1, 1, a);
  SYNCFAC_REQUIRE_OK(dev->gemm_batched(a, true, b, false, 1, 1, a));
  check_close(a, ref, 1e-5, 1e-4, "a = a^T b + a");
  // With beta 0 the output takes a new shape while a is still read.
  auto x = random_tensor({3, 5, 2}, rng);
  auto y = random_tensor({3, 5, 4}, rng);
  auto xy = naive_gemm_batched(x, true, y, false, 1, 0, x);
  SYNCFAC_REQUIRE_OK(dev->gemm_batched(x, true, y, false, 1, 0, x));
  check_close(x, xy, 1e-5, 1e-4, "x = x^T y");
}

BOOST_AUTO_TEST_CASE(batched_empty_and_zero_inner_dimension) {
  auto dev = make_cpu_backend(2);
  tensor c({2, 3, 4});
  c.fill(2.0f);
  SYNCFAC_REQUIRE_OK(dev->gemm_batched(tensor({2, 3, 0}), false,
                                       tensor({2, 0, 4}), false, 1, 0.5f, c));
  for (auto v : c.values())
    BOOST_CHECK_EQUAL(v, 1.0f);
  SYNCFAC_REQUIRE_OK(dev->gemm_batched(tensor({0, 3, 5}), false,
                                       tensor({5, 4}), false, 1, 0, c));
  BOOST_CHECK(c.shape() == (tensor_shape{0, 3, 4}));
}

BOOST_AUTO_TEST_CASE(batched_shape_errors_name_the_operands) {
  auto dev = make_cpu_backend(1);
  tensor sentinel({1}, {7.0f});
  auto c = sentinel;
  auto batched = [&](const tensor& a, bool ta, const tensor& b, bool tb,
                     float beta) {
    return dev->gemm_batched(a, ta, b, tb, 1, beta, c);
  };
  // a not [batch, rows, cols].
  check_error(batched(tensor({2, 3}), false, tensor({3, 5}), false, 0),
              ec::shape_mismatch,
              {"gemm_batched", "a [2, 3]", "b [3, 5]", "a must have rank 3"});
  // b neither [batch, rows, cols] nor one shared matrix.
  check_error(batched(tensor({2, 2, 3}), false, tensor({3}), false, 0),
              ec::shape_mismatch,
              {"a [2, 2, 3]", "b [3]", "b must have rank 3"});
  // Batch sizes differ.
  check_error(batched(tensor({2, 2, 3}), false, tensor({4, 3, 5}), false, 0),
              ec::shape_mismatch,
              {"a [2, 2, 3]", "b [4, 3, 5]", "batch sizes 2 vs 4"});
  // Inner dimensions differ, transposed or not, b batched or shared.
  check_error(batched(tensor({2, 2, 3}), false, tensor({2, 4, 5}), false, 0),
              ec::shape_mismatch,
              {"a [2, 2, 3]", "b [2, 4, 5]", "inner dimensions 3 vs 4"});
  check_error(batched(tensor({2, 2, 3}), true, tensor({4, 5}), true, 0),
              ec::shape_mismatch,
              {"a [2, 2, 3]", "b [4, 5]",
               "inner dimensions 2 (transposed) vs 5 (transposed)"});
  // c read (beta != 0) but not [batch, m, n].
  check_error(batched(tensor({2, 2, 3}), false, tensor({3, 5}), false, 1),
              ec::shape_mismatch, {"c [1]", "op(a) op(b) [2, 2, 5]"});
  BOOST_CHECK(c == sentinel);
}
