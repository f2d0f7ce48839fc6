#define BOOST_TEST_MODULE model
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"
#include "tests/runtime/model_gradient_check.hpp"
#include "runtime/kfac/kfac_stats.hpp"
#include "runtime/model.hpp"
#include "runtime/model_builder.hpp"

#define REQUIRE_OK(expr)                                                      \
  do {                                                                        \
    auto require_ok_err = (expr);                                             \
    BOOST_REQUIRE_MESSAGE(!require_ok_err, render(require_ok_err));           \
  } while (false)

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
  test::check_gradient_by_differences(*m, *dev, images, labels, seed, 1e-3f,
                                      3e-4, "");
}

BOOST_AUTO_TEST_CASE(convnet_gradient_matches_finite_differences) {
  model_spec spec;
  spec.height = spec.width = 9;
  spec.init = init_scheme::he;
  check_model_gradient(spec, 3, 21);
}

BOOST_AUTO_TEST_CASE(mlp_gradient_matches_finite_differences) {
  auto spec = test::mlp_spec(4, {6, 5});
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
  auto spec = test::mlp_spec(2, {3});
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

namespace {

/// The first n examples of images [N, ...].
tensor image_prefix(const tensor& images, int64_t n) {
  auto shape = images.shape();
  auto per = images.size() / shape[0];
  shape[0] = n;
  tensor result{shape};
  std::copy(images.data(), images.data() + n * per, result.data());
  return result;
}

void check_close(const tensor& got, const tensor& expect, double tol,
                 const std::string& what) {
  BOOST_REQUIRE_MESSAGE(got.shape() == expect.shape(),
                        what << ": " << got.shape_string() << " vs "
                             << expect.shape_string());
  double worst = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    auto scale = std::max(1.0, std::abs(static_cast<double>(expect[i])));
    worst = std::max(worst,
                     std::abs(static_cast<double>(got[i]) - expect[i]) / scale);
  }
  BOOST_TEST(worst <= tol, what << ": worst relative difference " << worst);
}

void check_views_close(const model& got, const model& expect, double tol) {
  auto a = got.kfac_layers();
  auto b = expect.kfac_layers();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST(a[i].layer == b[i].layer);
    check_close(*a[i].input, *b[i].input, tol, a[i].layer + " input");
    // ds of the mean loss is O(1/N): compare N * ds.
    tensor ga = *a[i].preactivation_grad;
    tensor gb = *b[i].preactivation_grad;
    for (auto* t : {&ga, &gb})
      for (auto& v : t->values())
        v *= static_cast<float>(t->dim(0));
    check_close(ga, gb, tol, a[i].layer + " preactivation gradient");
    BOOST_TEST((a[i].geometry.batch == b[i].geometry.batch));
  }
}

/// A small graph: a residual block (the stem's output taken twice), a
/// side branch off the block's output, both joined by concat, then a
/// pool and the classifier; every fan-out sums two gradients.
model_description residual_graph() {
  auto layer = [](layer_type type, std::string name, int64_t units,
                  std::vector<std::string> inputs = {}) {
    layer_desc l;
    l.type = type;
    l.name = std::move(name);
    l.units = units;
    l.kernel = 3;
    l.pad = padding::same;
    l.inputs = std::move(inputs);
    return l;
  };
  auto relu = [] {
    layer_desc l;
    l.type = layer_type::activation;
    l.act = activation::relu;
    return l;
  };
  model_description d;
  d.name = "residual_graph";
  d.input_shape = {8, 8, 1};
  d.layers = {layer(layer_type::conv2d, "stem", 4),
              relu(),
              layer(layer_type::conv2d, "a", 4),
              relu(),
              layer(layer_type::conv2d, "b", 4),
              layer(layer_type::add, "res", 0, {"stem", "b"}),
              relu(),
              layer(layer_type::conv2d, "side", 2, {"res"}),
              layer(layer_type::concat, "joined", 0, {"res", "side"}),
              layer(layer_type::max_pool, "pool", 0),
              layer(layer_type::flatten, "", 0),
              layer(layer_type::dense, "out", 10)};
  d.layers[9].kernel = 2;
  d.layers[9].stride = 2;
  d.layers[7].kernel = 1;
  return d;
}

model_spec small_specs(int which) {
  if (which == 3) {
    auto spec = described_spec(residual_graph());
    spec.init = init_scheme::he;
    return spec;
  }
  model_spec spec;
  spec.init = init_scheme::glorot;
  if (which == 1) {
    spec.arch = model_arch::mlp;
    spec.hidden = {12, 7};
    spec.hidden_activation = activation::relu;
  } else if (which == 2) {
    spec.arch = model_arch::autoencoder;
    spec.height = spec.width = 4;
    spec.hidden = {9, 5, 3};
    spec.hidden_activation = activation::sigmoid;
  }
  return spec;
}

} // namespace

BOOST_AUTO_TEST_CASE(adopted_forward_gives_the_statistics_of_a_fresh_one) {
  // The statistics pass reuses the gradient pass's activations of the
  // first n examples: its K-FAC views must equal those of a forward pass
  // on those examples alone, for the labels and for sampled targets.
  auto dev = make_cpu_backend(2);
  for (int which : {0, 1, 2, 3}) {
    auto spec = small_specs(which);
    BOOST_TEST_CONTEXT("model " << which) {
      int64_t batch = 12;
      int64_t n = 5;
      auto images = random_images(batch, spec.height, spec.width,
                                  spec.channels, 21);
      label_vector labels;
      for (int64_t i = 0; i < batch; ++i)
        labels.push_back(static_cast<int32_t>((i * 7) % 10));
      label_vector first(labels.begin(), labels.begin() + n);
      auto part = image_prefix(images, n);
      auto main = make_model(spec, 8);
      auto adopted = make_model(spec, 8);
      auto fresh = make_model(spec, 8);
      BOOST_REQUIRE(main->forward_backward(*dev, images, labels));
      auto grads = main->gradients();
      for (bool sampled : {false, true}) {
        BOOST_TEST_CONTEXT((sampled ? "sampled" : "labels")) {
          REQUIRE_OK(adopted->adopt_forward(*main, n));
          BOOST_REQUIRE(fresh->forward(*dev, part, first));
          check_close(adopted->predictions(), fresh->predictions(), 1e-5,
                      "predictions");
          std::mt19937_64 r1{5};
          std::mt19937_64 r2{5};
          if (sampled) {
            REQUIRE_OK(adopted->backward_sampled(*dev, r1, false));
            REQUIRE_OK(fresh->backward_sampled(*dev, r2));
          } else {
            REQUIRE_OK(adopted->backward(*dev, first, false));
            REQUIRE_OK(fresh->backward(*dev, first));
          }
          check_views_close(*adopted, *fresh, 1e-4);
          // The statistics are those of the fresh pass.
          factor_sampling s;
          s.max_locations = 3;
          s.seed = 9;
          auto sa = layer_statistics(adopted->kfac_layers(), s, 2);
          auto sf = layer_statistics(fresh->kfac_layers(), s, 2);
          BOOST_REQUIRE(sa && sf);
          BOOST_REQUIRE_EQUAL(sa->size(), sf->size());
          for (size_t i = 0; i < sa->size(); ++i) {
            check_close((*sa)[i].a, (*sf)[i].a, 1e-4, (*sa)[i].layer + " A");
            check_close((*sa)[i].g, (*sf)[i].g, 1e-4, (*sa)[i].layer + " G");
          }
        }
      }
      // The source replica is untouched.
      for (size_t i = 0; i < grads.size(); ++i)
        BOOST_CHECK(main->gradients()[i].value == grads[i].value);
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_without_parameter_grads_gives_the_same_ds) {
  auto dev = make_cpu_backend(2);
  for (int which : {0, 1, 2, 3}) {
    auto spec = small_specs(which);
    BOOST_TEST_CONTEXT("model " << which) {
      auto images = random_images(6, spec.height, spec.width, spec.channels,
                                  31);
      label_vector labels{1, 2, 3, 4, 5, 6};
      auto full = make_model(spec, 2);
      auto data_only = make_model(spec, 2);
      BOOST_REQUIRE(full->forward_backward(*dev, images, labels));
      BOOST_REQUIRE(data_only->forward(*dev, images, labels));
      // Gradients stay as they were: zeros, as the model was made.
      REQUIRE_OK(data_only->backward(*dev, labels, false));
      check_views_close(*data_only, *full, 1e-5);
      for (const auto& g : data_only->gradients())
        for (auto v : g.value.values())
          BOOST_REQUIRE(v == 0.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(adopt_forward_refuses_what_does_not_fit) {
  auto dev = make_cpu_backend(1);
  auto main = make_model(model_spec{});
  auto other = make_model(model_spec{});
  // No forward pass yet.
  BOOST_TEST(other->adopt_forward(*main, 1));
  auto images = random_images(4, 28, 28, 1, 3);
  BOOST_REQUIRE(main->forward(*dev, images, {1, 2, 3, 4}));
  BOOST_TEST(other->adopt_forward(*main, 0));
  BOOST_TEST(other->adopt_forward(*main, 5));
  BOOST_TEST(main->adopt_forward(*main, 2));
  auto mlp = make_model(small_specs(1));
  BOOST_TEST(mlp->adopt_forward(*main, 2));
  BOOST_TEST(!other->adopt_forward(*main, 4));
}

BOOST_AUTO_TEST_CASE(layer_statistics_do_not_depend_on_the_thread_count) {
  // Sub-sampled statistics run one layer per thread; full ones split each
  // layer over the threads. Either way: the kernels' results, bit for bit.
  auto dev = make_cpu_backend(2);
  auto m = make_model(small_specs(0), 4);
  auto images = random_images(20, 28, 28, 1, 41);
  label_vector labels(20, 3);
  BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
  auto views = m->kfac_layers();
  for (int64_t examples : {16, 0}) {
    factor_sampling s;
    s.max_examples = examples;
    s.max_locations = examples > 0 ? 4 : 0;
    s.seed = 77;
    auto one = layer_statistics(views, s, 1);
    auto two = layer_statistics(views, s, 2);
    BOOST_REQUIRE(one && two);
    BOOST_REQUIRE_EQUAL(one->size(), views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      BOOST_TEST((*one)[i].layer == views[i].layer);
      BOOST_TEST((*two)[i].layer == views[i].layer);
      BOOST_CHECK((*one)[i].a == (*two)[i].a);
      BOOST_CHECK((*one)[i].g == (*two)[i].g);
      tensor a, g;
      auto err = views[i].kind == layer_kind::conv2d
                   ? cpu::conv_factors(views[i].geometry, *views[i].input,
                                       *views[i].preactivation_grad, true, s,
                                       1, a, g)
                   : cpu::dense_factors(*views[i].input,
                                        *views[i].preactivation_grad, true, s,
                                        1, a, g);
      REQUIRE_OK(err);
      BOOST_CHECK((*two)[i].a == a);
      BOOST_CHECK((*two)[i].g == g);
    }
  }
  // A layer without a backward pass is named.
  auto fresh = make_model(small_specs(0), 4);
  auto bad = layer_statistics(fresh->kfac_layers(), {}, 2);
  BOOST_TEST(!bad);
}

BOOST_AUTO_TEST_CASE(label_smoothing_moves_the_gradient_toward_the_uniform_target) {
  // The last layer's bias gradient is the mean of the logits' gradients:
  // smoothing by e adds e (share of class k among the labels - 1 / K) to
  // class k's entry, and leaves the reported loss the plain cross-entropy.
  auto dev = make_cpu_backend(1);
  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.hidden = {8};
  auto plain = make_model(spec);
  spec.label_smoothing = 0.2f;
  auto smoothed = make_model(spec);
  auto images = random_images(4, 28, 28, 1, 5);
  label_vector labels{1, 1, 3, 7};
  auto a = plain->forward_backward(*dev, images, labels);
  auto b = smoothed->forward_backward(*dev, images, labels);
  BOOST_REQUIRE(a && b);
  BOOST_TEST(a->mean_loss() == b->mean_loss());
  const auto& db_plain = plain->gradients().back().value;
  const auto& db_smooth = smoothed->gradients().back().value;
  BOOST_REQUIRE_EQUAL(db_plain.size(), 10);
  for (int64_t k = 0; k < 10; ++k) {
    double share = k == 1 ? 0.5 : (k == 3 || k == 7) ? 0.25 : 0.0;
    double want = db_plain[k] + 0.2 * (share - 0.1);
    BOOST_TEST(std::abs(db_smooth[k] - want) < 1e-6, "class " << k);
  }
}

BOOST_AUTO_TEST_CASE(label_smoothing_out_of_range_or_without_classes_is_refused) {
  model_spec spec;
  spec.label_smoothing = 1.0f;
  auto m = model::make(spec, 0);
  BOOST_REQUIRE(!m);
  BOOST_TEST(render(m.error()).find("--label_smoothing must be in [0, 1)")
             != std::string::npos);
  auto ae = autoencoder_spec();
  ae.label_smoothing = 0.1f;
  auto r = model::make(ae, 0);
  BOOST_REQUIRE(!r);
  BOOST_TEST(render(r.error()).find("reconstructs its input")
             != std::string::npos);
}

// -- graphs: layers that name their inputs ------------------------------------

BOOST_AUTO_TEST_CASE(a_residual_graph_gradient_matches_finite_differences) {
  // Fan-outs (stem, res) sum their consumers' gradients; add and concat
  // pass theirs on; the conv2d layers inside keep their K-FAC factors.
  auto spec = small_specs(3);
  check_model_gradient(spec, 3, 17);
  auto m = make_model(spec);
  const auto& layers = m->kfac_collection().layers;
  BOOST_REQUIRE_EQUAL(layers.size(), 5u);
  BOOST_TEST(layers[0].name == "stem");
  BOOST_TEST(layers[3].name == "side");
  BOOST_TEST(layers[3].a_dim == 4 * 1 * 1 + 1);
  // The summary says what a layer takes when it is not the one before.
  BOOST_TEST(m->summary().find("res (stem + b) -> [-1, 8, 8, 4]")
             != std::string::npos, m->summary());
  BOOST_TEST(m->summary().find("joined (res + side) -> [-1, 8, 8, 6]")
             != std::string::npos, m->summary());
}

/// A residual block as ResNets have it: conv, batch_norm with relu, conv,
/// batch_norm, the sum with the block's input and relu; then an avg_pool,
/// dropout, global_avg_pool and the classifier.
model_description normalised_residual_graph() {
  conv2d_options same;
  same.pad = padding::same;
  auto named = [&](std::string name) {
    auto opts = same;
    opts.name = std::move(name);
    return opts;
  };
  batch_norm_options bn_relu;
  bn_relu.act = activation::relu;
  bn_relu.momentum = 0.9;
  batch_norm_options bn_plain;
  bn_plain.name = "bn_b";
  auto built = model_builder{"normalised_residual", {6, 6, 2}}
                 .conv2d(3, 3, named("stem"))
                 .conv2d(3, 3, same)
                 .batch_norm(bn_relu)
                 .conv2d(3, 3, same)
                 .batch_norm(bn_plain)
                 .add({"stem", "bn_b"}, activation::relu)
                 .avg_pool(2, 2, padding::same)
                 .dropout(0.3)
                 .global_avg_pool()
                 .dense(4)
                 .build();
  BOOST_REQUIRE(built);
  return *built;
}

BOOST_AUTO_TEST_CASE(batch_norm_pools_and_dropout_gradients_match_finite_differences) {
  // Training passes: batch_norm differentiates through its batch's own
  // statistics, dropout through one mask (the helper's noise seed).
  auto spec = described_spec(normalised_residual_graph());
  spec.init = init_scheme::he;
  check_model_gradient(spec, 3, 31);
  // The starting values: gamma and the moving variance ones, beta and
  // the moving mean zeros, whatever the init scheme.
  auto m = make_model(spec);
  for (const auto& p : m->parameters()) {
    auto ends = [&](const std::string& suffix) {
      return p.name.size() > suffix.size()
             && p.name.compare(p.name.size() - suffix.size(), suffix.size(),
                               suffix) == 0;
    };
    if (ends("/gamma") || ends("/moving_variance"))
      BOOST_TEST(p.value.values() == std::vector<float>(3, 1.0f), p.name);
    if (ends("/beta") || ends("/moving_mean"))
      BOOST_TEST(p.value.values() == std::vector<float>(3, 0.0f), p.name);
  }
  // K-FAC keeps the three convolutions and the classifier; batch_norm's
  // variables are not in its collection (first-order).
  BOOST_TEST(m->kfac_collection().layers.size() == 4u);
}

/// Two residual blocks in a row, as ResNet's stages have them: the first
/// block's add (with its activation) feeds the second block's conv and its
/// identity path, so its output's gradient arrives in two shares that its
/// backward sums in its activation's pass (add_layer::backward_shares);
/// the stem's batch_norm output feeds a conv and the first add, whose
/// shares the model sums before batch_norm's backward reads them. tanh,
/// not ResNet's relu: through five normalised layers the ±1e-3 steps of
/// the differences cross relu's kinks and miss by 2-10 % with either
/// path (the kernels' suite checks the relu gradient of shares).
model_description stacked_residual_blocks() {
  conv2d_options same;
  same.pad = padding::same;
  auto conv = [&](std::string name, std::vector<std::string> inputs = {}) {
    auto opts = same;
    opts.name = std::move(name);
    opts.inputs = std::move(inputs);
    return opts;
  };
  auto bn = [](std::string name, activation act) {
    batch_norm_options opts;
    opts.name = std::move(name);
    opts.act = act;
    return opts;
  };
  auto built
    = model_builder{"stacked_residual", {5, 5, 2}}
        .conv2d(3, 3, conv("stem"))
        .batch_norm(bn("stem_bn", activation::tanh))
        .conv2d(3, 3, conv("b1_conv1"))
        .batch_norm(bn("b1_bn1", activation::tanh))
        .conv2d(3, 3, conv("b1_conv2"))
        .batch_norm(bn("b1_bn2", activation::identity))
        .add({"stem_bn", "b1_bn2"}, activation::tanh, "b1")
        .conv2d(3, 3, conv("b2_conv1", {"b1"}))
        .batch_norm(bn("b2_bn1", activation::tanh))
        .conv2d(3, 3, conv("b2_conv2"))
        .batch_norm(bn("b2_bn2", activation::identity))
        .add({"b1", "b2_bn2"}, activation::tanh, "b2")
        .global_avg_pool()
        .dense(4)
        .build();
  BOOST_REQUIRE(built);
  return *built;
}

BOOST_AUTO_TEST_CASE(stacked_residual_blocks_gradient_matches_finite_differences) {
  auto spec = described_spec(stacked_residual_blocks());
  spec.init = init_scheme::he;
  check_model_gradient(spec, 3, 37);
}

BOOST_AUTO_TEST_CASE(training_and_evaluation_passes_differ_as_the_layers_say) {
  auto dev = make_cpu_backend(2);
  auto spec = described_spec(normalised_residual_graph());
  spec.init = init_scheme::he;
  auto m = make_model(spec, 5);
  auto images = random_images(8, 6, 6, 2, 6);
  label_vector labels{0, 1, 2, 3, 0, 1, 2, 3};
  // A batch's noise seed fixes its masks: the same gradients twice, other
  // ones under another seed.
  m->set_noise_seed(11);
  BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
  auto first = m->gradients();
  m->set_noise_seed(11);
  BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
  for (size_t i = 0; i < first.size(); ++i)
    BOOST_TEST(m->gradients()[i].value.values() == first[i].value.values(),
               first[i].name);
  m->set_noise_seed(12);
  BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
  BOOST_TEST(m->gradients()[0].value.values() != first[0].value.values());
  // Evaluation is deterministic (no mask) and, with moving statistics
  // that differ from the batch's, differs from a training pass.
  auto eval1 = m->evaluate(*dev, images, labels);
  auto eval2 = m->evaluate(*dev, images, labels);
  BOOST_REQUIRE(eval1);
  BOOST_REQUIRE(eval2);
  BOOST_TEST(eval1->loss_sum == eval2->loss_sum);
  m->set_noise_seed(11);
  auto train = m->forward(*dev, images, labels);
  BOOST_REQUIRE(train);
  BOOST_TEST(train->loss_sum != eval1->loss_sum);
}

BOOST_AUTO_TEST_CASE(a_chain_with_named_inputs_is_the_chain) {
  // Naming every layer's predecessor builds the same model: the same
  // losses, predictions and gradients, bit for bit.
  auto dev = make_cpu_backend(2);
  model_spec plain;
  plain.height = plain.width = 12;
  auto desc = builtin_description(plain);
  auto names = layer_names(desc);
  std::string before = model_input_name;
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    desc.layers[i].inputs = {before};
    before = names[i];
  }
  auto named = described_spec(desc);
  named.height = named.width = 12;
  auto a = make_model(plain, 4);
  auto b = make_model(named, 4);
  auto images = random_images(5, 12, 12, 1, 8);
  label_vector labels{0, 1, 2, 3, 4};
  auto ra = a->forward_backward(*dev, images, labels);
  auto rb = b->forward_backward(*dev, images, labels);
  BOOST_REQUIRE(ra && rb);
  BOOST_TEST(ra->loss_sum == rb->loss_sum);
  BOOST_CHECK(a->predictions() == b->predictions());
  for (size_t i = 0; i < a->gradients().size(); ++i)
    BOOST_CHECK(a->gradients()[i].value == b->gradients()[i].value);
}

BOOST_AUTO_TEST_CASE(inputs_that_do_not_fit_are_refused_by_layer_and_shape) {
  auto refused = [](model_description d, std::vector<std::string> words) {
    auto m = model::make(described_spec(std::move(d)), 1);
    BOOST_REQUIRE(!m);
    auto text = render(m.error());
    for (const auto& w : words)
      BOOST_TEST(text.find(w) != std::string::npos, text);
  };
  // add of two shapes that differ: "side" has 2 channels, "res" 4.
  auto d = residual_graph();
  d.layers[8].type = layer_type::add;
  refused(d, {"layer 8 (add 'joined')", "add needs inputs of one shape",
              "input 1 is [-1, 8, 8, 2] and input 0 [-1, 8, 8, 4]"});
  // concat of inputs whose height differs.
  d = residual_graph();
  d.layers[7].stride = 2;
  refused(d, {"layer 8 (concat 'joined')", "along the last axis",
              "input 1 is [-1, 4, 4, 2] and input 0 [-1, 8, 8, 4]"});
  // A cycle, an unknown name, too few inputs for add, two for a conv2d.
  d = residual_graph();
  d.layers[5].inputs = {"stem", "side"};
  refused(d, {"layer 5 (add 'res')", "input 'side' is layer 7 (conv2d "
                                     "'side'), which comes later"});
  d.layers[5].inputs = {"stem", "res"};
  refused(d, {"input 'res' is the layer itself: a cycle"});
  d.layers[5].inputs = {"stem", "bogus"};
  refused(d, {"input 'bogus' names no layer"});
  d.layers[5].inputs = {"stem"};
  refused(d, {"add needs two or more layers in 'inputs', got 1"});
  d = residual_graph();
  d.layers[7].inputs = {"res", "stem"};
  refused(d, {"layer 7 (conv2d 'side')", "takes one input, got 2"});
  // A branch whose output goes nowhere.
  d = residual_graph();
  d.layers[8].inputs = {"res", "stem"};
  refused(d, {"layer 7 (conv2d 'side')", "its output goes to no layer"});
}
