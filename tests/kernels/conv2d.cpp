#define BOOST_TEST_MODULE kernels_conv2d
#include <boost/test/unit_test.hpp>
#include "tests/kernels/isa_fixture.hpp"


#include "kernels/cpu/winograd.hpp"
#include "kernels/cpu/winograd_transforms.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// Calls f(n, oh, ow, kh, kw, x_index, y_index_base) for every in-range tap.
template <class F>
void for_each_tap(const conv2d_geometry& g, F f) {
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow)
        for_each_input_tap(g, oh, ow, [&](int64_t kh, int64_t kw,
                                          int64_t ih, int64_t iw) {
          auto xi = ((n * g.in_h + ih) * g.in_w + iw) * g.in_c;
          auto yi = ((n * g.out_h + oh) * g.out_w + ow) * g.out_c;
          auto wi = (kh * g.k_w + kw) * g.in_c * g.out_c;
          f(xi, yi, wi);
        });
}

tensor naive_forward(const conv2d_geometry& g, const tensor& x,
                     const tensor& w, const tensor& b, activation act) {
  std::vector<double> s(static_cast<size_t>(element_count(g.output_shape())));
  for_each_tap(g, [&](int64_t xi, int64_t yi, int64_t wi) {
    for (int64_t c = 0; c < g.in_c; ++c)
      for (int64_t o = 0; o < g.out_c; ++o)
        s[static_cast<size_t>(yi + o)]
          += double{x[xi + c]} * double{w[wi + c * g.out_c + o]};
  });
  tensor y(g.output_shape());
  for (int64_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<float>(
      act_ref(act, s[static_cast<size_t>(i)] + double{b[i % g.out_c]}));
  return y;
}

struct grads {
  tensor dx, dw, db;
};

grads naive_backward(const conv2d_geometry& g, const tensor& x,
                     const tensor& w, const tensor& ds) {
  std::vector<double> dx(static_cast<size_t>(x.size()));
  std::vector<double> dw(static_cast<size_t>(w.size()));
  std::vector<double> db(static_cast<size_t>(g.out_c));
  for_each_tap(g, [&](int64_t xi, int64_t yi, int64_t wi) {
    for (int64_t c = 0; c < g.in_c; ++c)
      for (int64_t o = 0; o < g.out_c; ++o) {
        auto d = double{ds[yi + o]};
        dx[static_cast<size_t>(xi + c)] += d * w[wi + c * g.out_c + o];
        dw[static_cast<size_t>(wi + c * g.out_c + o)] += d * x[xi + c];
      }
  });
  for (int64_t i = 0; i < ds.size(); ++i)
    db[static_cast<size_t>(i % g.out_c)] += ds[i];
  auto to_tensor = [](const tensor_shape& shape,
                      const std::vector<double>& v) {
    return tensor(shape, std::vector<float>(v.begin(), v.end()));
  };
  return {to_tensor(x.shape(), dx), to_tensor(w.shape(), dw),
          to_tensor({g.out_c}, db)};
}

/// The componentwise bound of Winograd's rounding error, up to a factor of
/// roundoff (winograd_tolerance): the algorithm run on absolute values in
/// double, |A^T| (sum_c (|G| |g| |G^T|) . (|B^T| |d| |B|)) |A| + |b|, for
/// the forward conv of g (src x) or its input gradient (src ds, the kernel
/// flipped with its channel axes swapped, no bias).
/// Each output's error follows its whole tile's window and the whole
/// kernel, not its own terms: a dx element that one tap reaches still
/// carries the rounding of the tile's other taps.
std::vector<double> winograd_bound(const conv2d_geometry& g, const tensor& src,
                                   const tensor& w, const tensor* b,
                                   bool input_gradient) {
  namespace wg = cpu::winograd;
  const int r = static_cast<int>(g.k_h);
  const int m = wg::tile_of(r);
  const int alpha = wg::alpha;
  auto ci_n = input_gradient ? g.out_c : g.in_c;
  auto co_n = input_gradient ? g.in_c : g.out_c;
  auto sh = input_gradient ? g.out_h : g.in_h;
  auto sw = input_gradient ? g.out_w : g.in_w;
  auto oh = input_gradient ? g.in_h : g.out_h;
  auto ow = input_gradient ? g.in_w : g.out_w;
  auto top = input_gradient ? r - 1 - g.pad_top : g.pad_top;
  auto left = input_gradient ? r - 1 - g.pad_left : g.pad_left;
  auto at = [&](int p, int q) { return p * alpha + q; };
  // |G| |g| |G^T| per input and output channel.
  std::vector<double> u(static_cast<size_t>(alpha * alpha * ci_n * co_n));
  for (int64_t ci = 0; ci < ci_n; ++ci)
    for (int64_t co = 0; co < co_n; ++co)
      for (int p = 0; p < alpha; ++p)
        for (int q = 0; q < alpha; ++q) {
          double s = 0;
          for (int a = 0; a < r; ++a)
            for (int e = 0; e < r; ++e) {
              auto idx = input_gradient
                           ? (((r - 1 - a) * r + (r - 1 - e)) * g.in_c + co)
                                 * g.out_c
                               + ci
                           : ((a * r + e) * g.in_c + ci) * g.out_c + co;
              s += std::abs(wg::g(r, p, a)) * std::abs(double{w[idx]})
                   * std::abs(wg::g(r, q, e));
            }
          u[static_cast<size_t>((ci * co_n + co) * alpha * alpha + at(p, q))]
            = s;
        }
  std::vector<double> bound(static_cast<size_t>(g.batch * oh * ow * co_n));
  std::vector<double> v(static_cast<size_t>(ci_n * alpha * alpha));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t ty = 0; ty < (oh + m - 1) / m; ++ty)
      for (int64_t tx = 0; tx < (ow + m - 1) / m; ++tx) {
        // |B^T| |d| |B| of the tile's window, zero outside src.
        for (int64_t ci = 0; ci < ci_n; ++ci)
          for (int p = 0; p < alpha; ++p)
            for (int q = 0; q < alpha; ++q) {
              double s = 0;
              for (int i = 0; i < alpha; ++i)
                for (int j = 0; j < alpha; ++j) {
                  auto y = m * ty + i - top;
                  auto x = m * tx + j - left;
                  if (y < 0 || y >= sh || x < 0 || x >= sw)
                    continue;
                  s += std::abs(wg::bt[p][i])
                       * std::abs(double{src[((n * sh + y) * sw + x) * ci_n
                                             + ci]})
                       * std::abs(wg::bt[q][j]);
                }
              v[static_cast<size_t>(ci * alpha * alpha + at(p, q))] = s;
            }
        for (int64_t co = 0; co < co_n; ++co)
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < m; ++j) {
              auto y = m * ty + i;
              auto x = m * tx + j;
              if (y >= oh || x >= ow)
                continue;
              double s = b == nullptr ? 0.0 : std::abs(double{(*b)[co]});
              for (int p = 0; p < alpha; ++p)
                for (int q = 0; q < alpha; ++q) {
                  double mp = 0;
                  for (int64_t ci = 0; ci < ci_n; ++ci)
                    mp += u[static_cast<size_t>((ci * co_n + co) * alpha
                                                 * alpha
                                               + at(p, q))]
                         * v[static_cast<size_t>(ci * alpha * alpha
                                                 + at(p, q))];
                  s += std::abs(wg::at(r, i, p)) * mp
                       * std::abs(wg::at(r, j, q));
                }
              bound[static_cast<size_t>(((n * oh + y) * ow + x) * co_n + co)]
                = s;
            }
      }
  return bound;
}

/// The componentwise bound of the Winograd weight gradient's rounding
/// error, as winograd_bound() for the forward pass: the algorithm on
/// absolute values in double, |G^T| (sum over tiles of (|B^T| |d| |B|)
/// (|A| |ds| |A^T|)) |G|, x zero-padded as the forward pass reads it, ds
/// zero outside the output.
std::vector<double> winograd_dw_bound(const conv2d_geometry& g,
                                      const tensor& x, const tensor& ds) {
  namespace wg = cpu::winograd;
  const int r = static_cast<int>(g.k_h);
  const int m = wg::tile_of(r);
  const int alpha = wg::alpha;
  const int points = alpha * alpha;
  auto C = g.in_c;
  auto O = g.out_c;
  std::vector<double> s(static_cast<size_t>(points * C * O), 0.0);
  std::vector<double> v(static_cast<size_t>(points * C));
  std::vector<double> z(static_cast<size_t>(points * O));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t ty = 0; ty < (g.out_h + m - 1) / m; ++ty)
      for (int64_t tx = 0; tx < (g.out_w + m - 1) / m; ++tx) {
        for (int64_t c = 0; c < C; ++c)
          for (int p = 0; p < alpha; ++p)
            for (int q = 0; q < alpha; ++q) {
              double t = 0;
              for (int i = 0; i < alpha; ++i)
                for (int j = 0; j < alpha; ++j) {
                  auto y = m * ty + i - g.pad_top;
                  auto xx = m * tx + j - g.pad_left;
                  if (y < 0 || y >= g.in_h || xx < 0 || xx >= g.in_w)
                    continue;
                  t += std::abs(wg::bt[p][i])
                       * std::abs(double{
                         x[((n * g.in_h + y) * g.in_w + xx) * C + c]})
                       * std::abs(wg::bt[q][j]);
                }
              v[static_cast<size_t>(c * points + p * alpha + q)] = t;
            }
        for (int64_t o = 0; o < O; ++o)
          for (int p = 0; p < alpha; ++p)
            for (int q = 0; q < alpha; ++q) {
              double t = 0;
              for (int i = 0; i < m; ++i)
                for (int j = 0; j < m; ++j) {
                  auto y = m * ty + i;
                  auto xx = m * tx + j;
                  if (y >= g.out_h || xx >= g.out_w)
                    continue;
                  t += std::abs(wg::at(r, i, p))
                       * std::abs(double{
                         ds[((n * g.out_h + y) * g.out_w + xx) * O + o]})
                       * std::abs(wg::at(r, j, q));
                }
              z[static_cast<size_t>(o * points + p * alpha + q)] = t;
            }
        for (int64_t c = 0; c < C; ++c)
          for (int64_t o = 0; o < O; ++o)
            for (int pq = 0; pq < points; ++pq)
              s[static_cast<size_t>((c * O + o) * points + pq)]
                += v[static_cast<size_t>(c * points + pq)]
                   * z[static_cast<size_t>(o * points + pq)];
      }
  std::vector<double> bound(static_cast<size_t>(r * r * C * O));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t o = 0; o < O; ++o)
      for (int a = 0; a < r; ++a)
        for (int e = 0; e < r; ++e) {
          double t = 0;
          for (int p = 0; p < alpha; ++p)
            for (int q = 0; q < alpha; ++q)
              t += std::abs(wg::g(r, p, a))
                   * s[static_cast<size_t>((c * O + o) * points + p * alpha
                                           + q)]
                   * std::abs(wg::g(r, q, e));
          bound[static_cast<size_t>(((a * r + e) * C + c) * O + o)] = t;
        }
  return bound;
}

/// The weight gradient's tolerance relative to winograd_dw_bound(): the
/// input transform's 2 (alpha - 1) additions, ds's transform (3 per
/// entry), the product, the sum over the `tiles` of one partial and the
/// kernel-space transform's one rounding to float.
double winograd_dw_tolerance(int64_t tiles) {
  const int64_t alpha = cpu::winograd::alpha;
  return static_cast<double>(tiles + 2 * (alpha - 1) + 5) * 0x1p-24;
}

/// Winograd's tolerance relative to winograd_bound(): gamma_n = n u (u =
/// 2^-24, float's unit roundoff) for the longest chain of roundings an
/// output goes through: the input transform (2 (alpha - 1) additions), the
/// kernel transform's one rounding, the product, the sum over the `in_c`
/// input channels and the output transform (2 (alpha - 1) additions). The
/// errors measured stay far below it; a broken transform errs by about
/// the bound itself.
double winograd_tolerance(int64_t in_c) {
  const int64_t alpha = cpu::winograd::alpha;
  return static_cast<double>(in_c + 4 * (alpha - 1) + 2) * 0x1p-24;
}

/// Largest |a - ref| / scale; checks the shapes.
double scaled_error(const tensor& a, const tensor& ref,
                    const std::vector<double>& scale) {
  BOOST_REQUIRE(a.shape() == ref.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    double e = std::abs(double{a[i]} - double{ref[i]})
               / std::max(scale[static_cast<size_t>(i)], 1e-30);
    if (!(e <= worst))
      worst = std::isnan(e) ? 1e300 : e;
  }
  return worst;
}

/// a against the double-precision reference within `tolerance` of each
/// element's bound; returns the largest error / bound.
double check_within_bound(const tensor& a, const tensor& ref,
                          const std::vector<double>& bound, double tolerance,
                          const std::string& what) {
  auto e = scaled_error(a, ref, bound);
  BOOST_CHECK_MESSAGE(e <= tolerance, what << ": error " << e
                                           << " of the bound exceeds "
                                           << tolerance);
  return e;
}

/// A case's geometry with a random input, kernel and bias, and (unless
/// `with_dy` is false) a random upstream gradient, drawn in that order.
struct conv_inputs {
  conv2d_geometry g;
  tensor x, w, b, dy;

  conv_inputs(const conv2d_geometry& geometry, std::mt19937& rng,
              bool with_dy = true)
    : g(geometry),
      x(random_tensor(g.input_shape(), rng)),
      w(random_tensor(g.kernel_shape(), rng)),
      b(random_tensor({g.out_c}, rng)) {
    if (with_dy)
      dy = random_tensor(g.output_shape(), rng);
  }
};

/// A forward pass and the backward pass for the upstream gradient dy.
struct conv_pass {
  tensor y, ds, dw, db, dx;
};

/// y against the double-precision loop: within 1e-5 + 1e-4 |y| where
/// the direct conv runs; where Winograd does (its rule), within
/// winograd_tolerance of winograd_bound(): the activations are
/// 1-Lipschitz.
void check_forward(const conv_inputs& in, activation act, const tensor& y) {
  auto ref = naive_forward(in.g, in.x, in.w, in.b, act);
  if (!cpu::make_winograd_plan(in.g).use) {
    check_close(y, ref, 1e-5, 1e-4, "y");
    return;
  }
  check_within_bound(y, ref, winograd_bound(in.g, in.x, in.w, &in.b, false),
                     winograd_tolerance(in.g.in_c), "y (Winograd)");
}

conv_pass forward_backward(backend& dev, const conv_inputs& in,
                           activation act) {
  conv_pass p;
  SYNCFAC_REQUIRE_OK(dev.conv2d_forward(in.g, in.x, in.w, in.b, act, p.y));
  SYNCFAC_REQUIRE_OK(dev.conv2d_backward(in.g, in.x, in.w, p.y, in.dy, act,
                                         p.ds, p.dw, p.db, &p.dx));
  return p;
}

const std::vector<conv_case>& forward_cases() {
  static const std::vector<conv_case> cases{
    {2, 5, 5, 3, 3, 3, 4, 1, 1, padding::same},
    {2, 5, 5, 3, 3, 3, 4, 1, 1, padding::valid},
    {3, 7, 6, 2, 3, 3, 5, 2, 2, padding::same},
    {3, 7, 6, 2, 3, 3, 5, 2, 2, padding::valid},
    {1, 9, 8, 1, 4, 2, 13, 1, 3, padding::same},
    {2, 8, 9, 5, 2, 4, 20, 3, 1, padding::valid},
    {2, 6, 6, 16, 5, 5, 16, 1, 1, padding::same},
    {1, 4, 4, 3, 1, 1, 8, 1, 1, padding::valid},
    {2, 3, 3, 2, 5, 5, 3, 1, 1, padding::same},  // kernel wider than input
    {2, 11, 11, 3, 3, 3, 33, 2, 2, padding::same}, // several column blocks
    // stride 1 with >= 8 input channels: dx computed as a convolution
    {2, 7, 6, 12, 4, 3, 5, 1, 1, padding::valid},
    {2, 6, 7, 9, 2, 2, 3, 1, 1, padding::same},
    {1, 5, 4, 8, 5, 5, 17, 1, 1, padding::same},
    {4, 28, 28, 1, 5, 5, 16, 1, 1, padding::same},  // ConvNet layer 1
    {4, 14, 14, 16, 5, 5, 16, 1, 1, padding::same}, // ConvNet layer 2
    // AVX-512's strided forward tile (rows of an output row row_step
    // apart) with two column vectors and a tail, one masked vector, whole
    // images as one run (1x1), and the transposed weight gradient with a
    // kernel row that ends in a partial vector (3 * 20 = 60 floats)
    {2, 9, 10, 16, 3, 3, 20, 1, 1, padding::same},
    {2, 10, 12, 32, 3, 2, 7, 1, 1, padding::valid},
    {2, 5, 6, 16, 1, 1, 16, 1, 1, padding::valid},
    {2, 9, 9, 20, 3, 3, 16, 1, 1, padding::same},
    // AVX-512's whole-kernel-row weight gradient (one channel, rows of 3
    // or 5 taps): one block of 7 rows with a partial output vector, and
    // two blocks of 3 rows
    {2, 9, 11, 1, 7, 3, 10, 1, 1, padding::same},
    {1, 12, 10, 1, 6, 5, 16, 2, 1, padding::valid},
    // One input channel at stride 1 (the sliding forward tile, kernel rows
    // of 3, 5 or 7 taps): ResNet-20's stem; 19-wide output rows cut into
    // blocks with a remainder at both levels and a partial output vector
    // (20 = 16 + 4 or 8 + 8 + 4); rows shorter than a block with VALID
    // padding (the tile read in place)
    {2, 32, 32, 1, 3, 3, 16, 1, 1, padding::same},
    {2, 13, 19, 1, 7, 7, 20, 1, 1, padding::same},
    {3, 8, 7, 1, 3, 5, 9, 1, 1, padding::valid},
  };
  return cases;
}

} // namespace

BOOST_AUTO_TEST_CASE(forward_matches_direct_loop) {
  std::mt19937 rng(1);
  auto dev = make_cpu_backend(2);
  for (const auto& cc : forward_cases())
    for (auto act : all_activations()) {
      BOOST_TEST_CONTEXT(cc.str() << " " << to_string(act)) {
        conv_inputs in{cc.geometry(), rng, false};
        tensor y;
        SYNCFAC_REQUIRE_OK(dev->conv2d_forward(in.g, in.x, in.w, in.b, act, y));
        check_forward(in, act, y);
      }
    }
}

BOOST_AUTO_TEST_CASE(backward_matches_direct_loop) {
  std::mt19937 rng(2);
  auto dev = make_cpu_backend(2);
  for (const auto& cc : forward_cases())
    for (auto act : {activation::identity, activation::tanh}) {
      BOOST_TEST_CONTEXT(cc.str() << " " << to_string(act)) {
        conv_inputs in{cc.geometry(), rng};
        auto p = forward_backward(*dev, in, act);
        tensor ds_ref(in.g.output_shape());
        for (int64_t i = 0; i < ds_ref.size(); ++i)
          ds_ref[i] = act == activation::tanh
                        ? in.dy[i] * (1 - p.y[i] * p.y[i])
                        : in.dy[i];
        check_close(p.ds, ds_ref, 1e-6, 1e-5, "ds");
        auto ref = naive_backward(in.g, in.x, in.w, ds_ref);
        check_close(p.dx, ref.dx, 1e-4, 1e-4, "dx");
        check_close(p.dw, ref.dw, 1e-4, 1e-4, "dw");
        check_close(p.db, ref.db, 1e-4, 1e-4, "db");
      }
    }
}

// Winograd's forward conv, its input gradient (a forward conv of ds with
// the kernel flipped, channel axes swapped) and its weight gradient
// against the double-precision loop, through winograd.hpp's entry points,
// so that the channel counts the rule leaves to the direct conv (1, 3)
// run too: F(4x4, 3x3) and F(2x2, 5x5), image sizes whose
// last tile reaches past the image by every amount (7x9, 5x5, 6x10), SAME
// and VALID (down to a 1x1 output), channel blocks with tails (3, 17) and
// several blocks (64). Each output within winograd_tolerance of
// winograd_bound() (the weight gradient: winograd_dw_tolerance of
// winograd_dw_bound()); the direct conv's error on the same inputs is
// reported beside them.
BOOST_AUTO_TEST_CASE(winograd_matches_the_direct_loop_within_rounding) {
  std::mt19937 rng(21);
  auto dev = make_cpu_backend(1);
  struct channels {
    int64_t in, out;
  };
  for (int64_t k : {3, 5}) {
  const int m = cpu::winograd::tile_of(static_cast<int>(k));
  double worst_forward = 0;
  double worst_dx = 0;
  double worst_dw = 0;
  double worst_direct = 0;
    for (auto pad : {padding::same, padding::valid})
      for (auto ch : {channels{1, 17}, channels{3, 16}, channels{16, 3},
                      channels{17, 64}, channels{64, 1}, channels{16, 16},
                      channels{64, 64}})
        for (auto hw :
             {std::pair<int64_t, int64_t>{7, 9}, {5, 5}, {6, 10}}) {
          conv_case cc{2, hw.first, hw.second, ch.in, k, k, ch.out, 1, 1,
                       pad};
          BOOST_TEST_CONTEXT(cc.str() << " F(" << m << "x" << m << ")") {
            conv_inputs in{cc.geometry(), rng};
            const auto& g = in.g;
            std::vector<float> u, bias, padded, scratch;
            auto run = [&](bool input_gradient, const tensor& src,
                           const tensor* b, tensor& out) {
              auto wp = cpu::make_winograd_plan_anyway(g, input_gradient);
              BOOST_REQUIRE(wp.use);
              BOOST_REQUIRE_EQUAL(wp.layout.m, m);
              cpu::pack_winograd(g, wp, input_gradient, in.w.data(),
                                 b == nullptr ? nullptr : b->data(), 1, u,
                                 bias);
              padded.assign(static_cast<size_t>(g.batch * wp.padded.size()),
                            0.0f);
              scratch.assign(static_cast<size_t>(cpu::winograd_scratch_floats(
                               wp.layout, wp.block)),
                             0.0f);
              cpu::winograd_images(wp, src.data(), g.batch, u.data(),
                                   bias.data(), false, out.data(),
                                   padded.data(), scratch.data());
            };
            tensor y(g.output_shape());
            run(false, in.x, &in.b, y);
            auto y_ref = naive_forward(g, in.x, in.w, in.b,
                                       activation::identity);
            auto y_bound = winograd_bound(g, in.x, in.w, &in.b, false);
            auto e = check_within_bound(y, y_ref, y_bound,
                                        winograd_tolerance(g.in_c),
                                        "y");
            worst_forward = std::max(worst_forward,
                                     e / winograd_tolerance(g.in_c));

            tensor dx(g.input_shape());
            run(true, in.dy, nullptr, dx);
            auto dx_ref = naive_backward(g, in.x, in.w, in.dy).dx;
            auto dx_bound = winograd_bound(g, in.dy, in.w, nullptr, true);
            e = check_within_bound(dx, dx_ref, dx_bound,
                                   winograd_tolerance(g.out_c), "dx");
            worst_dx = std::max(worst_dx,
                                e / winograd_tolerance(g.out_c));

            // The weight gradient in two partials (the images apart), as
            // the backward pass's chunks are summed.
            auto wp = cpu::make_winograd_plan_anyway(g, false);
            auto du_size = cpu::winograd_dw_floats(wp);
            // Each partial's first image overwrites it: no zeroing.
            std::vector<float> du(static_cast<size_t>(2 * du_size),
                                  std::nanf(""));
            padded.assign(static_cast<size_t>(g.batch * wp.padded.size()),
                          0.0f);
            scratch.assign(static_cast<size_t>(cpu::winograd_scratch_floats(
                             wp.layout, wp.block)),
                           0.0f);
            auto per_image_x = g.in_h * g.in_w * g.in_c;
            auto per_image_ds = g.out_h * g.out_w * g.out_c;
            for (int64_t n = 0; n < g.batch; ++n)
              cpu::winograd_dw_images(
                wp, in.x.data() + n * per_image_x,
                in.dy.data() + n * per_image_ds, 1,
                du.data() + (n % 2) * du_size, n < 2, padded.data(),
                scratch.data());
            tensor dw(g.kernel_shape());
            std::vector<double> du_sum;
            cpu::unpack_winograd_dw(g, wp, du.data(), 2, 1, du_sum, dw.data());
            auto dw_ref = naive_backward(g, in.x, in.w, in.dy).dw;
            auto tiles = wp.layout.tiles_h * wp.layout.tiles_w;
            e = check_within_bound(dw, dw_ref,
                                   winograd_dw_bound(g, in.x, in.dy),
                                   winograd_dw_tolerance(tiles), "dw");
            worst_dw = std::max(worst_dw,
                                e / winograd_dw_tolerance(tiles));

            cpu::allow_winograd(false);
            tensor direct;
            auto err = dev->conv2d_forward(g, in.x, in.w, in.b,
                                           activation::identity, direct);
            cpu::allow_winograd(true);
            SYNCFAC_REQUIRE_OK(err);
            worst_direct = std::max(
              worst_direct, scaled_error(direct, y_ref, y_bound)
                              / winograd_tolerance(g.in_c));
          }
        }
  BOOST_TEST_MESSAGE("F(" << m << "x" << m << ", " << k << "x" << k
                          << "): largest error / (bound x tolerance): "
                             "Winograd forward "
                          << worst_forward << ", input gradient " << worst_dx
                          << ", weight gradient " << worst_dw
                          << ", direct forward " << worst_direct);
  }
}

// A multi-tower run computes each tower's share of the batch apart and
// must match one device (examples_convnet_mnist_multi_tower): the forward
// pass and the input gradient of an example do not depend on the batch
// around it, bit for bit, Winograd's (16 channels, 3x3 and 5x5) included.
BOOST_AUTO_TEST_CASE(an_example_s_output_does_not_depend_on_the_batch) {
  std::mt19937 rng(23);
  auto dev = make_cpu_backend(3);
  auto tower = make_cpu_backend(1);
  for (auto cc : {conv_case{31, 14, 14, 16, 5, 5, 16, 1, 1, padding::same},
                  conv_case{31, 9, 7, 16, 3, 3, 32, 1, 1, padding::same},
                  conv_case{31, 9, 9, 8, 3, 3, 8, 1, 1, padding::valid}}) {
    BOOST_TEST_CONTEXT(cc.str()) {
      conv_inputs in{cc.geometry(), rng};
      conv_pass whole = forward_backward(*dev, in, activation::relu);
      int64_t first = 0;
      for (int64_t n : {10, 11, 10}) {
        auto part = cc;
        part.n = n;
        conv_inputs p_in{part.geometry(), rng};
        auto slice = [&](const tensor& t, tensor& into) {
          auto per = t.size() / cc.n;
          std::copy(t.data() + first * per, t.data() + (first + n) * per,
                    into.data());
        };
        slice(in.x, p_in.x);
        slice(in.dy, p_in.dy);
        p_in.w = in.w;
        p_in.b = in.b;
        conv_pass p = forward_backward(*tower, p_in, activation::relu);
        tensor y_part(p.y.shape()), dx_part(p.dx.shape());
        slice(whole.y, y_part);
        slice(whole.dx, dx_part);
        BOOST_TEST(same_bits(p.y, y_part));
        BOOST_TEST(same_bits(p.dx, dx_part));
        first += n;
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  std::mt19937 rng(3);
  auto dev = make_cpu_backend(1);
  const std::vector<conv_case> cases{
    {2, 5, 5, 3, 3, 3, 4, 1, 1, padding::same},
    {2, 5, 5, 3, 3, 3, 4, 1, 1, padding::valid},
    {2, 7, 5, 2, 3, 3, 3, 2, 2, padding::same},
    {2, 7, 5, 2, 3, 2, 3, 2, 1, padding::valid},
    {1, 6, 6, 3, 4, 4, 2, 2, 2, padding::same},
    {1, 4, 5, 8, 3, 3, 2, 1, 1, padding::same},
    {1, 5, 4, 9, 2, 3, 2, 1, 1, padding::valid},
  };
  for (const auto& cc : cases)
    for (auto act : all_activations()) {
      BOOST_TEST_CONTEXT(cc.str() << " " << to_string(act)) {
        // The upstream gradient is the probe loss's weights r.
        conv_inputs in{cc.geometry(), rng};
        auto p = forward_backward(*dev, in, act);
        check_layer_gradients(
          [&](tensor& out) {
            return dev->conv2d_forward(in.g, in.x, in.w, in.b, act, out);
          },
          act, p.y, in.dy, in.x, p.dx, in.w, p.dw, in.b, p.db);
      }
    }
}

BOOST_AUTO_TEST_CASE(null_dx_skips_input_gradient_only) {
  std::mt19937 rng(4);
  auto dev = make_cpu_backend(2);
  conv_inputs in{conv_case{3, 9, 9, 4, 3, 3, 6, 2, 2, padding::same}.geometry(),
                 rng};
  auto p = forward_backward(*dev, in, activation::relu);
  tensor ds, dw, db;
  SYNCFAC_REQUIRE_OK(dev->conv2d_backward(in.g, in.x, in.w, p.y, in.dy,
                                          activation::relu, ds, dw, db,
                                          nullptr));
  BOOST_CHECK(p.ds == ds);
  BOOST_CHECK(p.dw == dw);
  BOOST_CHECK(p.db == db);
}

BOOST_AUTO_TEST_CASE(backward_data_equals_the_full_backward_without_dw) {
  // K-FAC's statistics pass: ds and dx as conv2d_backward computes them,
  // bit for bit, with and without dx, for every case and activation.
  std::mt19937 rng(11);
  for (int threads : {1, 2}) {
    auto dev = make_cpu_backend(threads);
    for (const auto& cc : forward_cases())
      for (auto act : {activation::relu, activation::tanh}) {
        BOOST_TEST_CONTEXT(cc.str() << " " << to_string(act) << " threads "
                                    << threads) {
          conv_inputs in{cc.geometry(), rng};
          auto p = forward_backward(*dev, in, act);
          tensor ds2, dx2, ds3;
          SYNCFAC_REQUIRE_OK(dev->conv2d_backward_data(
            in.g, in.x, in.w, p.y, in.dy, act, ds2, &dx2));
          SYNCFAC_REQUIRE_OK(dev->conv2d_backward_data(
            in.g, in.x, in.w, p.y, in.dy, act, ds3, nullptr));
          BOOST_CHECK(ds2 == p.ds);
          BOOST_CHECK(dx2 == p.dx);
          BOOST_CHECK(ds3 == p.ds);
        }
      }
  }
  // Shapes are checked as in conv2d_backward.
  auto dev = make_cpu_backend(1);
  auto g = conv_case{2, 5, 5, 3, 3, 3, 4, 1, 1, padding::same}.geometry();
  auto x = random_tensor(g.input_shape(), rng);
  auto w = random_tensor(g.kernel_shape(), rng);
  auto y = random_tensor(g.output_shape(), rng);
  auto dy = random_tensor({2, 5, 5, 5}, rng);
  tensor ds, dx;
  auto err = dev->conv2d_backward_data(g, x, w, y, dy, activation::relu, ds,
                                       &dx);
  BOOST_CHECK(err);
  BOOST_CHECK(ds.empty());
}

BOOST_AUTO_TEST_CASE(backward_from_a_given_ds_equals_the_full_backward) {
  // The conv before a max_pool takes ds from the pool
  // (max_pool_backward_activated) and skips the activation pass: dw, db
  // and dx must be the bits the full backward gives for that ds, for
  // every case, activation and thread count, with and without dx; and the
  // base class's composition (the CUDA backend's) gives them too.
  std::mt19937 rng(12);
  for (int threads : {1, 2, 3}) {
    auto dev = make_cpu_backend(threads);
    for (const auto& cc : forward_cases())
      for (auto act : all_activations()) {
        BOOST_TEST_CONTEXT(cc.str() << " " << to_string(act) << " threads "
                                    << threads) {
          conv_inputs in{cc.geometry(), rng};
          auto p = forward_backward(*dev, in, act);
          tensor dw, db, dx, dw_nodx, db_nodx, dx_data;
          SYNCFAC_REQUIRE_OK(
            dev->conv2d_backward_from_ds(in.g, in.x, in.w, p.ds, dw, db, &dx));
          BOOST_CHECK(same_bits(dw, p.dw));
          BOOST_CHECK(same_bits(db, p.db));
          BOOST_CHECK(same_bits(dx, p.dx));
          SYNCFAC_REQUIRE_OK(dev->conv2d_backward_from_ds(
            in.g, in.x, in.w, p.ds, dw_nodx, db_nodx, nullptr));
          BOOST_CHECK(same_bits(dw_nodx, p.dw));
          BOOST_CHECK(same_bits(db_nodx, p.db));
          SYNCFAC_REQUIRE_OK(dev->conv2d_backward_data_from_ds(
            in.g, in.x, in.w, p.ds, &dx_data));
          BOOST_CHECK(same_bits(dx_data, p.dx));
          SYNCFAC_REQUIRE_OK(dev->conv2d_backward_data_from_ds(
            in.g, in.x, in.w, p.ds, nullptr));
          tensor dw_base, db_base, dx_base, dx_base_data;
          SYNCFAC_REQUIRE_OK(dev->backend::conv2d_backward_from_ds(
            in.g, in.x, in.w, p.ds, dw_base, db_base, &dx_base));
          BOOST_CHECK(same_bits(dw_base, p.dw));
          BOOST_CHECK(same_bits(db_base, p.db));
          BOOST_CHECK(same_bits(dx_base, p.dx));
          SYNCFAC_REQUIRE_OK(dev->backend::conv2d_backward_data_from_ds(
            in.g, in.x, in.w, p.ds, &dx_base_data));
          BOOST_CHECK(same_bits(dx_base_data, p.dx));
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(a_given_ds_of_another_shape_is_refused_by_name) {
  std::mt19937 rng(13);
  auto dev = make_cpu_backend(1);
  auto g = conv_case{2, 5, 5, 3, 3, 3, 4, 1, 1, padding::same}.geometry();
  auto x = random_tensor(g.input_shape(), rng);
  auto w = random_tensor(g.kernel_shape(), rng);
  auto ds = random_tensor({2, 5, 5, 5}, rng);
  tensor sentinel({1}, {4.0f});
  auto dw = sentinel;
  auto db = sentinel;
  auto dx = sentinel;
  check_error(dev->conv2d_backward_from_ds(g, x, w, ds, dw, db, &dx),
              ec::shape_mismatch,
              {"conv2d_backward_from_ds", "pre-activation gradient",
               "[2, 5, 5, 5]", "[2, 5, 5, 4]"});
  check_error(dev->conv2d_backward_data_from_ds(g, x, w, ds, &dx),
              ec::shape_mismatch,
              {"conv2d_backward_data_from_ds", "pre-activation gradient",
               "[2, 5, 5, 5]"});
  check_error(dev->conv2d_backward_data_from_ds(g, x, w, ds, nullptr),
              ec::shape_mismatch, {"[2, 5, 5, 5]"});
  BOOST_CHECK(dw == sentinel);
  BOOST_CHECK(db == sentinel);
  BOOST_CHECK(dx == sentinel);
}

BOOST_AUTO_TEST_CASE(one_and_two_threads_agree_over_many_tiles) {
  std::mt19937 rng(5);
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  for (auto cc : {conv_case{40, 14, 14, 16, 5, 5, 16, 1, 1, padding::same},
                  conv_case{37, 12, 11, 3, 3, 3, 10, 2, 2, padding::valid}}) {
    BOOST_TEST_CONTEXT(cc.str()) {
      conv_inputs in{cc.geometry(), rng};
      auto p1 = forward_backward(*one, in, activation::sigmoid);
      tensor y2, ds2, dw2, db2, dx2;
      SYNCFAC_REQUIRE_OK(
        two->conv2d_forward(in.g, in.x, in.w, in.b, activation::sigmoid, y2));
      check_close(y2, p1.y, 1e-5, 1e-5, "y");
      // The backward passes from the same y.
      SYNCFAC_REQUIRE_OK(two->conv2d_backward(in.g, in.x, in.w, p1.y, in.dy,
                                              activation::sigmoid, ds2, dw2,
                                              db2, &dx2));
      check_close(ds2, p1.ds, 1e-5, 1e-5, "ds");
      check_close(dw2, p1.dw, 1e-5, 1e-5, "dw");
      check_close(db2, p1.db, 1e-5, 1e-5, "db");
      check_close(dx2, p1.dx, 1e-5, 1e-5, "dx");
      // Fixed tiles and a fixed reduction order: identical, not just close.
      BOOST_CHECK(p1.dw == dw2);
    }
  }
}

BOOST_AUTO_TEST_CASE(repeated_calls_reuse_buffers_and_shapes_change) {
  std::mt19937 rng(6);
  auto dev = make_cpu_backend(2);
  tensor y;
  for (auto cc : {conv_case{4, 14, 14, 16, 5, 5, 16, 1, 1, padding::same},
                  conv_case{2, 6, 6, 3, 3, 3, 5, 2, 2, padding::valid},
                  conv_case{4, 14, 14, 16, 5, 5, 16, 1, 1, padding::same}}) {
    conv_inputs in{cc.geometry(), rng, false};
    SYNCFAC_REQUIRE_OK(
      dev->conv2d_forward(in.g, in.x, in.w, in.b, activation::identity, y));
    check_forward(in, activation::identity, y);
  }
}

BOOST_AUTO_TEST_CASE(empty_batch) {
  auto dev = make_cpu_backend(2);
  auto g = conv_case{0, 5, 5, 2, 3, 3, 4, 1, 1, padding::same}.geometry();
  tensor x(g.input_shape()), w(g.kernel_shape()), b({4}), y, ds, dw, db, dx;
  SYNCFAC_REQUIRE_OK(dev->conv2d_forward(g, x, w, b, activation::relu, y));
  BOOST_CHECK(y.shape() == g.output_shape());
  SYNCFAC_REQUIRE_OK(dev->conv2d_backward(g, x, w, y, y, activation::relu,
                                          ds, dw, db, &dx));
  BOOST_CHECK(dw == tensor(g.kernel_shape()));
  BOOST_CHECK(db == tensor({4}));
}

BOOST_AUTO_TEST_CASE(shape_errors_name_both_shapes_and_write_nothing) {
  auto dev = make_cpu_backend(1);
  auto g = conv_case{2, 5, 5, 3, 3, 3, 8, 1, 1, padding::same}.geometry();
  tensor x(g.input_shape()), w(g.kernel_shape()), b({8});
  tensor sentinel({1}, {42.0f});
  auto y = sentinel;
  check_error(dev->conv2d_forward(g, tensor({2, 5, 5, 4}), w, b,
                                  activation::relu, y),
              ec::shape_mismatch, {"[2, 5, 5, 4]", "[2, 5, 5, 3]"});
  check_error(dev->conv2d_forward(g, x, tensor({3, 3, 4, 8}), b,
                                  activation::relu, y),
              ec::shape_mismatch, {"[2, 5, 5, 3]", "[3, 3, 4, 8]"});
  check_error(dev->conv2d_forward(g, x, w, tensor({7}), activation::relu, y),
              ec::shape_mismatch, {"[7]", "[8]"});
  BOOST_CHECK(y == sentinel);
  tensor good_y(g.output_shape());
  auto ds = sentinel, dw = sentinel, db = sentinel, dx = sentinel;
  check_error(dev->conv2d_backward(g, x, w, good_y, tensor({2, 5, 5, 7}),
                                   activation::relu, ds, dw, db, &dx),
              ec::shape_mismatch, {"[2, 5, 5, 7]", "[2, 5, 5, 8]"});
  check_error(dev->conv2d_backward(g, x, w, tensor({2, 4, 4, 8}), good_y,
                                   activation::relu, ds, dw, db, &dx),
              ec::shape_mismatch, {"[2, 4, 4, 8]", "[2, 5, 5, 8]"});
  BOOST_CHECK(ds == sentinel && dw == sentinel && db == sentinel
              && dx == sentinel);
  auto bad = g;
  bad.out_h = 9;
  check_error(dev->conv2d_forward(bad, x, w, b, activation::relu, y),
              ec::invalid_argument, {"[2, 5, 5, 3]"});
  BOOST_CHECK(y == sentinel);
}
