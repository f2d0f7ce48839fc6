#define BOOST_TEST_MODULE runtime_layers
#include <boost/test/unit_test.hpp>

// A conv2d layer followed by a max_pool layer runs its backward pass fused
// (runtime/layers.hpp, backward_through_pool): the pool writes the conv's
// pre-activation gradient and the conv continues from it. These cases hold
// it to the bits of the two layers' own backward passes, run one after the
// other on a second pair with the same parameters.

#include <cmath>
#include <memory>
#include <random>
#include <sstream>

#include "kernels/backend.hpp"
#include "runtime/layers.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

struct pair_case {
  int64_t n, h, w, c, k, out_c, stride;
  padding pad;
  int64_t pool_k, pool_stride;
  padding pool_pad;

  std::string str() const {
    std::ostringstream os;
    os << "x[" << n << "," << h << "," << w << "," << c << "] conv " << k
       << "x" << k << "x" << out_c << "/" << stride << " " << to_string(pad)
       << ", pool " << pool_k << "/" << pool_stride << " "
       << to_string(pool_pad);
    return os.str();
  }
};

const std::vector<pair_case>& pair_cases() {
  static const std::vector<pair_case> cases{
    {3, 28, 28, 1, 5, 16, 1, padding::same, 3, 2, padding::same}, // ConvNet
    {2, 14, 14, 16, 5, 16, 1, padding::same, 3, 2, padding::same},
    {3, 9, 7, 3, 3, 5, 2, padding::valid, 2, 2, padding::valid},
    {2, 11, 10, 4, 3, 7, 1, padding::valid, 3, 1, padding::same},
    {2, 8, 9, 2, 4, 33, 2, padding::same, 2, 1, padding::valid},
  };
  return cases;
}

/// A conv2d layer and the max_pool after it, with their own parameters
/// and gradients.
struct conv_pool {
  layer_ptr conv;
  layer_ptr pool;
  parameter_set params;
  parameter_set grads;

  conv_pool(const pair_case& pc, activation act)
    : conv(make_conv2d_layer("conv", pc.k, pc.c, pc.out_c, pc.stride, pc.pad,
                             act)),
      pool(make_max_pool_layer("pool", pc.pool_k, pc.pool_stride,
                               pc.pool_pad)),
      params(conv->make_parameters()),
      grads(conv->make_parameters()) {
    conv->bind(params.data(), grads.data());
  }

  void set(const parameter_set& values) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].value = values[i].value;
  }

  void forward(backend& dev, const tensor& x) {
    SYNCFAC_REQUIRE_OK(conv->forward(dev, x));
    SYNCFAC_REQUIRE_OK(pool->forward(dev, conv->output()));
  }

  /// The two layers' own passes, one after the other.
  void backward_apart(backend& dev, const tensor& dy, tensor* dx,
                      bool parameter_grads) {
    SYNCFAC_REQUIRE_OK(pool->backward(dev, dy, &d_conv_output));
    SYNCFAC_REQUIRE_OK(parameter_grads
                         ? conv->backward(dev, d_conv_output, dx)
                         : conv->backward_data(dev, d_conv_output, dx));
  }

  const tensor& ds() const {
    return *conv->kfac()->preactivation_grad;
  }

  // The conv's output gradient of backward_apart: an identity conv's K-FAC
  // view shows it as its ds, so it lives as long as the pair.
  tensor d_conv_output;
};

parameter_set random_parameters(const conv_pool& p, std::mt19937& rng) {
  auto values = p.conv->make_parameters();
  for (auto& v : values)
    v.value = random_tensor(v.value.shape(), rng, -0.5f, 0.5f);
  return values;
}

/// The pair's backward fused and apart from dy (into dx unless
/// with_dx is false): the same ds, dx and, where parameter_grads, the same
/// parameter gradients.
void check_fused_matches_apart(backend& dev, conv_pool& fused,
                               conv_pool& apart, const tensor& dy,
                               bool with_dx, bool parameter_grads) {
  tensor dx_fused, dx_apart;
  SYNCFAC_REQUIRE_OK(backward_through_pool(dev, *fused.conv, *fused.pool, dy,
                                           with_dx ? &dx_fused : nullptr,
                                           parameter_grads));
  apart.backward_apart(dev, dy, with_dx ? &dx_apart : nullptr,
                       parameter_grads);
  BOOST_CHECK(same_bits(fused.ds(), apart.ds()));
  if (with_dx)
    BOOST_CHECK(same_bits(dx_fused, dx_apart));
  if (parameter_grads)
    for (size_t i = 0; i < fused.grads.size(); ++i)
      BOOST_CHECK_MESSAGE(same_bits(fused.grads[i].value,
                                    apart.grads[i].value),
                          fused.grads[i].name);
}

} // namespace

BOOST_AUTO_TEST_CASE(only_a_conv_before_a_max_pool_runs_fused) {
  auto conv = make_conv2d_layer("c", 3, 2, 4, 1, padding::same,
                                activation::relu);
  auto pool = make_max_pool_layer("p", 2, 2, padding::valid);
  auto dense = make_dense_layer("d", 4, 4, activation::relu);
  auto flat = make_flatten_layer("f");
  BOOST_TEST(pool_takes_activation(*conv, *pool));
  BOOST_TEST(!pool_takes_activation(*pool, *conv));
  BOOST_TEST(!pool_takes_activation(*conv, *conv));
  BOOST_TEST(!pool_takes_activation(*dense, *pool));
  BOOST_TEST(!pool_takes_activation(*flat, *pool));
  auto dev = make_cpu_backend(1);
  tensor dy;
  check_error(backward_through_pool(*dev, *pool, *conv, dy, nullptr, true),
              ec::invalid_argument, {"'p'", "'c'", "conv2d", "max_pool"});
}

BOOST_AUTO_TEST_CASE(fused_pair_gives_the_bits_of_the_layers_apart) {
  // dw, db, dx and the K-FAC view's ds, for the full backward and for
  // K-FAC's statistics pass (no parameter gradients), with and without dx.
  std::mt19937 rng(1);
  for (int threads : {1, 2, 3}) {
    auto dev = make_cpu_backend(threads);
    for (const auto& pc : pair_cases())
      for (auto act : all_activations()) {
        BOOST_TEST_CONTEXT(pc.str() << " " << to_string(act) << " threads "
                                    << threads) {
          conv_pool fused(pc, act);
          conv_pool apart(pc, act);
          auto values = random_parameters(fused, rng);
          fused.set(values);
          apart.set(values);
          auto x = random_tensor({pc.n, pc.h, pc.w, pc.c}, rng);
          fused.forward(*dev, x);
          apart.forward(*dev, x);
          auto dy = random_tensor(fused.pool->output().shape(), rng);
          check_fused_matches_apart(*dev, fused, apart, dy, true, true);
          // The statistics pass: ds and dx only; the gradients keep theirs.
          auto kept = fused.grads;
          auto dy2 = random_tensor(dy.shape(), rng);
          check_fused_matches_apart(*dev, fused, apart, dy2, true, false);
          for (size_t i = 0; i < kept.size(); ++i)
            BOOST_CHECK(same_bits(fused.grads[i].value, kept[i].value));
          // A first layer: no dx.
          check_fused_matches_apart(*dev, fused, apart, dy, false, true);
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(fused_pair_after_adopt_prefix_reads_the_adopted_state) {
  // A replica that adopts the first examples of another's forward pass
  // (model::adopt_forward) runs the fused backward on the adopted pool
  // output and winners: the bits of the layers apart on the same state.
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(2);
  const auto& pc = pair_cases()[0];
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      conv_pool source(pc, act);
      auto values = random_parameters(source, rng);
      source.set(values);
      auto x = random_tensor({pc.n, pc.h, pc.w, pc.c}, rng);
      source.forward(*dev, x);
      int64_t n = 2;
      auto prefix = tensor({n, pc.h, pc.w, pc.c});
      std::copy(x.data(), x.data() + prefix.size(), prefix.data());
      conv_pool fused(pc, act);
      conv_pool apart(pc, act);
      for (auto* p : {&fused, &apart}) {
        p->set(values);
        SYNCFAC_REQUIRE_OK(p->conv->adopt_prefix(*source.conv, prefix, n));
        SYNCFAC_REQUIRE_OK(
          p->pool->adopt_prefix(*source.pool, p->conv->output(), n));
      }
      auto dy = random_tensor(fused.pool->output().shape(), rng);
      BOOST_REQUIRE_EQUAL(dy.dim(0), n);
      check_fused_matches_apart(*dev, fused, apart, dy, true, true);
    }
  }
}

// -- merge layers: add and concat ---------------------------------------------

BOOST_AUTO_TEST_CASE(add_sums_its_inputs_and_gives_each_the_same_gradient) {
  auto dev = make_cpu_backend(1);
  auto layer = make_add_layer("res", activation::relu);
  auto& add = dynamic_cast<merge_layer&>(*layer);
  tensor a{{2, 3}, {1, -2, 3, 0, 1, -1}};
  tensor b{{2, 3}, {1, 1, -5, 2, 0, 0.5f}};
  BOOST_REQUIRE(!add.forward_all(*dev, {&a, &b}));
  // relu(a + b)
  BOOST_TEST(add.output().values()
             == (std::vector<float>{2, 0, 0, 2, 1, 0}));
  tensor dy{{2, 3}, {1, 2, 3, 4, 5, 6}};
  tensor da;
  tensor db;
  BOOST_REQUIRE(!add.backward_all(*dev, dy, {&da, &db}));
  // dL/ds = dy where a + b > 0, for both inputs; a null one is skipped.
  std::vector<float> ds{1, 0, 0, 4, 5, 0};
  BOOST_TEST(da.values() == ds);
  BOOST_TEST(db.values() == ds);
  BOOST_REQUIRE(!add.backward_all(*dev, dy, {nullptr, &db}));
  BOOST_TEST(db.values() == ds);
  // Inputs of two shapes: refused naming both.
  tensor c{{2, 2}, {1, 2, 3, 4}};
  auto err = add.forward_all(*dev, {&a, &c});
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("input 1 [2, 2] differs from input 0 [2, 3]")
               != std::string::npos,
             render(err));
}

BOOST_AUTO_TEST_CASE(concat_joins_the_last_axis_and_splits_its_gradient) {
  auto dev = make_cpu_backend(1);
  auto layer = make_concat_layer("joined");
  auto& concat = dynamic_cast<merge_layer&>(*layer);
  tensor a{{2, 1, 1, 2}, {1, 2, 3, 4}};
  tensor b{{2, 1, 1, 1}, {5, 6}};
  auto shape = concat.merged_shape({a.shape(), b.shape()});
  BOOST_REQUIRE(shape);
  BOOST_TEST(*shape == (tensor_shape{2, 1, 1, 3}));
  BOOST_REQUIRE(!concat.forward_all(*dev, {&a, &b}));
  BOOST_TEST(concat.output().values()
             == (std::vector<float>{1, 2, 5, 3, 4, 6}));
  tensor dy{{2, 1, 1, 3}, {10, 20, 30, 40, 50, 60}};
  tensor da;
  tensor db;
  BOOST_REQUIRE(!concat.backward_all(*dev, dy, {&da, &db}));
  BOOST_TEST(da.shape() == a.shape());
  BOOST_TEST(da.values() == (std::vector<float>{10, 20, 40, 50}));
  BOOST_TEST(db.values() == (std::vector<float>{30, 60}));
  // adopt_prefix copies the output's first examples and keeps the split.
  auto other = make_concat_layer("joined");
  BOOST_REQUIRE(!other->adopt_prefix(concat, a, 1));
  BOOST_TEST(other->output().values() == (std::vector<float>{1, 2, 5}));
  tensor dy1{{1, 1, 1, 3}, {7, 8, 9}};
  BOOST_REQUIRE(!dynamic_cast<merge_layer&>(*other).backward_all(
    *dev, dy1, {&da, &db}));
  BOOST_TEST(da.values() == (std::vector<float>{7, 8}));
  BOOST_TEST(db.values() == (std::vector<float>{9}));
  // From a layer of another kind, or more examples than it has: refused,
  // naming the layers and the count (layer_prefix.hpp, as every kind).
  auto sum = make_add_layer("sum", activation::identity);
  auto err = sum->adopt_prefix(concat, a, 1);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("sum: cannot adopt the state of layer 'joined' "
                              "(a different kind)")
               != std::string::npos,
             render(err));
  err = other->adopt_prefix(concat, a, 3);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("joined: cannot adopt 3 examples of a forward "
                              "pass whose output is [2, 1, 1, 3]")
               != std::string::npos,
             render(err));
  // Heights that differ: refused naming both shapes.
  auto bad = concat.merged_shape({a.shape(), tensor_shape{2, 2, 1, 1}});
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("input 1 is [-1, 2, 1, 1] and input "
                                      "0 [-1, 1, 1, 2]")
               != std::string::npos,
             render(bad.error()));
}

// -- average pools, batch_norm, dropout ---------------------------------------

BOOST_AUTO_TEST_CASE(avg_pool_counts_only_the_image_in_a_border_window) {
  auto dev = make_cpu_backend(1);
  // 3 x 3, window 2, stride 2, SAME: one row and column of padding after
  // the image; the corner window holds x[2][2] alone.
  auto pool = make_avg_pool_layer("pool", 2, 2, padding::same);
  tensor x{{1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  BOOST_REQUIRE(!pool->forward(*dev, x));
  BOOST_TEST(pool->output().shape() == (tensor_shape{1, 2, 2, 1}));
  BOOST_TEST(pool->output().values()
             == (std::vector<float>{3, 4.5f, 7.5f, 9}));
  // Each output's gradient is shared by the inputs its mean counted.
  tensor dy{{1, 2, 2, 1}, {4, 4, 2, 1}};
  tensor dx;
  BOOST_REQUIRE(!pool->backward(*dev, dy, &dx));
  BOOST_TEST(dx.values()
             == (std::vector<float>{1, 1, 2, 1, 1, 2, 1, 1, 1}));
}

BOOST_AUTO_TEST_CASE(global_avg_pool_gives_each_channels_mean) {
  auto dev = make_cpu_backend(1);
  auto gap = make_global_avg_pool_layer("gap");
  // [2, 2, 1, 2]: channel 0 holds 1, 3 then 5, 7; channel 1 2, 4 then 6, 8.
  tensor x{{2, 2, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}};
  BOOST_REQUIRE(!gap->forward(*dev, x));
  BOOST_TEST(gap->output().shape() == (tensor_shape{2, 2}));
  BOOST_TEST(gap->output().values() == (std::vector<float>{2, 3, 6, 7}));
  tensor dy{{2, 2}, {2, 4, 6, 8}};
  tensor dx;
  BOOST_REQUIRE(!gap->backward(*dev, dy, &dx));
  BOOST_TEST(dx.shape() == x.shape());
  BOOST_TEST(dx.values() == (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4}));
  auto flat = gap->output_shape({4, 10});
  BOOST_REQUIRE(!flat);
  BOOST_TEST(render(flat.error()).find("gap: input [4, 10] must be an image")
               != std::string::npos,
             render(flat.error()));
}

namespace {

/// A layer with its parameters and gradients, bound.
struct bound_layer {
  layer_ptr l;
  parameter_set params;
  parameter_set grads;

  explicit bound_layer(layer_ptr x) : l(std::move(x)) {
    params = l->make_parameters();
    for (const auto& p : params)
      grads.push_back({p.name, tensor{p.value.shape()}});
    l->bind(params.data(), grads.data());
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(batch_norm_trains_by_the_batch_and_evaluates_by_its_moving_statistics) {
  auto dev = make_cpu_backend(1);
  bound_layer bn{make_batch_norm_layer("bn", 2, 0.9, 1e-3, activation::identity)};
  BOOST_TEST(bn.l->parameters_start_as_made());
  BOOST_REQUIRE_EQUAL(bn.params.size(), 4u);
  BOOST_TEST(bn.params[0].name == "bn/gamma");
  BOOST_TEST(bn.params[0].value.values() == (std::vector<float>{1, 1}));
  BOOST_TEST(bn.params[2].name == "bn/moving_mean");
  BOOST_TEST(bn.params[3].value.values() == (std::vector<float>{1, 1}));
  bn.params[0].value = tensor{{2}, {2, 0.5f}}; // gamma
  bn.params[1].value = tensor{{2}, {1, -1}};   // beta
  // Channel 0: 1, 3, 5, 7 (mean 4, variance 5); channel 1: 10 each.
  tensor x{{4, 2}, {1, 10, 3, 10, 5, 10, 7, 10}};
  bn.l->begin_pass(pass_mode{true, 0});
  BOOST_REQUIRE(!bn.l->forward(*dev, x));
  const auto& y = bn.l->output();
  auto inv = 1 / std::sqrt(5.0 + 1e-3);
  BOOST_TEST(y[0] == 2 * (1 - 4) * inv + 1, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(y[6] == 2 * (7 - 4) * inv + 1, boost::test_tools::tolerance(1e-5));
  // A constant channel: beta.
  BOOST_TEST(y[1] == -1.0, boost::test_tools::tolerance(1e-4));
  tensor dy{{4, 2}, {1, 0, 0, 0, 0, 0, 0, 1}};
  tensor dx;
  BOOST_REQUIRE(!bn.l->backward(*dev, dy, &dx));
  // dbeta = the sum of dy; the moving statistics' pushes move them a
  // tenth of the way to the batch's (the variance unbiased: 5 x 4 / 3).
  BOOST_TEST(bn.grads[1].value.values() == (std::vector<float>{1, 1}));
  BOOST_TEST(bn.grads[2].value[0] == 0.1 * (0 - 4),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(bn.grads[2].value[1] == 0.1 * (0 - 10),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(bn.grads[3].value[0] == 0.1 * (1 - 20.0 / 3),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(bn.grads[3].value[1] == 0.1 * (1 - 0),
             boost::test_tools::tolerance(1e-6));
  // Evaluation: the moving statistics, whatever the batch.
  bn.params[2].value = tensor{{2}, {2, 10}};
  bn.params[3].value = tensor{{2}, {4, 1}};
  bn.l->begin_pass(pass_mode{false, 0});
  BOOST_REQUIRE(!bn.l->forward(*dev, x));
  BOOST_TEST(y[2] == 2 * (3 - 2) / std::sqrt(4 + 1e-3) + 1,
             boost::test_tools::tolerance(1e-5));
  BOOST_TEST(y[7] == -1.0, boost::test_tools::tolerance(1e-4));
  // No backward through an evaluation pass: it is refused by name.
  auto err = bn.l->backward(*dev, dy, &dx);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("bn: backward needs a training forward pass")
               != std::string::npos,
             render(err));
  // Channels that do not fit.
  auto shape = bn.l->output_shape({4, 3});
  BOOST_REQUIRE(!shape);
  BOOST_TEST(render(shape.error()).find("does not end in the layer's 2 "
                                        "channels")
               != std::string::npos);
}

BOOST_AUTO_TEST_CASE(dropout_draws_its_mask_from_the_pass_seed_alone) {
  auto dev = make_cpu_backend(1);
  auto drop = make_dropout_layer("drop", 0.25);
  tensor x{{100, 100}};
  x.fill(1.0f);
  auto pass = [&](bool training, uint64_t seed) {
    drop->begin_pass(pass_mode{training, seed});
    BOOST_REQUIRE(!drop->forward(*dev, x));
    return drop->output();
  };
  auto a = pass(true, 7);
  int64_t zeros = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    BOOST_REQUIRE((a[i] == 0.0f || a[i] == 1.0f / 0.75f));
    zeros += a[i] == 0.0f ? 1 : 0;
  }
  // 10,000 draws at 0.25: within 5 standard deviations (43).
  BOOST_TEST(std::abs(zeros - 2500) < 220, zeros);
  BOOST_TEST(pass(true, 7).values() == a.values());
  BOOST_TEST(pass(true, 8).values() != a.values());
  // The gradient goes through the mask of the last pass.
  pass(true, 7);
  tensor dy{{100, 100}};
  dy.fill(3.0f);
  tensor dx;
  BOOST_REQUIRE(!drop->backward(*dev, dy, &dx));
  for (int64_t i = 0; i < a.size(); ++i)
    BOOST_REQUIRE(dx[i] == 3.0f * a[i]);
  // Evaluation passes everything.
  BOOST_TEST(pass(false, 7).values() == x.values());
}
