#define BOOST_TEST_MODULE kernels_kfac_factors
#include <boost/test/unit_test.hpp>
#include "tests/kernels/isa_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "kernels/cpu/kfac_factors.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// Brute force in double: explicit loops over the chosen rows, explicit
// patch extraction, sums of outer products.
struct reference {
  std::vector<std::vector<double>> a_rows; // ā per chosen row
  std::vector<std::vector<double>> g_rows; // g = N ds per chosen row

  static tensor average(const std::vector<std::vector<double>>& rows) {
    auto d = static_cast<int64_t>(rows.front().size());
    std::vector<double> sum(static_cast<size_t>(d * d), 0.0);
    for (const auto& v : rows)
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j)
          sum[static_cast<size_t>(i * d + j)] += v[i] * v[j];
    tensor result({d, d});
    for (int64_t i = 0; i < d * d; ++i)
      result[i] = static_cast<float>(sum[static_cast<size_t>(i)]
                                     / static_cast<double>(rows.size()));
    return result;
  }

  tensor A() const {
    return average(a_rows);
  }
  tensor G() const {
    return average(g_rows);
  }
};

reference ref_dense(const tensor& x, const tensor& ds, bool bias,
                    int64_t examples) {
  reference r;
  auto batch = x.dim(0);
  for (int64_t n = 0; n < examples; ++n) {
    std::vector<double> a, g;
    for (int64_t i = 0; i < x.dim(1); ++i)
      a.push_back(x[n * x.dim(1) + i]);
    if (bias)
      a.push_back(1.0);
    for (int64_t o = 0; o < ds.dim(1); ++o)
      g.push_back(static_cast<double>(batch) * ds[n * ds.dim(1) + o]);
    r.a_rows.push_back(a);
    r.g_rows.push_back(g);
  }
  return r;
}

std::vector<double> ref_patch(const conv2d_geometry& g, const tensor& x,
                              int64_t n, int64_t oh, int64_t ow, bool bias) {
  std::vector<double> p;
  for (int64_t kh = 0; kh < g.k_h; ++kh)
    for (int64_t kw = 0; kw < g.k_w; ++kw)
      for (int64_t c = 0; c < g.in_c; ++c) {
        auto ih = oh * g.stride_h - g.pad_top + kh;
        auto iw = ow * g.stride_w - g.pad_left + kw;
        bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
        p.push_back(
          inside ? x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + c] : 0.0);
      }
  if (bias)
    p.push_back(1.0);
  return p;
}

// `rows` lists the chosen (n, t) as n * T + t; all of them when empty.
reference ref_conv(const conv2d_geometry& g, const tensor& x,
                   const tensor& ds, bool bias,
                   std::vector<int64_t> rows = {}) {
  auto T = g.out_h * g.out_w;
  if (rows.empty())
    for (int64_t r = 0; r < g.batch * T; ++r)
      rows.push_back(r);
  reference ref;
  for (auto r : rows) {
    auto n = r / T;
    auto oh = (r % T) / g.out_w;
    auto ow = (r % T) % g.out_w;
    ref.a_rows.push_back(ref_patch(g, x, n, oh, ow, bias));
    std::vector<double> grad;
    for (int64_t o = 0; o < g.out_c; ++o)
      grad.push_back(static_cast<double>(g.batch)
                     * ds[((n * g.out_h + oh) * g.out_w + ow) * g.out_c + o]);
    ref.g_rows.push_back(grad);
  }
  return ref;
}

// Input in [-1, 1]; ds of a mean loss, so N ds is of order one.
struct conv_data {
  conv2d_geometry g;
  tensor x;
  tensor ds;
};

conv_data make_conv_data(const conv_case& k, std::mt19937& rng) {
  auto g = k.geometry();
  auto inv_n = 1.0f / static_cast<float>(k.n);
  return {g, random_tensor(g.input_shape(), rng),
          random_tensor(g.output_shape(), rng, -inv_n, inv_n)};
}

void check_symmetric(const tensor& m, const std::string& what) {
  BOOST_REQUIRE_EQUAL(m.rank(), 2);
  auto d = m.dim(0);
  BOOST_REQUIRE_EQUAL(m.dim(1), d);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < i; ++j)
      if (m[i * d + j] != m[j * d + i]) {
        BOOST_ERROR(what << " is not symmetric at (" << i << ", " << j
                         << ")");
        return;
      }
}

const std::vector<conv_case>& conv_cases() {
  static const std::vector<conv_case> cases{
    {2, 5, 5, 1, 3, 3, 2, 1, 1, padding::same},
    {3, 7, 6, 3, 3, 3, 4, 1, 1, padding::same},
    {2, 7, 5, 2, 3, 3, 3, 2, 2, padding::same},
    {2, 4, 4, 3, 2, 2, 1, 2, 2, padding::same},
    {1, 5, 5, 2, 5, 5, 3, 2, 2, padding::same},
    {2, 6, 7, 3, 3, 2, 2, 1, 1, padding::valid},
    {3, 9, 8, 2, 4, 3, 3, 2, 3, padding::valid},
    {2, 7, 7, 2, 3, 3, 2, 2, 2, padding::valid},
  };
  return cases;
}

/// conv_factors of `d` with 1, 2 and 3 threads, which must agree bit for
/// bit (fixed tiles and a fixed reduction order); returns the first A and
/// G.
std::pair<tensor, tensor> conv_factors_of_any_thread_count(
  const conv_data& d, const factor_sampling& s) {
  std::vector<tensor> as, gs;
  for (int threads : {1, 2, 3}) {
    tensor A, G;
    SYNCFAC_REQUIRE_OK(
      cpu::conv_factors(d.g, d.x, d.ds, true, s, threads, A, G));
    as.push_back(A);
    gs.push_back(G);
  }
  BOOST_CHECK(as[0] == as[1]);
  BOOST_CHECK(as[0] == as[2]);
  BOOST_CHECK(gs[0] == gs[1]);
  BOOST_CHECK(gs[0] == gs[2]);
  return {as[0], gs[0]};
}

/// A and G, the factors of `d` (with the bias or not) as `s` samples it,
/// equal the brute force on the `rows` rows that `s` picks.
void check_sampled(const conv_data& d, const factor_sampling& s, bool bias,
                   const tensor& A, const tensor& G, size_t rows,
                   double atol, double rtol, const std::string& what) {
  auto picked = cpu::sampled_rows(s, d.g.batch, d.g.locations());
  BOOST_REQUIRE_EQUAL(picked.size(), rows);
  auto ref = ref_conv(d.g, d.x, d.ds, bias, picked);
  check_close(A, ref.A(), atol, rtol, "A " + what);
  check_close(G, ref.G(), atol, rtol, "G " + what);
}

/// At most `examples` examples of a batch and `locations` locations per
/// example (0: all), the locations chosen by a generator seeded with
/// `seed`.
factor_sampling sampling_plan(int64_t examples, int64_t locations,
                              uint64_t seed = 0) {
  factor_sampling s;
  s.max_examples = examples;
  s.max_locations = locations;
  s.seed = seed;
  return s;
}

// A tensor holding a sentinel, to see that failed calls write nothing.
tensor sentinel() {
  return tensor({1}, {42.0f});
}

} // namespace

BOOST_AUTO_TEST_SUITE(dense)

BOOST_AUTO_TEST_CASE(matches_brute_force_with_and_without_bias) {
  std::mt19937 rng(1);
  for (bool bias : {false, true})
    for (int64_t n : {1, 5, 40}) {
      auto x = random_tensor({n, 7}, rng);
      auto inv_n = 1.0f / static_cast<float>(n);
      auto ds = random_tensor({n, 3}, rng, -inv_n, inv_n);
      tensor A, G;
      SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, bias, {}, 2, A, G));
      auto ref = ref_dense(x, ds, bias, n);
      auto what = "N " + std::to_string(n) + (bias ? " bias" : "");
      BOOST_CHECK(A.shape() == (tensor_shape{bias ? 8 : 7, bias ? 8 : 7}));
      check_close(A, ref.A(), 1e-6, 1e-5, "A " + what);
      check_close(G, ref.G(), 1e-6, 1e-5, "G " + what);
      check_symmetric(A, "A " + what);
      check_symmetric(G, "G " + what);
      if (bias)
        BOOST_CHECK_EQUAL(A[A.size() - 1], 1.0f);
    }
}

BOOST_AUTO_TEST_CASE(wide_layer_is_thread_count_independent) {
  // 301 columns: three blocks per side, lower-triangle blocks of unequal
  // size, and a tile boundary inside the batch.
  std::mt19937 rng(2);
  auto x = random_tensor({700, 300}, rng);
  auto ds = random_tensor({700, 10}, rng, -1.0f / 700, 1.0f / 700);
  tensor A1, G1, A2, G2, A3, G3;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, {}, 1, A1, G1));
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, {}, 2, A2, G2));
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, {}, 3, A3, G3));
  BOOST_CHECK(A1 == A2);
  BOOST_CHECK(G1 == G2);
  BOOST_CHECK(A1 == A3);
  BOOST_CHECK(G1 == G3);
  auto ref = ref_dense(x, ds, true, 700);
  check_close(A1, ref.A(), 1e-5, 1e-4, "A wide");
  check_close(G1, ref.G(), 1e-5, 1e-4, "G wide");
  check_symmetric(A1, "A wide");
}

BOOST_AUTO_TEST_CASE(max_examples_takes_the_first_examples) {
  std::mt19937 rng(3);
  auto x = random_tensor({6, 4}, rng);
  auto ds = random_tensor({6, 3}, rng, -1.0f / 6, 1.0f / 6);
  tensor A, G;
  factor_sampling s;
  s.max_examples = 3;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, s, 2, A, G));
  // The first 3 examples, averaged over 3, with g = 6 ds (the whole batch).
  auto ref = ref_dense(x, ds, true, 3);
  check_close(A, ref.A(), 1e-6, 1e-5, "A first 3");
  check_close(G, ref.G(), 1e-6, 1e-5, "G first 3");
  tensor full_a, full_g, big_a, big_g;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, {}, 2, full_a, full_g));
  s.max_examples = 6;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, s, 2, big_a, big_g));
  BOOST_CHECK(big_a == full_a);
  BOOST_CHECK(big_g == full_g);
  s.max_examples = 100;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, s, 1, big_a, big_g));
  BOOST_CHECK(big_a == full_a);
  BOOST_CHECK(big_g == full_g);
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes_and_write_nothing) {
  auto A = sentinel(), G = sentinel();
  auto check_untouched = [&] {
    BOOST_CHECK(A == sentinel());
    BOOST_CHECK(G == sentinel());
  };
  check_error(cpu::dense_factors(tensor({4, 3}), tensor({5, 2}), true, {}, 1,
                                 A, G),
              ec::shape_mismatch, {"dense_factors", "[4, 3]", "[5, 2]"});
  check_untouched();
  check_error(cpu::dense_factors(tensor({4, 3, 1}), tensor({4, 2}), true, {},
                                 1, A, G),
              ec::shape_mismatch, {"[4, 3, 1]", "[4, 2]", "rank 2"});
  check_untouched();
  check_error(cpu::dense_factors(tensor({0, 3}), tensor({0, 2}), true, {}, 1,
                                 A, G),
              ec::shape_mismatch, {"[0, 3]", "[0, 2]", "empty"});
  check_untouched();
  check_error(cpu::dense_factors(tensor({4, 3}), tensor({4, 2}), true, {}, 0,
                                 A, G),
              ec::invalid_argument, {"threads"});
  check_untouched();
  factor_sampling bad;
  bad.max_examples = -1;
  check_error(cpu::dense_factors(tensor({4, 3}), tensor({4, 2}), true, bad,
                                 1, A, G),
              ec::invalid_argument, {"max_examples -1"});
  check_untouched();
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(conv)

BOOST_AUTO_TEST_CASE(matches_brute_force) {
  std::mt19937 rng(10);
  for (const auto& k : conv_cases())
    for (bool bias : {false, true}) {
      auto d = make_conv_data(k, rng);
      tensor A, G;
      SYNCFAC_REQUIRE_OK(
        cpu::conv_factors(d.g, d.x, d.ds, bias, {}, 2, A, G));
      auto ref = ref_conv(d.g, d.x, d.ds, bias);
      auto what = k.str() + (bias ? " bias" : "");
      auto p = k.kh * k.kw * k.c + (bias ? 1 : 0);
      BOOST_CHECK(A.shape() == (tensor_shape{p, p}));
      BOOST_CHECK(G.shape() == (tensor_shape{k.o, k.o}));
      check_close(A, ref.A(), 1e-6, 1e-5, "A " + what);
      check_close(G, ref.G(), 1e-6, 1e-5, "G " + what);
      check_symmetric(A, "A " + what);
      check_symmetric(G, "G " + what);
    }
}

BOOST_AUTO_TEST_CASE(scalings_average_over_locations_and_undo_the_mean) {
  // x = 1 everywhere and VALID: every patch is all ones, so A = 1 exactly;
  // ds = 1/N (mean loss) gives g = N ds = 1 at each of the T locations, so
  // G = 1 exactly: an average over (n, t), neither T nor 1/N.
  conv_case k{4, 5, 6, 2, 2, 3, 3, 1, 1, padding::valid};
  auto g = k.geometry();
  BOOST_REQUIRE_EQUAL(g.locations(), 16);
  tensor x(g.input_shape());
  x.fill(1.0f);
  tensor ds(g.output_shape());
  ds.fill(0.25f);
  tensor A, G;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(g, x, ds, true, {}, 2, A, G));
  tensor ones_a({13, 13});
  ones_a.fill(1.0f);
  tensor ones_g({3, 3});
  ones_g.fill(1.0f);
  BOOST_CHECK(A == ones_a);
  BOOST_CHECK(G == ones_g);
}

BOOST_AUTO_TEST_CASE(g_equals_brute_force_exactly_on_exact_values) {
  // Gradients that are multiples of 1/8 with N = 8: every product and sum
  // is exact in float, so the scaling N^2 / (N T) is checked to the bit.
  conv_case k{8, 5, 5, 2, 3, 3, 4, 2, 2, padding::same};
  auto g = k.geometry();
  std::mt19937 rng(11);
  auto x = random_tensor(g.input_shape(), rng);
  tensor ds(g.output_shape());
  for (auto& v : ds.values())
    v = static_cast<float>(static_cast<int>(rng() % 5) - 2) / 8.0f;
  tensor A, G;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(g, x, ds, false, {}, 2, A, G));
  // T = 9 locations, 72 rows: the average of integer products is k / 72.
  auto ref = ref_conv(g, x, ds, false);
  BOOST_CHECK(G == ref.G());
}

BOOST_AUTO_TEST_CASE(whole_image_kernel_equals_dense_layer) {
  // VALID with the kernel as large as the image: T = 1 and the patch is the
  // NHWC-flattened image, so the factors are those of a dense layer.
  conv_case k{5, 3, 4, 2, 3, 4, 3, 1, 1, padding::valid};
  std::mt19937 rng(12);
  auto d = make_conv_data(k, rng);
  BOOST_REQUIRE_EQUAL(d.g.locations(), 1);
  tensor A, G, dense_a, dense_g;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, {}, 2, A, G));
  auto flat = d.x;
  flat.reshape({5, 24});
  auto flat_ds = d.ds;
  flat_ds.reshape({5, 3});
  SYNCFAC_REQUIRE_OK(
    cpu::dense_factors(flat, flat_ds, true, {}, 2, dense_a, dense_g));
  // Different summation orders (tiles of patches vs blocks of columns).
  check_close(A, dense_a, 1e-6, 1e-5, "A whole image");
  check_close(G, dense_g, 1e-6, 1e-5, "G whole image");
}

BOOST_AUTO_TEST_CASE(thread_counts_give_bit_identical_results) {
  // The seeds' conv2 kernel (5x5x16, 401 with the bias) on a smaller batch:
  // several tiles of rows and ten blocks of the lower triangle.
  conv_case k{4, 14, 14, 16, 5, 5, 16, 1, 1, padding::same};
  std::mt19937 rng(13);
  auto d = make_conv_data(k, rng);
  auto [A, G] = conv_factors_of_any_thread_count(d, {});
  auto ref = ref_conv(d.g, d.x, d.ds, true);
  check_close(A, ref.A(), 1e-5, 1e-4, "A conv2");
  check_close(G, ref.G(), 1e-5, 1e-4, "G conv2");
  check_symmetric(A, "A conv2");
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes_and_write_nothing) {
  conv_case k{2, 5, 5, 3, 3, 3, 4, 1, 1, padding::same};
  auto g = k.geometry();
  auto A = sentinel(), G = sentinel();
  auto check_untouched = [&] {
    BOOST_CHECK(A == sentinel());
    BOOST_CHECK(G == sentinel());
  };
  tensor ds(g.output_shape());
  check_error(cpu::conv_factors(g, tensor({2, 5, 5, 2}), ds, true, {}, 1, A,
                                G),
              ec::shape_mismatch, {"conv_factors", "[2, 5, 5, 2]",
                                   "[2, 5, 5, 3]"});
  check_untouched();
  check_error(cpu::conv_factors(g, tensor(g.input_shape()),
                                tensor({2, 5, 5, 3}), true, {}, 1, A, G),
              ec::shape_mismatch,
              {"[2, 5, 5, 3] does not fit input [2, 5, 5, 3]",
               "[2, 5, 5, 4]"});
  check_untouched();
  auto edited = g;
  edited.out_h = 7;
  check_error(cpu::conv_factors(edited, tensor(g.input_shape()), ds, true,
                                {}, 1, A, G),
              ec::invalid_argument, {"geometry"});
  check_untouched();
  factor_sampling bad;
  bad.max_locations = -2;
  check_error(cpu::conv_factors(g, tensor(g.input_shape()), ds, true, bad, 1,
                                A, G),
              ec::invalid_argument, {"max_locations -2"});
  check_untouched();
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sampling)

BOOST_AUTO_TEST_CASE(sampled_rows_are_distinct_sorted_per_example) {
  auto s = sampling_plan(3, 4, 7);
  auto rows = cpu::sampled_rows(s, 5, 9);
  BOOST_REQUIRE_EQUAL(rows.size(), 12u);
  for (int64_t n = 0; n < 3; ++n) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < 4; ++i) {
      auto r = rows[static_cast<size_t>(n * 4 + i)];
      BOOST_CHECK_EQUAL(r / 9, n);
      if (i > 0)
        BOOST_CHECK_LT(rows[static_cast<size_t>(n * 4 + i - 1)], r);
      seen.insert(r);
    }
    BOOST_CHECK_EQUAL(seen.size(), 4u);
  }
  BOOST_CHECK(cpu::sampled_rows(s, 5, 9) == rows);
  s.seed = 8;
  BOOST_CHECK(cpu::sampled_rows(s, 5, 9) != rows);
  // All locations: every row of the first examples, in order.
  s.max_locations = 9;
  auto all = cpu::sampled_rows(s, 5, 9);
  BOOST_REQUIRE_EQUAL(all.size(), 27u);
  for (size_t i = 0; i < all.size(); ++i)
    BOOST_CHECK_EQUAL(all[i], static_cast<int64_t>(i));
}

BOOST_AUTO_TEST_CASE(positions_are_uniform_over_seeds) {
  // Unbiasedness of the estimate rests on each location being chosen with
  // probability k / T; 4000 draws of 3 of 8 put 1500 on each location.
  std::vector<int64_t> hits(8, 0);
  factor_sampling s;
  s.max_locations = 3;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    s.seed = seed;
    for (auto r : cpu::sampled_rows(s, 1, 8))
      ++hits[static_cast<size_t>(r)];
  }
  for (auto h : hits)
    BOOST_CHECK_MESSAGE(std::abs(h - 1500) < 150, "hits " << h);
}

BOOST_AUTO_TEST_CASE(max_locations_matches_brute_force_on_the_subset) {
  conv_case k{3, 7, 6, 3, 3, 3, 4, 2, 1, padding::same};
  std::mt19937 rng(20);
  auto d = make_conv_data(k, rng);
  auto s = sampling_plan(0, 5, 99);
  tensor A, G;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 2, A, G));
  check_sampled(d, s, true, A, G, 15, 1e-6, 1e-5, "sampled");
  check_symmetric(A, "A sampled");
  // With max_examples too: the first 2 examples, g still scaled by N = 3.
  s.max_examples = 2;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, false, s, 1, A, G));
  check_sampled(d, s, false, A, G, 10, 1e-6, 1e-5, "sampled, 2 examples");
}

BOOST_AUTO_TEST_CASE(default_sub_sampling_of_the_convnet) {
  // The statistics pass's defaults on the ConvNet's shapes (16 examples,
  // 4 locations): few rows, wide factors whose widths are no multiple of
  // the kernel's blocks; the same for any thread count, exactly symmetric,
  // the brute force on the chosen rows.
  std::mt19937 rng(23);
  auto s = sampling_plan(16, 4, 5);
  for (auto k : {conv_case{20, 14, 14, 16, 5, 5, 16, 1, 1, padding::same},
                 conv_case{17, 28, 28, 1, 5, 5, 16, 1, 1, padding::same}}) {
    auto d = make_conv_data(k, rng);
    auto [A, G] = conv_factors_of_any_thread_count(d, s);
    check_sampled(d, s, true, A, G, 64, 1e-5, 1e-4, "conv");
    check_symmetric(A, "A conv");
    check_symmetric(G, "G conv");
    BOOST_CHECK_EQUAL(A[A.size() - 1], 1.0f);
  }
  auto x = random_tensor({128, 784}, rng);
  auto ds = random_tensor({128, 10}, rng, -1.0f / 128, 1.0f / 128);
  std::vector<tensor> as, gs;
  for (int threads : {1, 2}) {
    tensor A, G;
    SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, s, threads, A, G));
    as.push_back(A);
    gs.push_back(G);
  }
  BOOST_CHECK(as[0] == as[1]);
  BOOST_CHECK(gs[0] == gs[1]);
  auto ref = ref_dense(x, ds, true, 16);
  check_close(as[0], ref.A(), 1e-5, 1e-4, "A dense");
  check_close(gs[0], ref.G(), 1e-5, 1e-4, "G dense");
  check_symmetric(as[0], "A dense");
  BOOST_CHECK_EQUAL(as[0][as[0].size() - 1], 1.0f);
}

BOOST_AUTO_TEST_CASE(same_seed_same_result_other_seed_other_result) {
  conv_case k{4, 8, 8, 3, 3, 3, 5, 1, 1, padding::same};
  std::mt19937 rng(21);
  auto d = make_conv_data(k, rng);
  auto s = sampling_plan(0, 10, 1);
  tensor A1, G1, A2, G2, A3, G3;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 1, A1, G1));
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 2, A2, G2));
  BOOST_CHECK(A1 == A2);
  BOOST_CHECK(G1 == G2);
  s.seed = 2;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 1, A3, G3));
  BOOST_CHECK(A1 != A3);
  BOOST_CHECK(G1 != G3);
}

BOOST_AUTO_TEST_CASE(all_locations_equal_the_full_result) {
  conv_case k{3, 7, 5, 2, 3, 3, 3, 2, 2, padding::same};
  std::mt19937 rng(22);
  auto d = make_conv_data(k, rng);
  tensor full_a, full_g;
  SYNCFAC_REQUIRE_OK(
    cpu::conv_factors(d.g, d.x, d.ds, true, {}, 2, full_a, full_g));
  for (int64_t m : {d.g.locations(), d.g.locations() + 5}) {
    auto s = sampling_plan(3, m, 5);
    tensor A, G;
    SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 2, A, G));
    BOOST_CHECK(A == full_a);
    BOOST_CHECK(G == full_g);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ema)

BOOST_AUTO_TEST_CASE(first_update_is_the_statistic) {
  tensor raw;
  float weight = 0.0f;
  tensor stat({2, 2}, {1.0f, 0.5f, 0.5f, 3.0f});
  SYNCFAC_REQUIRE_OK(cpu::ema_update(raw, weight, stat, 0.95f));
  BOOST_CHECK(raw.shape() == stat.shape());
  tensor value;
  SYNCFAC_REQUIRE_OK(cpu::ema_value(raw, weight, value));
  check_close(value, stat, 0.0, 1e-6, "first value");
  // decay 0 keeps only the newest statistic, exactly.
  tensor raw0;
  float weight0 = 0.0f;
  SYNCFAC_REQUIRE_OK(cpu::ema_update(raw0, weight0, stat, 0.0f));
  SYNCFAC_REQUIRE_OK(cpu::ema_value(raw0, weight0, value));
  BOOST_CHECK(value == stat);
}

BOOST_AUTO_TEST_CASE(second_update_is_the_normalised_mix) {
  tensor raw;
  float weight = 0.0f;
  tensor s1({3}, {1.0f, -2.0f, 4.0f});
  tensor s2({3}, {3.0f, 2.0f, 0.0f});
  float d = 0.9f;
  SYNCFAC_REQUIRE_OK(cpu::ema_update(raw, weight, s1, d));
  SYNCFAC_REQUIRE_OK(cpu::ema_update(raw, weight, s2, d));
  // (d (1-d) s1 + (1-d) s2) / (d (1-d) + (1-d)) = (d s1 + s2) / (1 + d).
  tensor expected({3});
  for (int64_t i = 0; i < 3; ++i)
    expected[i] = static_cast<float>((0.9 * s1[i] + s2[i]) / 1.9);
  tensor value;
  SYNCFAC_REQUIRE_OK(cpu::ema_value(raw, weight, value));
  check_close(value, expected, 1e-6, 1e-6, "second value");
  BOOST_CHECK_CLOSE(weight, 1.0 - 0.9 * 0.9, 1e-4);
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused_and_changes_nothing) {
  tensor raw;
  float weight = 0.0f;
  tensor stat({2}, {1.0f, 2.0f});
  SYNCFAC_REQUIRE_OK(cpu::ema_update(raw, weight, stat, 0.5f));
  auto raw_before = raw;
  auto weight_before = weight;
  auto unchanged = [&] {
    BOOST_CHECK(raw == raw_before);
    BOOST_CHECK_EQUAL(weight, weight_before);
  };
  for (float d : {-0.1f, 1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    check_error(cpu::ema_update(raw, weight, stat, d), ec::invalid_argument,
                {"decay"});
    unchanged();
  }
  tensor nan_stat({2}, {1.0f, std::numeric_limits<float>::quiet_NaN()});
  check_error(cpu::ema_update(raw, weight, nan_stat, 0.5f), ec::non_finite,
              {"NaN"});
  unchanged();
  tensor inf_stat({2}, {std::numeric_limits<float>::infinity(), 1.0f});
  check_error(cpu::ema_update(raw, weight, inf_stat, 0.5f), ec::non_finite,
              {"Inf"});
  unchanged();
  check_error(cpu::ema_update(raw, weight, tensor({3}), 0.5f),
              ec::shape_mismatch, {"[3]", "[2]"});
  unchanged();
}

BOOST_AUTO_TEST_CASE(value_before_any_update_is_refused) {
  tensor out = sentinel();
  check_error(cpu::ema_value(tensor(), 0.0f, out), ec::invalid_argument,
              {"no covariance update yet"});
  check_error(cpu::ema_value(tensor({2}), 0.0f, out), ec::invalid_argument,
              {"no covariance update yet"});
  BOOST_CHECK(out == sentinel());
  // A weight without an average is a caller's bug, not a fresh start.
  tensor raw;
  float weight = 0.5f;
  check_error(cpu::ema_update(raw, weight, tensor({2}), 0.5f),
              ec::invalid_argument, {"weight"});
  BOOST_CHECK(raw.empty());
  BOOST_CHECK_EQUAL(weight, 0.5f);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(rows)

namespace {

/// scale · xᵀx in double.
tensor gram_of(const gram_rows& r) {
  auto m = r.x.dim(0);
  auto w = r.x.dim(1);
  tensor out({w, w});
  for (int64_t i = 0; i < w; ++i)
    for (int64_t j = 0; j < w; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < m; ++k)
        s += double{r.x[k * w + i]} * r.x[k * w + j];
      out[i * w + j] = static_cast<float>(s * r.scale);
    }
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(narrow_factors_come_as_rows_the_others_as_before) {
  std::mt19937 rng(11);
  // 40 inputs, 4 outputs: with 5 examples A (41 wide) comes as rows and G
  // (4 wide) as the matrix; with 50 both as matrices.
  for (int64_t examples : {5, 50}) {
    auto x = random_tensor({60, 40}, rng);
    auto ds = random_tensor({60, 4}, rng, -1.0f / 60, 1.0f / 60);
    factor_sampling s;
    s.max_examples = examples;
    tensor A0, G0, A, G;
    gram_rows A_rows, G_rows;
    SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, s, 2, A0, G0));
    SYNCFAC_REQUIRE_OK(
      cpu::dense_factors(x, ds, true, s, 2, A, G, A_rows, G_rows));
    auto what = std::to_string(examples) + " examples";
    BOOST_CHECK(G == G0);
    BOOST_CHECK(G_rows.x.empty());
    if (examples < 41) {
      BOOST_CHECK(A.empty());
      BOOST_REQUIRE(A_rows.x.shape() == (tensor_shape{examples, 41}));
      BOOST_CHECK_EQUAL(A_rows.scale, 1.0 / static_cast<double>(examples));
      check_close(gram_of(A_rows), A0, 1e-6, 1e-5, "A from rows, " + what);
    } else {
      BOOST_CHECK(A == A0);
      BOOST_CHECK(A_rows.x.empty());
    }
  }
  // A narrow G: 3 examples of 8 outputs.
  auto x = random_tensor({3, 2}, rng);
  auto ds = random_tensor({3, 8}, rng, -1.0f / 3, 1.0f / 3);
  tensor A0, G0, A, G;
  gram_rows A_rows, G_rows;
  SYNCFAC_REQUIRE_OK(cpu::dense_factors(x, ds, true, {}, 1, A0, G0));
  SYNCFAC_REQUIRE_OK(
    cpu::dense_factors(x, ds, true, {}, 1, A, G, A_rows, G_rows));
  BOOST_CHECK(A == A0);
  BOOST_CHECK(G.empty());
  BOOST_REQUIRE(G_rows.x.shape() == (tensor_shape{3, 8}));
  BOOST_CHECK_EQUAL(G_rows.scale, 9.0 / 3.0);
  check_close(gram_of(G_rows), G0, 1e-6, 1e-5, "G from rows");
}

BOOST_AUTO_TEST_CASE(conv_rows_are_the_sampled_patches) {
  std::mt19937 rng(12);
  // 5x5x3 kernel: patches of 76 with the 1; 2 examples x 4 locations.
  auto d = make_conv_data({3, 8, 8, 3, 5, 5, 4, 1, 1, padding::same}, rng);
  auto s = sampling_plan(2, 4, 9);
  tensor A0, G0, A, G;
  gram_rows A_rows, G_rows;
  SYNCFAC_REQUIRE_OK(cpu::conv_factors(d.g, d.x, d.ds, true, s, 2, A0, G0));
  SYNCFAC_REQUIRE_OK(
    cpu::conv_factors(d.g, d.x, d.ds, true, s, 2, A, G, A_rows, G_rows));
  BOOST_CHECK(A.empty());
  BOOST_REQUIRE(A_rows.x.shape() == (tensor_shape{8, 76}));
  BOOST_CHECK_EQUAL(A_rows.scale, 1.0 / 8.0);
  check_close(gram_of(A_rows), A0, 1e-6, 1e-5, "conv A from rows");
  // Rows of the reference patches, the 1 last.
  auto ref = ref_conv(d.g, d.x, d.ds, true, cpu::sampled_rows(s, 3, 64));
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 76; ++c)
      BOOST_REQUIRE_EQUAL(A_rows.x[r * 76 + c],
                          static_cast<float>(ref.a_rows[r][c]));
  // G (4 wide, 8 rows) stays a matrix, bit-identical.
  BOOST_CHECK(G == G0);
  BOOST_CHECK(G_rows.x.empty());
}

BOOST_AUTO_TEST_CASE(fold_rows_matches_brute_force) {
  std::mt19937 rng(13);
  gram_rows r1{random_tensor({3, 5}, rng), 0.5};
  gram_rows r2{random_tensor({4, 5}, rng), 2.0};
  auto start = random_tensor({5, 5}, rng);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < i; ++j)
      start[j * 5 + i] = start[i * 5 + j];
  auto raw = start;
  SYNCFAC_REQUIRE_OK(cpu::fold_rows(raw, 0.9, {r1, r2}, {0.25, 0.125}));
  auto g1 = gram_of(r1);
  auto g2 = gram_of(r2);
  tensor want({5, 5});
  for (int64_t k = 0; k < 25; ++k)
    want[k] = static_cast<float>(0.9 * start[k] + 0.25 * g1[k]
                                 + 0.125 * g2[k]);
  check_close(raw, want, 1e-6, 1e-5, "folded rows");
  check_symmetric(raw, "folded rows");
  // An empty matrix starts at zeros; no rows only scales.
  tensor fresh;
  SYNCFAC_REQUIRE_OK(cpu::fold_rows(fresh, 0.3, {r1}, {1.0}));
  check_close(fresh, g1, 1e-6, 1e-5, "from zeros");
  auto scaled = start;
  SYNCFAC_REQUIRE_OK(cpu::fold_rows(scaled, 0.5, {}, {}));
  for (int64_t k = 0; k < 25; ++k)
    BOOST_CHECK_EQUAL(scaled[k], 0.5f * start[k]);
}

BOOST_AUTO_TEST_CASE(fold_rows_refuses_bad_input_and_changes_nothing) {
  std::mt19937 rng(14);
  auto raw = random_tensor({4, 4}, rng);
  auto before = raw;
  gram_rows good{random_tensor({2, 4}, rng), 1.0};
  gram_rows wide{random_tensor({2, 5}, rng), 1.0};
  check_error(cpu::fold_rows(raw, 1.0, {good, wide}, {1.0, 1.0}),
              ec::shape_mismatch, {"[2, 5]", "[4, 4]", "block 1"});
  check_error(cpu::fold_rows(raw, 1.0, {good}, {}), ec::invalid_argument,
              {"1 blocks", "0 weights"});
  check_error(cpu::fold_rows(raw, 1.0, {good}, {-1.0}),
              ec::invalid_argument, {"block 0"});
  check_error(cpu::fold_rows(raw, std::nan(""), {good}, {1.0}),
              ec::invalid_argument, {"beta"});
  BOOST_CHECK(raw == before);
}

BOOST_AUTO_TEST_SUITE_END()
