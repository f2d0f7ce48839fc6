#define BOOST_TEST_MODULE runtime_autoencoder
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model.hpp"
#include "tests/helpers.hpp"
#include "tests/runtime/model_gradient_check.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

std::unique_ptr<model> make_model(const model_spec& spec, uint64_t seed = 3) {
  auto m = model::make(spec, seed);
  BOOST_REQUIRE_MESSAGE(m, test::why(m));
  return std::move(*m);
}

/// A small autoencoder: h x w images, encoder `hidden` (the last the code).
model_spec tiny_spec(int64_t h, int64_t w, std::vector<int64_t> hidden,
                     activation act = activation::sigmoid,
                     init_scheme init = init_scheme::glorot) {
  model_spec spec;
  spec.arch = model_arch::autoencoder;
  spec.height = h;
  spec.width = w;
  spec.hidden = std::move(hidden);
  spec.hidden_activation = act;
  spec.init = init;
  return spec;
}

tensor random_images(int64_t n, int64_t h, int64_t w, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  tensor x{n, h, w, 1};
  for (int64_t i = 0; i < x.size(); ++i)
    x[i] = dist(rng);
  return x;
}

label_vector some_labels(int64_t n, int32_t offset = 0) {
  label_vector labels;
  for (int64_t i = 0; i < n; ++i)
    labels.push_back(static_cast<int32_t>((i + offset) % 10));
  return labels;
}

/// log(sigmoid(x)) in double, for any x.
double log_sigmoid(double x) {
  return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
}

/// The loss by the textbook formula, in double: mean over rows of
/// sum_d -[t log s(x) + (1 - t) log s(-x)].
double naive_sigmoid_xent(const tensor& logits, const tensor& targets) {
  double sum = 0;
  for (int64_t i = 0; i < logits.size(); ++i) {
    double x = logits[i];
    double t = targets[i];
    sum -= t * log_sigmoid(x) + (1 - t) * log_sigmoid(-x);
  }
  return sum / static_cast<double>(logits.dim(0));
}

} // namespace

// --- The kernel -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(sigmoid_xent_matches_a_naive_loop) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  for (auto [n, d] : {std::pair{1, 1}, {5, 16}, {64, 784}}) {
    auto logits = random_tensor({n, d}, rng, -12.0f, 12.0f);
    auto targets = random_tensor({n, d}, rng, 0.0f, 1.0f);
    tensor probs;
    float loss = 0;
    SYNCFAC_REQUIRE_OK(dev->sigmoid_xent_forward(logits, targets, probs,
                                                 loss));
    tensor ref_probs{logits.shape()};
    for (int64_t i = 0; i < logits.size(); ++i)
      ref_probs[i] = static_cast<float>(1.0 / (1.0 + std::exp(-double{logits[i]})));
    check_close(probs, ref_probs, 1e-7, 1e-6, "probs");
    auto ref = naive_sigmoid_xent(logits, targets);
    BOOST_TEST(std::abs(double{loss} - ref) <= 1e-6 * std::abs(ref) + 1e-6,
               "loss " << loss << " vs naive " << ref);
  }
}

BOOST_AUTO_TEST_CASE(sigmoid_xent_stays_exact_for_huge_logits) {
  auto dev = make_cpu_backend(1);
  // The naive log(sigmoid) would give log(0) = -inf for the wrong sign.
  tensor logits({2, 3}, {1000.0f, -1000.0f, 0.0f, -80.0f, 80.0f, 30.0f});
  tensor targets({2, 3}, {0.0f, 1.0f, 0.5f, 1.0f, 0.25f, 1.0f});
  tensor probs;
  float loss = 0;
  SYNCFAC_REQUIRE_OK(dev->sigmoid_xent_forward(logits, targets, probs, loss));
  BOOST_TEST(probs.all_finite());
  BOOST_TEST(probs[0] == 1.0f);
  BOOST_TEST(probs[1] == 0.0f);
  BOOST_TEST(probs[2] == 0.5f);
  // Row 0: 1000 + 1000 + log 2; row 1: 80 + 0.75 * 80 + ~exp(-30).
  double expect = (2000.0 + std::log(2.0) + 80.0 + 60.0) / 2.0;
  BOOST_TEST(std::abs(double{loss} - expect) < 1e-3);
  BOOST_TEST(std::abs(double{loss} - naive_sigmoid_xent(logits, targets))
             < 1e-3);
}

BOOST_AUTO_TEST_CASE(sigmoid_xent_backward_is_the_loss_gradient) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  auto logits = random_tensor({6, 5}, rng, -3.0f, 3.0f);
  auto targets = random_tensor({6, 5}, rng, 0.0f, 1.0f);
  tensor probs, dlogits;
  float loss = 0;
  SYNCFAC_REQUIRE_OK(dev->sigmoid_xent_forward(logits, targets, probs, loss));
  SYNCFAC_REQUIRE_OK(dev->sigmoid_xent_backward(probs, targets, dlogits));
  for (int64_t i = 0; i < dlogits.size(); ++i)
    BOOST_CHECK_SMALL(dlogits[i] - (probs[i] - targets[i]) / 6, 1e-7f);
  tensor scratch;
  auto f = [&] {
    float l = 0;
    SYNCFAC_REQUIRE_OK(dev->sigmoid_xent_forward(logits, targets, scratch,
                                                 l));
    return double{l};
  };
  check_gradient("dlogits", logits, dlogits, f, [] { return true; },
                 fd_options{1e-2f, 2e-4, 2e-2, 400});
}

BOOST_AUTO_TEST_CASE(sigmoid_xent_shape_errors_name_both_shapes) {
  auto dev = make_cpu_backend(1);
  tensor sentinel({1}, {9.0f});
  auto probs = sentinel;
  float loss = -1;
  check_error(dev->sigmoid_xent_forward(tensor({3, 4}), tensor({3, 5}), probs,
                                        loss),
              ec::shape_mismatch, {"[3, 4]", "[3, 5]"});
  check_error(dev->sigmoid_xent_forward(tensor({3, 4, 1}), tensor({3, 4, 1}),
                                        probs, loss),
              ec::shape_mismatch, {"[3, 4, 1]", "rank 2"});
  check_error(dev->sigmoid_xent_backward(tensor({2, 4}), tensor({4, 2}),
                                         probs),
              ec::shape_mismatch, {"[2, 4]", "[4, 2]"});
  BOOST_TEST(probs == sentinel);
  BOOST_TEST(loss == -1.0f);
}

BOOST_AUTO_TEST_CASE(sigmoid_xent_one_and_two_threads_agree) {
  std::mt19937 rng(3);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  auto logits = random_tensor({300, 784}, rng, -6.0f, 6.0f);
  auto targets = random_tensor({300, 784}, rng, 0.0f, 1.0f);
  tensor p1, p2, d1, d2;
  float l1 = 0, l2 = 0;
  SYNCFAC_REQUIRE_OK(one->sigmoid_xent_forward(logits, targets, p1, l1));
  SYNCFAC_REQUIRE_OK(two->sigmoid_xent_forward(logits, targets, p2, l2));
  BOOST_TEST(p1 == p2);
  BOOST_TEST(l1 == l2);
  SYNCFAC_REQUIRE_OK(one->sigmoid_xent_backward(p1, targets, d1));
  SYNCFAC_REQUIRE_OK(two->sigmoid_xent_backward(p1, targets, d2));
  BOOST_TEST(d1 == d2);
}

// --- The model ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(classic_autoencoder_has_the_papers_layers) {
  BOOST_TEST(*parse_model_arch("autoencoder") == model_arch::autoencoder);
  BOOST_TEST(*parse_init_scheme("sparse") == init_scheme::sparse);
  auto spec = autoencoder_spec();
  auto m = make_model(spec);
  const auto& ps = m->parameters();
  std::vector<std::pair<std::string, tensor_shape>> expect{
    {"enc0/weights", {784, 1000}}, {"enc1/weights", {1000, 500}},
    {"enc2/weights", {500, 250}},  {"enc3/weights", {250, 30}},
    {"dec0/weights", {30, 250}},   {"dec1/weights", {250, 500}},
    {"dec2/weights", {500, 1000}}, {"output/weights", {1000, 784}}};
  BOOST_REQUIRE_EQUAL(ps.size(), 2 * expect.size());
  int64_t count = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    BOOST_TEST(ps[2 * i].name == expect[i].first);
    BOOST_TEST(ps[2 * i].value.shape() == expect[i].second);
    BOOST_TEST(ps[2 * i + 1].value.shape()
               == (tensor_shape{expect[i].second[1]}));
    count += expect[i].second[0] * expect[i].second[1] + expect[i].second[1];
  }
  BOOST_TEST(value_count(ps) == count);
  BOOST_TEST(count == 2837314); // 784-1000-500-250-30 and its mirror
  BOOST_TEST_MESSAGE(m->summary());
  BOOST_TEST(m->summary().find("enc3 -> [-1, 30]") != std::string::npos);
  BOOST_TEST(m->summary().find("output -> [-1, 784]") != std::string::npos);
  // Sparse init: 15 nonzero N(0, 1) weights into every unit, zero biases.
  for (size_t i = 0; i < ps.size(); i += 2) {
    const auto& w = ps[i].value;
    auto rows = w.dim(0);
    auto units = w.dim(1);
    for (int64_t j : {int64_t{0}, units / 2, units - 1}) {
      int64_t nonzero = 0;
      for (int64_t r = 0; r < rows; ++r)
        nonzero += w[r * units + j] != 0.0f ? 1 : 0;
      BOOST_TEST(nonzero == 15, ps[i].name << " unit " << j);
    }
    for (auto v : ps[i + 1].value.values())
      BOOST_REQUIRE_EQUAL(v, 0.0f);
  }
  // A forward pass of two images gives pixel means in (0, 1).
  auto dev = make_cpu_backend(2);
  auto res = m->forward(*dev, random_images(2, 28, 28, 5), {0, 1});
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  BOOST_TEST(m->predictions().shape() == (tensor_shape{2, 784}));
  for (auto p : m->predictions().values())
    BOOST_REQUIRE(p >= 0.0f && p <= 1.0f);
}

BOOST_AUTO_TEST_CASE(widths_and_activations_follow_the_spec) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(tiny_spec(4, 3, {6, 5, 2}), 8);
  const auto& ps = m->parameters();
  BOOST_REQUIRE_EQUAL(ps.size(), 12u);
  BOOST_TEST(ps[0].value.shape() == (tensor_shape{12, 6}));
  BOOST_TEST(ps[4].value.shape() == (tensor_shape{5, 2}));
  BOOST_TEST(ps[6].name == "dec0/weights");
  BOOST_TEST(ps[6].value.shape() == (tensor_shape{2, 5}));
  BOOST_TEST(ps[8].name == "dec1/weights");
  BOOST_TEST(ps[8].value.shape() == (tensor_shape{5, 6}));
  BOOST_TEST(ps[10].value.shape() == (tensor_shape{6, 12}));
  BOOST_REQUIRE(m->forward_backward(*dev, random_images(50, 4, 3, 2),
                                    some_labels(50)));
  auto views = m->kfac_layers();
  BOOST_REQUIRE_EQUAL(views.size(), 6u);
  // Layer i's output, recomputed from its input with activation `act`,
  // is layer i + 1's input: hidden layers use the spec's activation, the
  // code layer (enc2) none.
  auto check_layer = [&](size_t i, activation act) {
    const auto& x = *views[i].input;
    const auto& y = *views[i + 1].input;
    const auto& w = ps[2 * i].value;
    const auto& b = ps[2 * i + 1].value;
    auto in = w.dim(0);
    auto out = w.dim(1);
    for (int64_t n = 0; n < 50; n += 7)
      for (int64_t j = 0; j < out; ++j) {
        double s = b[j];
        for (int64_t k = 0; k < in; ++k)
          s += double{x[n * in + k]} * w[k * out + j];
        double expect = act == activation::sigmoid ? 1 / (1 + std::exp(-s))
                                                   : s;
        BOOST_TEST(std::abs(y[n * out + j] - expect) < 1e-5,
                   views[i].layer << " [" << n << ", " << j << "]");
      }
  };
  check_layer(0, activation::sigmoid);
  check_layer(1, activation::sigmoid);
  check_layer(2, activation::identity);
  check_layer(3, activation::sigmoid);
  BOOST_TEST(views[3].layer == "dec0");
  BOOST_TEST(views[3].input->shape() == (tensor_shape{50, 2}));
  // No hidden width: no code layer.
  auto spec = tiny_spec(4, 3, {});
  auto bad = model::make(spec, 0);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("code") != std::string::npos);
  spec.hidden = {4, 0};
  BOOST_TEST(!model::make(spec, 0));
}

BOOST_AUTO_TEST_CASE(loss_is_the_bernoulli_nll_of_the_input) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(tiny_spec(3, 3, {5, 2}), 4);
  int64_t n = 7;
  auto images = random_images(n, 3, 3, 6);
  auto res = m->forward_backward(*dev, images, some_labels(n));
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  const auto& p = m->predictions();
  BOOST_REQUIRE(p.shape() == (tensor_shape{n, 9}));
  double nll = 0;
  double sq = 0;
  for (int64_t i = 0; i < p.size(); ++i) {
    double x = images[i];
    double q = p[i];
    nll -= x * std::log(q) + (1 - x) * std::log(1 - q);
    sq += (x - q) * (x - q);
  }
  BOOST_TEST(res->count == n);
  BOOST_TEST(res->correct == 0);
  BOOST_TEST(std::abs(res->loss_sum - nll) < 1e-4 * nll);
  BOOST_TEST(std::abs(res->sq_error_sum - sq) < 1e-6 * sq);
  BOOST_TEST(std::abs(res->reconstruction_error() - sq / n) < 1e-6 * sq);
  // Results add up across batches.
  auto twice = *res;
  twice += *res;
  BOOST_TEST(twice.reconstruction_error() == res->reconstruction_error());
  // The labels play no part: other labels, the same loss and gradients.
  auto grads = m->gradients();
  auto again = m->forward_backward(*dev, images, some_labels(n, 3));
  BOOST_REQUIRE(again);
  BOOST_TEST(again->loss_sum == res->loss_sum);
  for (size_t i = 0; i < grads.size(); ++i)
    BOOST_TEST(m->gradients()[i].value == grads[i].value);
}

// The whole model's gradient against central finite differences of the
// mean loss.
BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences) {
  auto dev = make_cpu_backend(2);
  for (auto act : {activation::sigmoid, activation::tanh}) {
    for (auto init : {init_scheme::glorot, init_scheme::sparse}) {
      auto m = make_model(tiny_spec(3, 3, {6, 4, 2}, act, init), 21);
      int64_t n = 4;
      auto images = random_images(n, 3, 3, 22);
      auto labels = some_labels(n);
      BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
      check_gradient_by_differences(
        *m, *dev, images, labels, 5, 5e-3f, 5e-4,
        std::string{to_string(act)} + " " + to_string(init) + " ");
    }
  }
}

BOOST_AUTO_TEST_CASE(bernoulli_targets_are_binary_with_the_model_mean) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(tiny_spec(2, 3, {3, 2}), 4);
  // Zero weights: every example's output logits are the output bias.
  for (auto& p : m->parameters())
    p.value.fill(0.0f);
  auto& bias = m->parameters()[m->parameters().size() - 1];
  BOOST_REQUIRE(bias.name == "output/bias");
  std::vector<float> logits{-3.0f, -1.0f, 0.0f, 0.5f, 2.0f, 4.0f};
  bias.value = tensor({6}, logits);
  int64_t n = 4000;
  auto images = random_images(n, 2, 3, 1);
  auto labels = some_labels(n);
  BOOST_REQUIRE(m->forward(*dev, images, labels));
  std::mt19937_64 rng{42};
  BOOST_TEST(m->sample_targets(rng).empty()); // no labels to draw
  rng.seed(42);
  auto targets = m->sample_pixel_targets(rng);
  BOOST_REQUIRE(targets.shape() == (tensor_shape{n, 6}));
  for (int64_t d = 0; d < 6; ++d) {
    double ones = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto t = targets[i * 6 + d];
      BOOST_REQUIRE(t == 0.0f || t == 1.0f);
      ones += t;
    }
    double mean = 1.0 / (1.0 + std::exp(-double{logits[static_cast<size_t>(d)]}));
    BOOST_TEST(std::abs(ones / n - mean) < 0.025,
               "pixel " << d << ": " << ones / n << " vs " << mean);
  }
  // backward_sampled draws the same targets from the same seed and runs
  // the backward pass against them: the output bias gradient is
  // mean_n (p - t_n).
  std::mt19937_64 again{42};
  BOOST_TEST(m->sample_pixel_targets(again) == targets);
  std::mt19937_64 for_backward{42};
  BOOST_REQUIRE(!m->backward_sampled(*dev, for_backward));
  const auto& grad = m->gradients().back();
  BOOST_REQUIRE(grad.name == "output/bias");
  for (int64_t d = 0; d < 6; ++d) {
    double expect = 0;
    for (int64_t i = 0; i < n; ++i)
      expect += m->predictions()[i * 6 + d] - targets[i * 6 + d];
    expect /= static_cast<double>(n);
    BOOST_TEST(std::abs(grad.value[d] - expect) < 1e-5);
  }
  // A categorical model draws nothing per pixel.
  auto c = make_model(mlp_spec(2, {3}), 1);
  BOOST_REQUIRE(c->forward(*dev, random_images(4, 2, 2, 1), some_labels(4)));
  std::mt19937_64 r3{3};
  BOOST_TEST(c->sample_pixel_targets(r3).size() == 0);
}

BOOST_AUTO_TEST_CASE(categorical_backward_sampled_is_backward_of_sampled_labels) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(mlp_spec(3, {4}), 2);
  auto images = random_images(16, 3, 3, 7);
  BOOST_REQUIRE(m->forward(*dev, images, some_labels(16)));
  std::mt19937_64 a{9};
  auto targets = m->sample_targets(a);
  BOOST_REQUIRE(!m->backward(*dev, targets));
  auto expect = m->gradients();
  std::mt19937_64 b{9};
  BOOST_REQUIRE(!m->backward_sampled(*dev, b));
  for (size_t i = 0; i < expect.size(); ++i)
    BOOST_TEST(m->gradients()[i].value == expect[i].value);
  BOOST_TEST(a() == b()); // both drew the same number of values
}

BOOST_AUTO_TEST_CASE(kfac_collection_is_bernoulli_with_every_dense_layer) {
  auto m = make_model(autoencoder_spec());
  const auto& c = m->kfac_collection();
  BOOST_TEST((c.distribution == predictive_distribution::bernoulli));
  BOOST_TEST(!c.validate());
  std::vector<std::string> names{"enc0", "enc1", "enc2", "enc3",
                                 "dec0", "dec1", "dec2", "output"};
  std::vector<int64_t> outs{1000, 500, 250, 30, 250, 500, 1000, 784};
  std::vector<int64_t> ins{784, 1000, 500, 250, 30, 250, 500, 1000};
  BOOST_REQUIRE_EQUAL(c.layers.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& l = c.layers[i];
    BOOST_TEST(l.name == names[i]);
    BOOST_TEST((l.kind == layer_kind::dense));
    BOOST_TEST(l.weight_name == names[i] + "/weights");
    BOOST_TEST(l.bias_name == names[i] + "/bias");
    BOOST_TEST(l.a_dim == ins[i] + 1);
    BOOST_TEST(l.g_dim == outs[i]);
    BOOST_TEST(l.locations == 1);
  }
  model_spec mlp;
  mlp.arch = model_arch::mlp;
  BOOST_TEST((make_model(mlp)->kfac_collection().distribution
              == predictive_distribution::categorical));
  // The views after a pass line up with the collection.
  auto dev = make_cpu_backend(2);
  auto tiny = make_model(tiny_spec(2, 2, {3, 2}));
  BOOST_REQUIRE(tiny->forward_backward(*dev, random_images(5, 2, 2, 3),
                                       some_labels(5)));
  auto views = tiny->kfac_layers();
  const auto& tc = tiny->kfac_collection();
  BOOST_REQUIRE_EQUAL(views.size(), tc.layers.size());
  for (size_t i = 0; i < views.size(); ++i) {
    BOOST_TEST(views[i].layer == tc.layers[i].name);
    BOOST_TEST(views[i].input->dim(1) + 1 == tc.layers[i].a_dim);
    BOOST_TEST(views[i].preactivation_grad->dim(1) == tc.layers[i].g_dim);
  }
}
