#define BOOST_TEST_MODULE kernels_host_loops
#include <boost/test/unit_test.hpp>

// The host loops of the backend's defaults (kernels/batch_norm.cpp,
// backend_defaults.cpp's add_forward and activation_backward_sum) run over
// chunks of rows on the CPU backend's threads (kernels/host_chunks.hpp):
// their values against plain references in double, the same bits on 1 and
// 2 threads, and an add whose output is one of its inputs.

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/host_chunks.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// 25 chunks of 512 rows of 16 channels and a shorter last one (the rows
// are not a multiple of a chunk), enough elements for two threads.
const tensor_shape image_shape{61, 14, 15, 16};

struct statistics {
  tensor mean;
  tensor variance;
};

statistics statistics_of(backend& dev, const tensor& x) {
  statistics s;
  SYNCFAC_REQUIRE_OK(dev.batch_norm_statistics(x, s.mean, s.variance));
  return s;
}

/// Per channel mean and biased variance in double, the plain way.
std::vector<double> reference_moments(const tensor& x, bool variance) {
  const auto c = x.shape().back();
  const auto m = x.size() / c;
  std::vector<double> mean(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < x.size(); ++i)
    mean[static_cast<size_t>(i % c)] += x[i];
  for (auto& v : mean)
    v /= static_cast<double>(m);
  if (!variance)
    return mean;
  std::vector<double> var(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < x.size(); ++i) {
    auto d = x[i] - mean[static_cast<size_t>(i % c)];
    var[static_cast<size_t>(i % c)] += d * d;
  }
  for (auto& v : var)
    v /= static_cast<double>(m);
  return var;
}

/// x's statistics on 1 and 2 threads: the same bits, and the plain sums'
/// mean and variance within 1e-4 % and 1e-3 %.
statistics checked_statistics(const tensor& x) {
  auto s = statistics_of(*make_cpu_backend(1), x);
  auto s2 = statistics_of(*make_cpu_backend(2), x);
  BOOST_TEST(same_bits(s.mean, s2.mean));
  BOOST_TEST(same_bits(s.variance, s2.variance));
  auto mean = reference_moments(x, false);
  auto var = reference_moments(x, true);
  for (int64_t k = 0; k < x.shape().back(); ++k) {
    BOOST_CHECK_CLOSE(s.mean[k], mean[static_cast<size_t>(k)], 1e-4);
    BOOST_CHECK_CLOSE(s.variance[k], var[static_cast<size_t>(k)], 1e-3);
  }
  return s;
}

struct backward_sums {
  tensor dgamma;
  tensor dbeta;
  tensor dx;
};

/// batch_norm_backward's outputs by the formulas in double, from ds (the
/// activation's gradient).
backward_sums reference_backward(const tensor& x, const tensor& gamma,
                                 const tensor& mean, const tensor& inv_std,
                                 const tensor& ds) {
  const auto c = x.shape().back();
  const auto m = static_cast<double>(x.size() / c);
  std::vector<double> sum_ds(static_cast<size_t>(c), 0.0);
  std::vector<double> sum_ds_xhat(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < x.size(); ++i) {
    auto k = i % c;
    double xhat = (x[i] - mean[k]) * double{inv_std[k]};
    sum_ds[static_cast<size_t>(k)] += ds[i];
    sum_ds_xhat[static_cast<size_t>(k)] += ds[i] * xhat;
  }
  backward_sums out{tensor({c}), tensor({c}), tensor(x.shape())};
  for (int64_t k = 0; k < c; ++k) {
    out.dgamma[k] = static_cast<float>(sum_ds_xhat[static_cast<size_t>(k)]);
    out.dbeta[k] = static_cast<float>(sum_ds[static_cast<size_t>(k)]);
  }
  for (int64_t i = 0; i < x.size(); ++i) {
    auto k = i % c;
    double xhat = (x[i] - mean[k]) * double{inv_std[k]};
    out.dx[i] = static_cast<float>(
      gamma[k] * inv_std[k] / m
      * (m * ds[i] - sum_ds[static_cast<size_t>(k)]
         - xhat * sum_ds_xhat[static_cast<size_t>(k)]));
  }
  return out;
}

/// dgamma, dbeta and dx of batch_norm_backward against the formulas in
/// double, from ds as activation_backward gives it.
void check_backward(backend& dev, activation act, const tensor& x,
                    const tensor& gamma, const tensor& mean,
                    const tensor& inv_std, const tensor& y, const tensor& dy,
                    const tensor& dgamma, const tensor& dbeta,
                    const tensor& dx) {
  tensor ds;
  SYNCFAC_REQUIRE_OK(dev.activation_backward(act, y, dy, ds));
  auto expected = reference_backward(x, gamma, mean, inv_std, ds);
  check_close(dgamma, expected.dgamma, 1e-2, 1e-4, "dgamma");
  check_close(dbeta, expected.dbeta, 1e-2, 1e-4, "dbeta");
  check_close(dx, expected.dx, 1e-5, 1e-3, "dx");
}

} // namespace

BOOST_AUTO_TEST_CASE(the_chunks_cover_every_row_once_and_follow_the_shape_only) {
  auto rows = host_chunks::of(12'810, 16);
  BOOST_CHECK_EQUAL(rows.per_chunk, host_chunks::chunk_elements / 16);
  BOOST_CHECK_EQUAL(rows.count, 26);
  int64_t next = 0;
  for (int64_t i = 0; i < rows.count; ++i) {
    auto [first, last] = rows.range(i);
    BOOST_CHECK_EQUAL(first, next);
    BOOST_CHECK_LT(first, last);
    next = last;
  }
  BOOST_CHECK_EQUAL(next, 12'810);
  // A row wider than a chunk is a chunk of its own.
  auto wide = host_chunks::of(3, host_chunks::chunk_elements * 2);
  BOOST_CHECK_EQUAL(wide.per_chunk, 1);
  BOOST_CHECK_EQUAL(wide.count, 3);
}

BOOST_AUTO_TEST_CASE(batch_norm_statistics_match_the_plain_sums_and_not_the_thread_count) {
  std::mt19937 rng(7);
  // A mean far from zero against the spread: the centred second pass
  // keeps the variance.
  auto x = random_tensor(image_shape, rng, 99.0f, 101.0f);
  auto s = checked_statistics(x);
  // Uniform on a width of 2: variance 1/3.
  for (int64_t k = 0; k < 16; ++k)
    BOOST_CHECK_CLOSE(s.variance[k], 1.0 / 3.0, 2.0);
}

BOOST_AUTO_TEST_CASE(batch_norm_variance_counts_the_spread_between_chunks) {
  // Each chunk is centred on its own mean (kernels/batch_norm.cpp); a
  // drift along the rows, far from zero, makes the chunks' means differ,
  // so the variance holds only if their spread is added back.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> noise(-0.5f, 0.5f);
  tensor x{image_shape};
  const int64_t c = image_shape.back();
  const int64_t m = x.size() / c;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k = 0; k < c; ++k)
      x[r * c + k] = 1000.0f + 4.0f * static_cast<float>(r) / static_cast<float>(m)
                     * static_cast<float>(k + 1) + noise(rng);
  BOOST_REQUIRE_GT(host_chunks::of(m, c).count, 8);
  auto s = statistics_of(*make_cpu_backend(2), x);
  auto var = reference_moments(x, true);
  for (int64_t k = 0; k < c; ++k)
    BOOST_CHECK_CLOSE(s.variance[k], var[static_cast<size_t>(k)], 1e-3);
}

BOOST_AUTO_TEST_CASE(batch_norm_forward_and_backward_match_a_reference_and_not_the_thread_count) {
  std::mt19937 rng(11);
  auto x = random_tensor(image_shape, rng, -2.0f, 3.0f);
  auto gamma = random_tensor({16}, rng, 0.5f, 2.0f);
  auto beta = random_tensor({16}, rng);
  auto dy = random_tensor(image_shape, rng);
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      auto one = make_cpu_backend(1);
      auto two = make_cpu_backend(2);
      auto s = statistics_of(*one, x);
      tensor inv_std({16});
      for (int64_t k = 0; k < 16; ++k)
        inv_std[k] = 1.0f / std::sqrt(s.variance[k] + 1e-3f);
      tensor y1, y2;
      SYNCFAC_REQUIRE_OK(one->batch_norm_forward(x, gamma, beta, s.mean,
                                                 inv_std, act, y1));
      SYNCFAC_REQUIRE_OK(two->batch_norm_forward(x, gamma, beta, s.mean,
                                                 inv_std, act, y2));
      BOOST_TEST(same_bits(y1, y2));
      // Elementwise, so the output may be the input itself.
      tensor in_place = x;
      SYNCFAC_REQUIRE_OK(two->batch_norm_forward(in_place, gamma, beta, s.mean,
                                                 inv_std, act, in_place));
      BOOST_TEST(same_bits(in_place, y1));
      tensor expected_y(image_shape);
      for (int64_t i = 0; i < x.size(); ++i) {
        auto k = i % 16;
        expected_y[i] = static_cast<float>(
          act_ref(act, gamma[k] * (x[i] - s.mean[k]) * inv_std[k] + beta[k]));
      }
      check_close(y1, expected_y, 1e-5, 1e-5, "y");

      tensor scratch1, dg1, db1, dx1, scratch2, dg2, db2, dx2;
      SYNCFAC_REQUIRE_OK(one->batch_norm_backward(
        x, gamma, s.mean, inv_std, y1, dy, act, scratch1, dg1, db1, &dx1));
      SYNCFAC_REQUIRE_OK(two->batch_norm_backward(
        x, gamma, s.mean, inv_std, y1, dy, act, scratch2, dg2, db2, &dx2));
      BOOST_TEST(same_bits(dg1, dg2));
      BOOST_TEST(same_bits(db1, db2));
      BOOST_TEST(same_bits(dx1, dx2));
      // Again, with dx left out: the sums are the same bits.
      tensor dg_only, db_only;
      SYNCFAC_REQUIRE_OK(two->batch_norm_backward(
        x, gamma, s.mean, inv_std, y1, dy, act, scratch2, dg_only, db_only,
        nullptr));
      BOOST_TEST(same_bits(dg_only, dg1));
      BOOST_TEST(same_bits(db_only, db1));
      check_backward(*one, act, x, gamma, s.mean, inv_std, y1, dy, dg1, db1,
                     dx1);
    }
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_sums_hold_for_any_channel_count) {
  // The sums go in groups of 8 channels (kernels/column_sums.hpp): counts
  // below a group, with a part group, and of several groups, on rows
  // that are not a multiple of the two rows summed at once.
  std::mt19937 rng(17);
  for (int64_t c : {1, 3, 12, 40}) {
    BOOST_TEST_CONTEXT(c << " channels") {
      const tensor_shape shape{29, 9, 11, c};
      auto x = random_tensor(shape, rng, 49.0f, 51.0f);
      auto gamma = random_tensor({c}, rng, 0.5f, 2.0f);
      auto dy = random_tensor(shape, rng);
      auto one = make_cpu_backend(1);
      auto two = make_cpu_backend(2);
      auto s = checked_statistics(x);
      tensor inv_std({c});
      for (int64_t k = 0; k < c; ++k)
        inv_std[k] = 1.0f / std::sqrt(s.variance[k] + 1e-3f);
      tensor y, scratch, dg1, db1, dx1, dg2, db2, dx2;
      SYNCFAC_REQUIRE_OK(one->batch_norm_forward(x, gamma, gamma, s.mean,
                                                 inv_std, activation::relu, y));
      SYNCFAC_REQUIRE_OK(one->batch_norm_backward(x, gamma, s.mean, inv_std, y,
                                                  dy, activation::relu, scratch,
                                                  dg1, db1, &dx1));
      SYNCFAC_REQUIRE_OK(two->batch_norm_backward(x, gamma, s.mean, inv_std, y,
                                                  dy, activation::relu, scratch,
                                                  dg2, db2, &dx2));
      BOOST_TEST(same_bits(dg1, dg2));
      BOOST_TEST(same_bits(db1, db2));
      BOOST_TEST(same_bits(dx1, dx2));
      check_backward(*one, activation::relu, x, gamma, s.mean, inv_std, y, dy,
                     dg1, db1, dx1);
    }
  }
}

/// Three random operands of image_shape, backends of 1 and 2 threads,
/// and the operands' sum in the order the host loops take it.
struct three_operands {
  std::mt19937 rng;
  tensor a;
  tensor b;
  tensor c;
  std::unique_ptr<backend> one = make_cpu_backend(1);
  std::unique_ptr<backend> two = make_cpu_backend(2);

  explicit three_operands(unsigned seed)
    : rng(seed),
      a(random_tensor(image_shape, rng)),
      b(random_tensor(image_shape, rng)),
      c(random_tensor(image_shape, rng)) {
  }

  /// (a + b) + c.
  tensor sum_in_order() const {
    tensor sum(image_shape);
    for (int64_t i = 0; i < a.size(); ++i)
      sum[i] = (a[i] + b[i]) + c[i];
    return sum;
  }
};

BOOST_AUTO_TEST_CASE(add_sums_in_order_on_any_thread_count_and_into_an_input) {
  three_operands ops(13);
  auto& [rng, a, b, c, one, two] = ops;
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      tensor y1, y2;
      SYNCFAC_REQUIRE_OK(one->add_forward({&a, &b, &c}, act, y1));
      SYNCFAC_REQUIRE_OK(two->add_forward({&a, &b, &c}, act, y2));
      BOOST_TEST(same_bits(y1, y2));
      // (a + b) + c, then the activation's own loop.
      tensor expected;
      SYNCFAC_REQUIRE_OK(
        one->activation_forward(act, ops.sum_in_order(), expected));
      BOOST_TEST(same_bits(y1, expected));
      // The output may be any of the inputs (a gradient summed into the
      // tensor that holds one of its shares).
      for (int into = 0; into < 3; ++into) {
        BOOST_TEST_CONTEXT("output is input " << into) {
          tensor xs[3] = {a, b, c};
          SYNCFAC_REQUIRE_OK(two->add_forward({&xs[0], &xs[1], &xs[2]}, act,
                                              xs[into]));
          BOOST_TEST(same_bits(xs[into], expected));
        }
      }
    }
  }
  tensor wrong({61, 14, 15, 8});
  tensor y;
  auto err = one->add_forward({&a, &wrong}, activation::identity, y);
  check_error(err, ec::shape_mismatch, {"input 1", "[61, 14, 15, 8]"});
}

BOOST_AUTO_TEST_CASE(
  activation_gradient_of_shares_is_the_sum_then_the_gradient_in_one_pass) {
  three_operands ops(17);
  auto& [rng, a, b, c, one, two] = ops;
  auto y = random_tensor(image_shape, rng);
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      // What the model did before: (a + b) + c, then activation_backward.
      tensor expected;
      SYNCFAC_REQUIRE_OK(
        one->activation_backward(act, y, ops.sum_in_order(), expected));
      tensor dx1, dx2;
      SYNCFAC_REQUIRE_OK(one->activation_backward_sum(act, y, {&a, &b, &c},
                                                      dx1));
      SYNCFAC_REQUIRE_OK(two->activation_backward_sum(act, y, {&a, &b, &c},
                                                      dx2));
      BOOST_TEST(same_bits(dx1, expected));
      BOOST_TEST(same_bits(dx2, expected));
      // Into one of the shares (a gradient's first share is the tensor
      // the sum goes to).
      for (int into = 0; into < 3; ++into) {
        BOOST_TEST_CONTEXT("output is share " << into) {
          tensor dys[3] = {a, b, c};
          SYNCFAC_REQUIRE_OK(two->activation_backward_sum(
            act, y, {&dys[0], &dys[1], &dys[2]}, dys[into]));
          BOOST_TEST(same_bits(dys[into], expected));
        }
      }
      // One share: activation_backward itself.
      tensor single, reference;
      SYNCFAC_REQUIRE_OK(two->activation_backward_sum(act, y, {&a}, single));
      SYNCFAC_REQUIRE_OK(two->activation_backward(act, y, a, reference));
      BOOST_TEST(same_bits(single, reference));
    }
  }
  tensor wrong({61, 14, 15, 8});
  tensor dx;
  check_error(one->activation_backward_sum(activation::relu, y, {&a, &wrong},
                                           dx),
              ec::shape_mismatch, {"gradient share 1", "[61, 14, 15, 8]"});
  check_error(one->activation_backward_sum(activation::relu, wrong, {&a, &b},
                                           dx),
              ec::shape_mismatch, {"gradient share 0", "y [61, 14, 15, 8]"});
  check_error(one->activation_backward_sum(activation::relu, y, {}, dx),
              ec::invalid_argument, {"one or more gradient shares"});
}
