#define BOOST_TEST_MODULE kernels_pool
#include <boost/test/unit_test.hpp>
#include "tests/kernels/isa_fixture.hpp"

#include <sstream>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

struct pool_case {
  int64_t n, h, w, c, kh, kw, sh, sw;
  padding pad;

  std::string str() const {
    std::ostringstream os;
    os << "x[" << n << "," << h << "," << w << "," << c << "] " << kh << "x"
       << kw << "/" << sh << "x" << sw << " " << to_string(pad);
    return os.str();
  }

  pool2d_geometry geometry() const {
    auto g = pool2d_geometry::make({n, h, w, c}, kh, kw, sh, sw, pad);
    BOOST_REQUIRE(g);
    return *g;
  }
};

/// A max pool's output and the index of each output's winning input.
struct pool_result {
  tensor y;
  std::vector<int32_t> argmax;
};

pool_result naive_pool(const pool2d_geometry& g, const tensor& x) {
  pool_result r{tensor(g.output_shape()), {}};
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow)
        for (int64_t c = 0; c < g.channels; ++c) {
          int64_t best = -1;
          for_each_input_tap(g, oh, ow, [&](int64_t, int64_t, int64_t ih,
                                            int64_t iw) {
            auto i = ((n * g.in_h + ih) * g.in_w + iw) * g.channels + c;
            if (best < 0 || x[i] > x[best])
              best = i;
          });
          BOOST_REQUIRE(best >= 0); // every window holds an input
          r.y[static_cast<int64_t>(r.argmax.size())] = x[best];
          r.argmax.push_back(static_cast<int32_t>(best));
        }
  return r;
}

/// `dev`'s max pool of `x`, which must succeed.
pool_result pool_forward(backend& dev, const pool2d_geometry& g,
                         const tensor& x) {
  pool_result r;
  SYNCFAC_REQUIRE_OK(dev.max_pool_forward(g, x, r.y, r.argmax));
  return r;
}

const std::vector<pool_case>& cases() {
  static const std::vector<pool_case> result{
    {2, 28, 28, 16, 3, 3, 2, 2, padding::same}, // ConvNet pool 1
    {2, 14, 14, 16, 3, 3, 2, 2, padding::same}, // ConvNet pool 2
    {3, 7, 7, 3, 2, 2, 2, 2, padding::valid},
    {2, 9, 8, 20, 3, 3, 1, 1, padding::same},
    {1, 9, 8, 5, 3, 2, 2, 3, padding::valid},
    {2, 5, 6, 9, 4, 4, 3, 2, padding::same},
    {1, 3, 3, 1, 3, 3, 1, 1, padding::same},
    {1, 6, 6, 33, 2, 2, 2, 2, padding::valid}, // 2 AVX-512 vectors + 1
  };
  return result;
}

/// `check(g, x, rng)` for each of cases(), in its context: its geometry
/// and a random input drawn from `rng` seeded with `seed`.
template <class Check>
void for_each_case(unsigned seed, Check check) {
  std::mt19937 rng(seed);
  for (const auto& pc : cases()) {
    BOOST_TEST_CONTEXT(pc.str()) {
      auto g = pc.geometry();
      auto x = random_tensor(g.input_shape(), rng);
      check(g, x, rng);
    }
  }
}

/// What a max pool's backward gives: each output's gradient added into a
/// zero input at its winner.
tensor scattered(const pool2d_geometry& g, const tensor& dy,
                 const std::vector<int32_t>& argmax) {
  tensor dx(g.input_shape());
  for (int64_t i = 0; i < dy.size(); ++i)
    dx[argmax[static_cast<size_t>(i)]] += dy[i];
  return dx;
}

} // namespace

BOOST_AUTO_TEST_CASE(forward_matches_naive) {
  auto dev = make_cpu_backend(2);
  for_each_case(1, [&](const pool2d_geometry& g, const tensor& x,
                       std::mt19937&) {
    auto got = pool_forward(*dev, g, x);
    auto ref = naive_pool(g, x);
    BOOST_CHECK(got.y == ref.y);
    BOOST_CHECK(got.argmax == ref.argmax);
  });
}

BOOST_AUTO_TEST_CASE(padding_never_wins) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(1);
  pool_case pc{2, 6, 6, 11, 3, 3, 2, 2, padding::same};
  auto g = pc.geometry();
  auto x = random_tensor(g.input_shape(), rng, -3.0f, -1.0f);
  auto got = pool_forward(*dev, g, x);
  for (int64_t i = 0; i < got.y.size(); ++i) {
    BOOST_CHECK_LT(got.y[i], -0.999f);
    BOOST_CHECK_EQUAL(got.y[i], x[got.argmax[static_cast<size_t>(i)]]);
  }
}

BOOST_AUTO_TEST_CASE(ties_go_to_the_first_element) {
  auto dev = make_cpu_backend(1);
  pool_case pc{1, 2, 2, 9, 2, 2, 1, 1, padding::valid};
  auto g = pc.geometry();
  tensor x(g.input_shape()); // all zero: every element ties
  auto got = pool_forward(*dev, g, x);
  for (int32_t c = 0; c < 9; ++c)
    BOOST_CHECK_EQUAL(got.argmax[static_cast<size_t>(c)], c);
}

BOOST_AUTO_TEST_CASE(backward_scatters_to_argmax) {
  auto dev = make_cpu_backend(2);
  for_each_case(3, [&](const pool2d_geometry& g, const tensor& x,
                       std::mt19937& rng) {
    auto dy = random_tensor(g.output_shape(), rng);
    auto argmax = pool_forward(*dev, g, x).argmax;
    tensor dx;
    SYNCFAC_REQUIRE_OK(dev->max_pool_backward(g, dy, argmax, dx));
    check_close(dx, scattered(g, dy, argmax), 1e-6, 1e-6, "dx");
  });
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  std::mt19937 rng(4);
  auto dev = make_cpu_backend(1);
  for (auto pc : {pool_case{2, 5, 5, 3, 3, 3, 2, 2, padding::same},
                  pool_case{1, 6, 5, 2, 2, 2, 1, 1, padding::valid},
                  pool_case{1, 7, 7, 2, 3, 3, 2, 2, padding::valid}}) {
    BOOST_TEST_CONTEXT(pc.str()) {
      auto g = pc.geometry();
      auto x = random_tensor(g.input_shape(), rng);
      auto r = random_tensor(g.output_shape(), rng);
      tensor y, dx, probe_y;
      std::vector<int32_t> argmax, probe_arg;
      SYNCFAC_REQUIRE_OK(dev->max_pool_forward(g, x, y, argmax));
      SYNCFAC_REQUIRE_OK(dev->max_pool_backward(g, r, argmax, dx));
      auto loss = [&] {
        SYNCFAC_REQUIRE_OK(dev->max_pool_forward(g, x, probe_y, probe_arg));
        return probe(probe_y, r);
      };
      auto same_winners = [&] { return probe_arg == argmax; };
      check_gradient("dx", x, dx, loss, same_winners,
                     fd_options{1e-3f, 1e-3, 1e-2, 400});
    }
  }
}

BOOST_AUTO_TEST_CASE(one_and_two_threads_agree) {
  std::mt19937 rng(5);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  // Large enough for the streamed dx path.
  pool_case pc{64, 28, 28, 16, 3, 3, 2, 2, padding::same};
  auto g = pc.geometry();
  auto x = random_tensor(g.input_shape(), rng);
  auto dy = random_tensor(g.output_shape(), rng);
  auto by_one = pool_forward(*one, g, x);
  auto by_two = pool_forward(*two, g, x);
  BOOST_CHECK(by_one.y == by_two.y);
  BOOST_CHECK(by_one.argmax == by_two.argmax);
  const auto& a1 = by_one.argmax;
  tensor dx1, dx2;
  SYNCFAC_REQUIRE_OK(one->max_pool_backward(g, dy, a1, dx1));
  SYNCFAC_REQUIRE_OK(two->max_pool_backward(g, dy, a1, dx2));
  BOOST_CHECK(dx1 == dx2);
  check_close(dx1, scattered(g, dy, a1), 1e-6, 1e-6, "dx");
}

namespace {

/// A conv layer's output under act: act of random pre-activations (ReLU's
/// zeros included, so ties and masked winners occur).
tensor activated(activation act, const tensor_shape& shape,
                 std::mt19937& rng) {
  auto s = random_tensor(shape, rng, -2.0f, 2.0f);
  tensor y(shape);
  for (int64_t i = 0; i < s.size(); ++i)
    y[i] = static_cast<float>(act_ref(act, s[i]));
  return y;
}

} // namespace

BOOST_AUTO_TEST_CASE(activated_backward_equals_backward_then_activation) {
  // The pool after a conv writes the conv's ds itself: the bits of
  // max_pool_backward followed by activation_backward on the pool's
  // input, for every activation, overlapping windows (3x3/2, 3x3/1)
  // included, odd shapes and thread counts; the base class's composition
  // (the CUDA backend's) gives them too.
  std::mt19937 rng(6);
  auto extra = cases();
  extra.push_back({5, 28, 28, 16, 3, 3, 2, 2, padding::same});
  extra.push_back({3, 7, 9, 17, 3, 3, 1, 1, padding::valid});
  for (int threads : {1, 2, 3}) {
    auto dev = make_cpu_backend(threads);
    for (const auto& pc : extra)
      for (auto act : all_activations()) {
        BOOST_TEST_CONTEXT(pc.str() << " " << to_string(act) << " threads "
                                    << threads) {
          auto g = pc.geometry();
          auto y = activated(act, g.input_shape(), rng);
          auto dy = random_tensor(g.output_shape(), rng);
          tensor pooled, dy_input, ds_ref, ds, ds_base;
          std::vector<int32_t> argmax;
          SYNCFAC_REQUIRE_OK(dev->max_pool_forward(g, y, pooled, argmax));
          SYNCFAC_REQUIRE_OK(dev->max_pool_backward(g, dy, argmax, dy_input));
          SYNCFAC_REQUIRE_OK(
            dev->activation_backward(act, y, dy_input, ds_ref));
          SYNCFAC_REQUIRE_OK(dev->max_pool_backward_activated(
            g, dy, argmax, pooled, act, ds));
          BOOST_CHECK(same_bits(ds, ds_ref));
          SYNCFAC_REQUIRE_OK(dev->backend::max_pool_backward_activated(
            g, dy, argmax, pooled, act, ds_base));
          BOOST_CHECK(same_bits(ds_base, ds_ref));
          // Twice on the same backend: its per-thread sums are left zero.
          SYNCFAC_REQUIRE_OK(dev->max_pool_backward_activated(
            g, dy, argmax, pooled, act, ds));
          BOOST_CHECK(same_bits(ds, ds_ref));
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(activated_backward_errors_name_shapes_and_write_nothing) {
  std::mt19937 rng(7);
  auto dev = make_cpu_backend(2);
  auto g = pool_case{2, 6, 6, 3, 3, 3, 2, 2, padding::same}.geometry();
  auto x = random_tensor(g.input_shape(), rng);
  tensor pooled;
  std::vector<int32_t> argmax;
  SYNCFAC_REQUIRE_OK(dev->max_pool_forward(g, x, pooled, argmax));
  tensor dy(g.output_shape());
  tensor sentinel({1}, {4.0f});
  auto ds = sentinel;
  const char* op = "max_pool_backward_activated";
  check_error(dev->max_pool_backward_activated(g, tensor({2, 3, 3, 4}),
                                              argmax, pooled,
                                              activation::relu, ds),
              ec::shape_mismatch, {op, "[2, 3, 3, 4]", "[2, 3, 3, 3]"});
  check_error(dev->max_pool_backward_activated(g, dy, argmax,
                                              tensor({2, 3, 3, 2}),
                                              activation::tanh, ds),
              ec::shape_mismatch,
              {op, "pooled output", "[2, 3, 3, 2]", "[2, 3, 3, 3]"});
  check_error(dev->backend::max_pool_backward_activated(
                g, dy, argmax, tensor({2, 3, 3, 2}), activation::tanh, ds),
              ec::shape_mismatch,
              {op, "pooled output", "[2, 3, 3, 2]", "[2, 3, 3, 3]"});
  auto bad = argmax;
  bad[30] = 5; // output 30 belongs to image 1, input 5 to image 0
  check_error(dev->max_pool_backward_activated(g, dy, bad, pooled,
                                              activation::sigmoid, ds),
              ec::invalid_argument, {op, "argmax[30]", "5"});
  check_error(dev->backend::max_pool_backward_activated(
                g, dy, bad, pooled, activation::sigmoid, ds),
              ec::invalid_argument, {"argmax[30]", "5"});
  BOOST_CHECK(ds == sentinel);
}

BOOST_AUTO_TEST_CASE(errors_name_shapes_and_write_nothing) {
  auto dev = make_cpu_backend(1);
  auto g = pool_case{2, 6, 6, 3, 3, 3, 2, 2, padding::same}.geometry();
  tensor sentinel({1}, {4.0f});
  auto y = sentinel;
  std::vector<int32_t> argmax{7};
  check_error(dev->max_pool_forward(g, tensor({2, 6, 5, 3}), y, argmax),
              ec::shape_mismatch, {"[2, 6, 5, 3]", "[2, 6, 6, 3]"});
  BOOST_CHECK(y == sentinel);
  BOOST_CHECK(argmax == std::vector<int32_t>{7});
  auto dx = sentinel;
  tensor dy(g.output_shape());
  check_error(dev->max_pool_backward(g, tensor({2, 3, 3, 4}), argmax, dx),
              ec::shape_mismatch, {"[2, 3, 3, 4]", "[2, 3, 3, 3]"});
  check_error(dev->max_pool_backward(g, dy, argmax, dx), ec::shape_mismatch,
              {"[2, 3, 3, 3]", "[1]"});
  tensor y_ok;
  std::vector<int32_t> bad;
  SYNCFAC_REQUIRE_OK(dev->max_pool_forward(g, tensor(g.input_shape()), y_ok,
                                           bad));
  bad[30] = 5; // output 30 belongs to image 1, input 5 to image 0
  check_error(dev->max_pool_backward(g, dy, bad, dx), ec::invalid_argument,
              {"argmax[30]", "5"});
  BOOST_CHECK(dx == sentinel);
}

BOOST_AUTO_TEST_CASE(conv_then_pool_fused_gives_both_ops_bits) {
  // conv2d_max_pool_forward pools each tile of images on the conv's
  // thread right after the conv wrote it: the conv's output, the pool's
  // and its winners are those of conv2d_forward then max_pool_forward,
  // for the direct path (one input channel, the ConvNet's first conv) and
  // Winograd's (5x5 and 3x3), with ReLU in the kernel and tanh after it,
  // on 1 to 3 threads; the base class's composition gives them too.
  struct conv_case {
    tensor_shape x;
    tensor_shape w;
    activation act;
  };
  std::mt19937 rng(9);
  for (const auto& cc :
       {conv_case{{9, 28, 28, 1}, {5, 5, 1, 16}, activation::relu},
        conv_case{{7, 14, 14, 16}, {5, 5, 16, 16}, activation::relu},
        conv_case{{5, 15, 13, 16}, {3, 3, 16, 24}, activation::tanh}}) {
    auto conv = conv2d_geometry::make(cc.x, cc.w, 1, 1, padding::same);
    BOOST_REQUIRE(conv);
    auto pool = pool2d_geometry::make(conv->output_shape(), 3, 3, 2, 2,
                                      padding::same);
    BOOST_REQUIRE(pool);
    auto x = random_tensor(cc.x, rng);
    auto w = random_tensor(cc.w, rng, -0.3f, 0.3f);
    auto b = random_tensor({cc.w[3]}, rng);
    for (int threads : {1, 2, 3}) {
      BOOST_TEST_CONTEXT("x " << tensor(cc.x).shape_string() << " w "
                              << tensor(cc.w).shape_string() << " "
                              << to_string(cc.act) << " threads " << threads) {
        auto dev = make_cpu_backend(threads);
        tensor conv_y, pooled;
        std::vector<int32_t> argmax;
        SYNCFAC_REQUIRE_OK(
          dev->conv2d_forward(*conv, x, w, b, cc.act, conv_y));
        SYNCFAC_REQUIRE_OK(
          dev->max_pool_forward(*pool, conv_y, pooled, argmax));
        tensor fused_y, fused_pooled;
        std::vector<int32_t> fused_argmax;
        SYNCFAC_REQUIRE_OK(dev->conv2d_max_pool_forward(
          *conv, x, w, b, cc.act, *pool, fused_y, fused_pooled, fused_argmax));
        BOOST_TEST(same_bits(fused_y, conv_y));
        BOOST_TEST(same_bits(fused_pooled, pooled));
        BOOST_TEST(fused_argmax == argmax);
        tensor base_y, base_pooled;
        std::vector<int32_t> base_argmax;
        SYNCFAC_REQUIRE_OK(dev->backend::conv2d_max_pool_forward(
          *conv, x, w, b, cc.act, *pool, base_y, base_pooled, base_argmax));
        BOOST_TEST(same_bits(base_pooled, pooled));
        BOOST_TEST(base_argmax == argmax);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(conv_then_pool_refuses_a_pool_of_another_shape) {
  auto dev = make_cpu_backend(2);
  auto conv = conv2d_geometry::make({2, 8, 8, 1}, {3, 3, 1, 4}, 1, 1,
                                    padding::same);
  BOOST_REQUIRE(conv);
  // A pool over 5 channels where the conv makes 4.
  auto pool = pool_case{2, 8, 8, 5, 2, 2, 2, 2, padding::valid}.geometry();
  tensor sentinel({1}, {4.0f});
  auto conv_y = sentinel;
  auto pooled = sentinel;
  std::vector<int32_t> argmax{7};
  check_error(dev->conv2d_max_pool_forward(*conv, tensor({2, 8, 8, 1}),
                                           tensor({3, 3, 1, 4}), tensor({4}),
                                           activation::relu, pool, conv_y,
                                           pooled, argmax),
              ec::shape_mismatch,
              {"conv2d_max_pool_forward", "pool input", "[2, 8, 8, 5]",
               "[2, 8, 8, 4]"});
  BOOST_CHECK(conv_y == sentinel);
  BOOST_CHECK(pooled == sentinel);
  BOOST_CHECK(argmax == std::vector<int32_t>{7});
}
