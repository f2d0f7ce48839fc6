#define BOOST_TEST_MODULE model
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>

#include "kernels/backend.hpp"
#include "runtime/error.hpp"
#include "tests/helpers.hpp"
#include "runtime/model.hpp"

using namespace syncfac;

namespace {

std::unique_ptr<model> make_model(model_spec spec, uint64_t seed = 3) {
  auto m = model::make(spec, seed);
  BOOST_REQUIRE_MESSAGE(m, test::why(m));
  return std::move(*m);
}

tensor random_images(int64_t n, int64_t h, int64_t w, int64_t c,
                     uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  tensor x{n, h, w, c};
  for (int64_t i = 0; i < x.size(); ++i)
    x[i] = dist(rng);
  return x;
}

double stddev(const tensor& x) {
  double sum = 0;
  double sq = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  auto n = static_cast<double>(x.size());
  return std::sqrt(sq / n - (sum / n) * (sum / n));
}

} // namespace

BOOST_AUTO_TEST_CASE(convnet_has_the_seeds_layers) {
  auto m = make_model(model_spec{});
  const auto& ps = m->parameters();
  BOOST_REQUIRE_EQUAL(ps.size(), 6u);
  BOOST_TEST(ps[0].name == "conv0/kernel");
  BOOST_TEST(ps[0].value.shape() == (tensor_shape{5, 5, 1, 16}));
  BOOST_TEST(ps[2].name == "conv2/kernel");
  BOOST_TEST(ps[2].value.shape() == (tensor_shape{5, 5, 16, 16}));
  BOOST_TEST(ps[4].name == "fc4/weights");
  BOOST_TEST(ps[4].value.shape() == (tensor_shape{784, 10}));
  BOOST_TEST(value_count(ps) == 400 + 16 + 6400 + 16 + 7840 + 10);
  BOOST_TEST_MESSAGE(m->summary());
  BOOST_TEST(m->summary().find("pool3 -> [-1, 7, 7, 16]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(seeds_init_matches_the_tf_example) {
  auto m = make_model(model_spec{});
  const auto& ps = m->parameters();
  BOOST_TEST(std::abs(stddev(ps[2].value) - 0.01) < 0.001);
  BOOST_TEST(std::abs(stddev(ps[4].value) - 1.0) < 0.05);
  for (int i : {1, 3, 5})
    for (int64_t j = 0; j < ps[i].value.size(); ++j)
      BOOST_REQUIRE_EQUAL(ps[i].value[j], 0.0f);
}

BOOST_AUTO_TEST_CASE(glorot_and_he_scale_by_fans) {
  model_spec spec;
  spec.init = init_scheme::glorot;
  auto g = make_model(spec);
  // Glorot uniform on [784, 10]: limit sqrt(6 / 794), stddev limit / sqrt(3).
  auto limit = std::sqrt(6.0 / 794.0);
  BOOST_TEST(std::abs(stddev(g->parameters()[4].value) - limit / std::sqrt(3.0))
             < 0.005);
  spec.init = init_scheme::he;
  auto h = make_model(spec);
  // He normal on conv2 [5, 5, 16, 16]: stddev sqrt(2 / 400).
  BOOST_TEST(std::abs(stddev(h->parameters()[2].value) - std::sqrt(2.0 / 400))
             < 0.005);
}

BOOST_AUTO_TEST_CASE(same_seed_same_parameters) {
  auto a = make_model(model_spec{}, 11);
  auto b = make_model(model_spec{}, 11);
  auto c = make_model(model_spec{}, 12);
  BOOST_TEST(a->parameters()[0].value == b->parameters()[0].value);
  BOOST_TEST(a->parameters()[0].value != c->parameters()[0].value);
}

BOOST_AUTO_TEST_CASE(mlp_uses_the_requested_widths) {
  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.hidden = {20, 7};
  spec.hidden_activation = activation::sigmoid;
  auto m = make_model(spec);
  const auto& ps = m->parameters();
  BOOST_REQUIRE_EQUAL(ps.size(), 6u);
  BOOST_TEST(ps[0].value.shape() == (tensor_shape{784, 20}));
  BOOST_TEST(ps[2].value.shape() == (tensor_shape{20, 7}));
  BOOST_TEST(ps[4].value.shape() == (tensor_shape{7, 10}));
}

BOOST_AUTO_TEST_CASE(bad_specs_are_refused) {
  model_spec spec;
  spec.num_classes = 1;
  BOOST_TEST(!model::make(spec, 0));
  spec = model_spec{};
  spec.arch = model_arch::mlp;
  spec.hidden = {10, 0};
  auto m = model::make(spec, 0);
  BOOST_REQUIRE(!m);
  BOOST_TEST(render(m.error()).find("hidden layer width 0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(batches_that_do_not_fit_are_refused) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(model_spec{});
  auto bad = m->forward_backward(*dev, tensor{2, 27, 28, 1}, {0, 1});
  BOOST_REQUIRE(!bad);
  auto text = render(bad.error());
  BOOST_TEST(text.find("[2, 27, 28, 1]") != std::string::npos);
  auto few_labels = m->forward_backward(*dev, tensor{2, 28, 28, 1}, {0});
  BOOST_REQUIRE(!few_labels);
  BOOST_TEST(render(few_labels.error()).find("1 labels") != std::string::npos);
  tensor nan_images{1, 28, 28, 1};
  nan_images[5] = NAN;
  BOOST_TEST(!m->forward_backward(*dev, nan_images, {0}));
  auto bad_label = m->forward_backward(*dev, tensor{1, 28, 28, 1}, {10});
  BOOST_TEST(!bad_label);
}

// The whole model's gradient against central finite differences of the
// mean loss, in a small configuration where float round-off stays small.
void check_model_gradient(model_spec spec, int64_t n, uint64_t seed) {
  auto dev = make_cpu_backend(2);
  auto m = make_model(spec, seed);
  auto images = random_images(n, spec.height, spec.width, spec.channels,
                              seed + 1);
  label_vector labels;
  for (int64_t i = 0; i < n; ++i)
    labels.push_back(static_cast<int32_t>(i % spec.num_classes));
  auto base = m->forward_backward(*dev, images, labels);
  BOOST_REQUIRE(base);
  auto grads = m->gradients();
  std::mt19937_64 rng{seed};
  for (size_t p = 0; p < grads.size(); ++p) {
    auto& value = m->parameters()[p].value;
    for (int probe = 0; probe < 6; ++probe) {
      auto i = static_cast<int64_t>(rng() % static_cast<uint64_t>(value.size()));
      const float eps = 1e-3f;
      auto saved = value[i];
      value[i] = saved + eps;
      auto up = m->evaluate(*dev, images, labels)->mean_loss();
      value[i] = saved - eps;
      auto down = m->evaluate(*dev, images, labels)->mean_loss();
      value[i] = saved;
      auto numeric = (up - down) / (2 * eps);
      auto analytic = static_cast<double>(grads[p].value[i]);
      BOOST_TEST_CONTEXT(grads[p].name << "[" << i << "]") {
        BOOST_TEST(std::abs(numeric - analytic)
                     <= 3e-4 + 2e-2 * std::abs(numeric),
                   "numeric " << numeric << " vs analytic " << analytic);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(convnet_gradient_matches_finite_differences) {
  model_spec spec;
  spec.height = spec.width = 9;
  spec.init = init_scheme::he;
  check_model_gradient(spec, 3, 21);
}

BOOST_AUTO_TEST_CASE(mlp_gradient_matches_finite_differences) {
  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.height = spec.width = 4;
  spec.hidden = {6, 5};
  spec.init = init_scheme::glorot;
  for (auto act : {activation::tanh, activation::sigmoid, activation::relu}) {
    spec.hidden_activation = act;
    check_model_gradient(spec, 4, 5);
  }
}

BOOST_AUTO_TEST_CASE(kfac_views_expose_inputs_and_preactivation_grads) {
  auto dev = make_cpu_backend(1);
  auto m = make_model(model_spec{});
  auto images = random_images(4, 28, 28, 1, 9);
  BOOST_REQUIRE(m->forward_backward(*dev, images, {1, 2, 3, 4}));
  auto views = m->kfac_layers();
  BOOST_REQUIRE_EQUAL(views.size(), 3u);
  BOOST_TEST(views[0].layer == "conv0");
  BOOST_TEST((views[0].kind == layer_kind::conv2d));
  BOOST_TEST(views[0].input == &images); // no copy of the batch
  BOOST_TEST(views[0].preactivation_grad->shape()
             == (tensor_shape{4, 28, 28, 16}));
  BOOST_TEST(views[0].geometry.locations() == 28 * 28);
  BOOST_TEST(views[1].input->shape() == (tensor_shape{4, 14, 14, 16}));
  BOOST_TEST((views[2].kind == layer_kind::dense));
  BOOST_TEST(views[2].input->shape() == (tensor_shape{4, 784}));
  BOOST_TEST(views[2].preactivation_grad->shape() == (tensor_shape{4, 10}));
  // The dense layer's weight gradient is input^T * preactivation gradient.
  const auto& x = *views[2].input;
  const auto& ds = *views[2].preactivation_grad;
  const auto& dw = m->gradients()[4].value;
  for (int64_t i : {0, 100, 783})
    for (int64_t j : {0, 9}) {
      double expect = 0;
      for (int64_t n = 0; n < 4; ++n)
        expect += static_cast<double>(x[n * 784 + i]) * ds[n * 10 + j];
      BOOST_TEST(std::abs(expect - dw[i * 10 + j]) < 1e-4);
    }
}

BOOST_AUTO_TEST_CASE(sampled_targets_follow_the_predictive_distribution) {
  auto dev = make_cpu_backend(1);
  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.height = spec.width = 2;
  spec.hidden = {3};
  spec.num_classes = 3;
  auto m = make_model(spec, 4);
  // Zero weights and a bias favouring class 2: softmax (e^0, e^0, e^2).
  for (auto& p : m->parameters())
    p.value.fill(0.0f);
  m->parameters()[3].value[2] = 2.0f;
  int64_t n = 4000;
  auto images = random_images(n, 2, 2, 1, 1);
  label_vector labels(static_cast<size_t>(n), 0);
  BOOST_REQUIRE(m->forward(*dev, images, labels));
  std::mt19937_64 rng{42};
  auto targets = m->sample_targets(rng);
  BOOST_REQUIRE_EQUAL(targets.size(), static_cast<size_t>(n));
  int64_t twos = 0;
  for (auto t : targets) {
    BOOST_REQUIRE(t >= 0 && t < 3);
    twos += t == 2 ? 1 : 0;
  }
  double expect = std::exp(2.0) / (2.0 + std::exp(2.0));
  BOOST_TEST(std::abs(static_cast<double>(twos) / n - expect) < 0.03);
  // Same seed, same draws; the backward pass against them runs.
  std::mt19937_64 again{42};
  BOOST_TEST(m->sample_targets(again) == targets);
  BOOST_TEST(!m->backward(*dev, targets));
}
