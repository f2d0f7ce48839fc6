#define BOOST_TEST_MODULE kernels_geometry
#include <boost/test/unit_test.hpp>

#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// TensorFlow's rules, spelled out independently of geometry.cpp.
struct tf_axis {
  int64_t out, before, after;
};

tf_axis tf_same(int64_t in, int64_t k, int64_t s) {
  int64_t out = (in + s - 1) / s;
  int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
  return {out, total / 2, total - total / 2};
}

int64_t tf_valid_out(int64_t in, int64_t k, int64_t s) {
  return static_cast<int64_t>(
    std::ceil(static_cast<double>(in - k + 1) / static_cast<double>(s)));
}

} // namespace

BOOST_AUTO_TEST_CASE(pool_3x3_stride_2_same_on_28) {
  auto g = pool2d_geometry::make({128, 28, 28, 16}, 3, 3, 2, 2,
                                 padding::same);
  BOOST_REQUIRE(g);
  BOOST_CHECK_EQUAL(g->out_h, 14);
  BOOST_CHECK_EQUAL(g->out_w, 14);
  // TF pads (13 * 2 + 3 - 28) = 1 in total: 0 before, 1 after.
  BOOST_CHECK_EQUAL(g->pad_top, 0);
  BOOST_CHECK_EQUAL(g->pad_left, 0);
  BOOST_CHECK(g->output_shape() == (tensor_shape{128, 14, 14, 16}));
  auto g2 = pool2d_geometry::make({128, 14, 14, 16}, 3, 3, 2, 2,
                                  padding::same);
  BOOST_REQUIRE(g2);
  BOOST_CHECK_EQUAL(g2->out_h, 7);
  BOOST_CHECK_EQUAL(g2->pad_top, 0); // total 1
}

BOOST_AUTO_TEST_CASE(convnet_conv_same_5x5) {
  auto g = conv2d_geometry::make({128, 28, 28, 1}, {5, 5, 1, 16}, 1, 1,
                                 padding::same);
  BOOST_REQUIRE(g);
  BOOST_CHECK(g->output_shape() == (tensor_shape{128, 28, 28, 16}));
  BOOST_CHECK_EQUAL(g->pad_top, 2);
  BOOST_CHECK_EQUAL(g->pad_left, 2);
  BOOST_CHECK_EQUAL(g->patch_size(), 25);
  BOOST_CHECK_EQUAL(g->locations(), 784);
  BOOST_CHECK(g->kernel_shape() == (tensor_shape{5, 5, 1, 16}));
}

BOOST_AUTO_TEST_CASE(same_and_valid_match_tensorflow_everywhere) {
  for (int64_t in = 1; in <= 12; ++in)
    for (int64_t k = 1; k <= 6; ++k)
      for (int64_t s = 1; s <= 4; ++s) {
        BOOST_TEST_CONTEXT("in " << in << " k " << k << " s " << s) {
          auto same = conv2d_geometry::make({1, in, in + 1, 2}, {k, k, 2, 3},
                                            s, s, padding::same);
          BOOST_REQUIRE(same);
          auto ref = tf_same(in, k, s);
          BOOST_CHECK_EQUAL(same->out_h, ref.out);
          BOOST_CHECK_EQUAL(same->pad_top, ref.before);
          BOOST_CHECK_EQUAL(same->out_w, tf_same(in + 1, k, s).out);
          BOOST_CHECK_EQUAL(same->pad_left, tf_same(in + 1, k, s).before);
          auto pool = pool2d_geometry::make({1, in, in, 2}, k, k, s, s,
                                            padding::same);
          BOOST_REQUIRE(pool);
          BOOST_CHECK_EQUAL(pool->out_h, ref.out);
          BOOST_CHECK_EQUAL(pool->pad_top, ref.before);
          auto valid = conv2d_geometry::make({1, in, in, 2}, {k, k, 2, 3}, s,
                                             s, padding::valid);
          if (k > in) {
            BOOST_CHECK(!valid);
            continue;
          }
          BOOST_REQUIRE(valid);
          BOOST_CHECK_EQUAL(valid->out_h, tf_valid_out(in, k, s));
          BOOST_CHECK_EQUAL(valid->pad_top, 0);
        }
      }
}

BOOST_AUTO_TEST_CASE(non_square_strides_and_kernels) {
  auto g = conv2d_geometry::make({2, 9, 8, 3}, {5, 2, 3, 5}, 2, 1,
                                 padding::same);
  BOOST_REQUIRE(g);
  BOOST_CHECK_EQUAL(g->out_h, 5);
  BOOST_CHECK_EQUAL(g->out_w, 8);
  BOOST_CHECK_EQUAL(g->pad_top, 2);  // total 4 * 2 + 5 - 9 = 4
  BOOST_CHECK_EQUAL(g->pad_left, 0); // total 7 + 2 - 8 = 1, smaller half
  auto v = conv2d_geometry::make({2, 9, 8, 3}, {5, 2, 3, 5}, 2, 3,
                                 padding::valid);
  BOOST_REQUIRE(v);
  BOOST_CHECK_EQUAL(v->out_h, 3); // ceil(5 / 2)
  BOOST_CHECK_EQUAL(v->out_w, 3); // ceil(7 / 3)
}

BOOST_AUTO_TEST_CASE(errors_name_both_shapes) {
  auto g = conv2d_geometry::make({2, 5, 5, 3}, {3, 3, 4, 8}, 1, 1,
                                 padding::same);
  check_error(g.error(), ec::shape_mismatch,
              {"[2, 5, 5, 3]", "[3, 3, 4, 8]", "channels 3 vs 4"});
  check_error(conv2d_geometry::make({5, 5, 3}, {3, 3, 3, 8}, 1, 1,
                                    padding::same)
                .error(),
              ec::shape_mismatch, {"[5, 5, 3]", "[3, 3, 3, 8]"});
  check_error(conv2d_geometry::make({1, 2, 5, 3}, {3, 3, 3, 8}, 1, 1,
                                    padding::valid)
                .error(),
              ec::shape_mismatch, {"[1, 2, 5, 3]", "[3, 3, 3, 8]"});
  check_error(conv2d_geometry::make({1, 5, 5, 3}, {3, 3, 3, 8}, 0, 1,
                                    padding::same)
                .error(),
              ec::invalid_argument, {"stride"});
  check_error(pool2d_geometry::make({1, 2, 2, 3}, 3, 3, 1, 1, padding::valid)
                .error(),
              ec::shape_mismatch, {"[1, 2, 2, 3]", "[3, 3]"});
  check_error(pool2d_geometry::make({2, 2, 3}, 2, 2, 1, 1, padding::same)
                .error(),
              ec::shape_mismatch, {"[2, 2, 3]"});
}

BOOST_AUTO_TEST_CASE(padding_names) {
  BOOST_CHECK_EQUAL(to_string(padding::same), std::string{"same"});
  BOOST_CHECK_EQUAL(to_string(padding::valid), std::string{"valid"});
  BOOST_CHECK(parse_padding("SAME") == padding::same);
  BOOST_CHECK(parse_padding("Valid") == padding::valid);
  check_error(parse_padding("full").error(), ec::invalid_argument, {"full"});
}
