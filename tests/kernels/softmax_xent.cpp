#define BOOST_TEST_MODULE kernels_softmax_xent
#include <boost/test/unit_test.hpp>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

struct reference {
  tensor probs;
  double loss;
};

reference naive_softmax_xent(const tensor& logits, const label_vector& y) {
  auto n = logits.dim(0), k = logits.dim(1);
  reference ref{tensor(logits.shape()), 0.0};
  for (int64_t r = 0; r < n; ++r) {
    double mx = -1e300;
    for (int64_t j = 0; j < k; ++j)
      mx = std::max(mx, double{logits[r * k + j]});
    double sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += std::exp(double{logits[r * k + j]} - mx);
    for (int64_t j = 0; j < k; ++j)
      ref.probs[r * k + j]
        = static_cast<float>(std::exp(double{logits[r * k + j]} - mx) / sum);
    ref.loss += std::log(sum) + mx - logits[r * k + y[static_cast<size_t>(r)]];
  }
  ref.loss /= static_cast<double>(n);
  return ref;
}

label_vector random_labels(int64_t n, int32_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, k - 1);
  label_vector labels;
  for (int64_t i = 0; i < n; ++i)
    labels.push_back(dist(rng));
  return labels;
}

} // namespace

BOOST_AUTO_TEST_CASE(forward_matches_double_reference) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  for (auto [n, k] : {std::pair{1, 1}, {5, 10}, {128, 10}, {3000, 37}}) {
    auto logits = random_tensor({n, k}, rng, -8.0f, 8.0f);
    auto labels = random_labels(n, k, rng);
    tensor probs;
    float loss = 0;
    SYNCFAC_REQUIRE_OK(dev->softmax_xent_forward(logits, labels, probs,
                                                 loss));
    auto ref = naive_softmax_xent(logits, labels);
    check_close(probs, ref.probs, 1e-6, 1e-5, "probs");
    BOOST_CHECK_SMALL(double{loss} - ref.loss, 1e-6 + 1e-6 * ref.loss);
  }
}

BOOST_AUTO_TEST_CASE(huge_logits_stay_finite) {
  auto dev = make_cpu_backend(1);
  tensor logits({2, 3}, {1000.0f, -1000.0f, 0.0f, -5000.0f, -5001.0f,
                         -5002.0f});
  label_vector labels{1, 0};
  tensor probs;
  float loss = 0;
  SYNCFAC_REQUIRE_OK(dev->softmax_xent_forward(logits, labels, probs, loss));
  BOOST_CHECK(probs.all_finite());
  BOOST_CHECK(std::isfinite(loss));
  auto ref = naive_softmax_xent(logits, labels);
  BOOST_CHECK_CLOSE(double{loss}, ref.loss, 1e-4);
  check_close(probs, ref.probs, 1e-6, 1e-5, "probs");
}

BOOST_AUTO_TEST_CASE(backward_is_the_loss_gradient) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  auto logits = random_tensor({6, 5}, rng, -2.0f, 2.0f);
  auto labels = random_labels(6, 5, rng);
  tensor probs, dlogits;
  float loss = 0;
  SYNCFAC_REQUIRE_OK(dev->softmax_xent_forward(logits, labels, probs, loss));
  SYNCFAC_REQUIRE_OK(dev->softmax_xent_backward(probs, labels, dlogits));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 5; ++j) {
      double onehot = labels[static_cast<size_t>(r)] == j ? 1 : 0;
      BOOST_CHECK_SMALL(dlogits[r * 5 + j] - (probs[r * 5 + j] - onehot) / 6,
                        1e-7);
    }
  tensor scratch;
  auto f = [&] {
    float l = 0;
    SYNCFAC_REQUIRE_OK(dev->softmax_xent_forward(logits, labels, scratch, l));
    return double{l};
  };
  check_gradient("dlogits", logits, dlogits, f, [] { return true; },
                 fd_options{1e-2f, 2e-4, 2e-2, 400});
}

BOOST_AUTO_TEST_CASE(labels_out_of_range_name_index_and_value) {
  auto dev = make_cpu_backend(1);
  tensor logits({3, 4});
  tensor sentinel({1}, {9.0f});
  auto probs = sentinel;
  float loss = -1;
  check_error(dev->softmax_xent_forward(logits, {0, 3, 4}, probs, loss),
              ec::invalid_argument, {"index 2", "4", "[0, 4)"});
  check_error(dev->softmax_xent_forward(logits, {-1, 0, 0}, probs, loss),
              ec::invalid_argument, {"index 0", "-1"});
  BOOST_CHECK(probs == sentinel);
  BOOST_CHECK_EQUAL(loss, -1.0f);
  check_error(dev->softmax_xent_backward(logits, {0, 7, 0}, probs),
              ec::invalid_argument, {"index 1", "7"});
  check_error(dev->count_correct(logits, {0, 0, 9}).error(),
              ec::invalid_argument, {"index 2", "9"});
  BOOST_CHECK(probs == sentinel);
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes) {
  auto dev = make_cpu_backend(1);
  tensor probs;
  float loss = 0;
  check_error(dev->softmax_xent_forward(tensor({3, 4}), {0, 1}, probs, loss),
              ec::shape_mismatch, {"[3, 4]", "[2]"});
  check_error(dev->softmax_xent_forward(tensor({3, 4, 1}), {0, 1, 2}, probs,
                                        loss),
              ec::shape_mismatch, {"[3, 4, 1]"});
  check_error(dev->softmax_xent_backward(tensor({2, 4}), {0}, probs),
              ec::shape_mismatch, {"[2, 4]", "[1]"});
  check_error(dev->count_correct(tensor({2, 4}), {0, 1, 2}).error(),
              ec::shape_mismatch, {"[2, 4]", "[3]"});
}

BOOST_AUTO_TEST_CASE(count_correct_uses_first_maximum) {
  auto dev = make_cpu_backend(1);
  tensor logits({4, 3}, {0.1f, 0.9f, 0.2f,  // 1
                         5.0f, 5.0f, 1.0f,  // tie: 0
                         -1.0f, -2.0f, -0.5f, // 2
                         0.0f, 0.0f, 0.0f}); // 0
  auto correct = dev->count_correct(logits, {1, 1, 2, 0});
  BOOST_REQUIRE(correct);
  BOOST_CHECK_EQUAL(*correct, 3);
  auto none = dev->count_correct(tensor({0, 3}), {});
  BOOST_REQUIRE(none);
  BOOST_CHECK_EQUAL(*none, 0);
}

BOOST_AUTO_TEST_CASE(one_and_two_threads_agree) {
  std::mt19937 rng(3);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  auto logits = random_tensor({5000, 20}, rng, -4.0f, 4.0f);
  auto labels = random_labels(5000, 20, rng);
  tensor p1, p2, d1, d2;
  float l1 = 0, l2 = 0;
  SYNCFAC_REQUIRE_OK(one->softmax_xent_forward(logits, labels, p1, l1));
  SYNCFAC_REQUIRE_OK(two->softmax_xent_forward(logits, labels, p2, l2));
  BOOST_CHECK(p1 == p2);
  BOOST_CHECK_EQUAL(l1, l2);
  SYNCFAC_REQUIRE_OK(one->softmax_xent_backward(p1, labels, d1));
  SYNCFAC_REQUIRE_OK(two->softmax_xent_backward(p1, labels, d2));
  BOOST_CHECK(d1 == d2);
}
