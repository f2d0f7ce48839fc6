#include "kernels/cpu/winograd.hpp"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/winograd_transforms.hpp"

namespace syncfac::cpu {

namespace {

std::atomic<bool> winograd_allowed{true};

// V and M of one block of tiles together: well inside the 1 MiB L2, with
// the transformed kernel (up to 36 x 64 x 64 floats) beside them.
constexpr int64_t block_budget_floats = 48 * 1024;
// Tiles per block: a multiple of the GEMM's register rows at both levels
// (6 at AVX2, 12 at AVX-512), at least one block of 12.
constexpr int64_t block_step = 12;
constexpr int64_t max_block = 120;

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// in_c, out_c: the channels of the conv Winograd runs (swapped for the
// input gradient); out_h x out_w its output, src placed at (top, left).
winograd_plan plan_of(const conv2d_geometry& g, image_box src,
                      int64_t out_h, int64_t out_w, int64_t out_c,
                      int64_t top, int64_t left) {
  winograd_plan wp;
  auto r = g.k_h;
  bool shape_fits = g.stride_h == 1 && g.stride_w == 1 && g.k_h == g.k_w
                    && (r == 3 || r == 5) && out_h > 0 && out_w > 0
                    && top >= 0 && left >= 0;
  if (!shape_fits)
    return wp;
  auto& l = wp.layout;
  l.r = static_cast<int>(r);
  l.m = winograd::tile_of(l.r);
  l.c = src.c;
  l.cpad = round_up(src.c, winograd_channel_block);
  l.out_h = out_h;
  l.out_w = out_w;
  l.out_c = out_c;
  l.opad = round_up(out_c, winograd_channel_block);
  l.tiles_h = (out_h + l.m - 1) / l.m;
  l.tiles_w = (out_w + l.m - 1) / l.m;
  wp.src = src;
  wp.padded = {l.m * l.tiles_h + r - 1, l.m * l.tiles_w + r - 1, src.c};
  wp.top = top;
  wp.left = left;
  // pad_images copies whole source rows: they must fit the padded row.
  if (left + src.w > wp.padded.w)
    return wp;
  l.ph = wp.padded.h;
  l.pw = wp.padded.w;
  auto per_tile = int64_t{winograd::alpha} * winograd::alpha
                  * (l.cpad + l.opad);
  wp.block = std::clamp<int64_t>(
    block_budget_floats / per_tile / block_step * block_step, block_step,
    max_block);
  wp.use = true;
  return wp;
}

winograd_plan forward_plan(const conv2d_geometry& g) {
  return plan_of(g, {g.in_h, g.in_w, g.in_c}, g.out_h, g.out_w, g.out_c,
                 g.pad_top, g.pad_left);
}

// dx[i] = sum_k ds_padded[i + k] w[K - 1 - k], ds placed k - 1 - pad into
// the padded image (conv_plan.cpp's make_dx_plan).
winograd_plan dx_plan_of(const conv2d_geometry& g) {
  return plan_of(g, {g.out_h, g.out_w, g.out_c}, g.in_h, g.in_w, g.in_c,
                 g.k_h - 1 - g.pad_top, g.k_w - 1 - g.pad_left);
}

} // namespace

bool winograd_pays(int64_t k_h, int64_t k_w, int64_t stride_h,
                   int64_t stride_w, int64_t in_c, int64_t out_c) {
  return winograd_allowed.load(std::memory_order_relaxed) && stride_h == 1
         && stride_w == 1 && k_h == k_w && (k_h == 3 || k_h == 5)
         && in_c >= winograd_min_channels && out_c >= winograd_min_channels;
}

winograd_plan make_winograd_plan(const conv2d_geometry& g) {
  if (!winograd_pays(g.k_h, g.k_w, g.stride_h, g.stride_w, g.in_c, g.out_c))
    return {};
  return forward_plan(g);
}

winograd_plan make_winograd_dx_plan(const conv2d_geometry& g) {
  if (!winograd_pays(g.k_h, g.k_w, g.stride_h, g.stride_w, g.out_c, g.in_c))
    return {};
  return dx_plan_of(g);
}

winograd_plan make_winograd_plan_anyway(const conv2d_geometry& g,
                                        bool input_gradient) {
  return input_gradient ? dx_plan_of(g) : forward_plan(g);
}

namespace {

/// s[co] = sum over t < terms of coef(t) src(t)[co] for co < n, the terms
/// in order, co the innermost loop so that it runs in vectors: the
/// transforms of pack_winograd and unpack_winograd_dw. The vector loop
/// may round an inexact product (G's 1/6, 1/24, ...) unlike a scalar one.
template <class Coef, class Src>
void weighted_sum(int terms, Coef coef, Src src, int64_t n, double* s) {
  std::fill(s, s + n, 0.0);
  for (int t = 0; t < terms; ++t) {
    const double c = coef(t);
    const double* x = src(t);
    for (int64_t co = 0; co < n; ++co)
      s[co] += c * x[co];
  }
}

/// dst[co] = s[co] rounded to float for co < n, and zero for n <= co <
/// width (a channel block's padding lanes).
void round_into(const double* s, int64_t n, int64_t width, float* dst) {
  for (int64_t co = 0; co < n; ++co)
    dst[co] = static_cast<float>(s[co]);
  std::fill(dst + n, dst + width, 0.0f);
}

} // namespace

void pack_winograd(const conv2d_geometry& g, const winograd_plan& wp,
                   bool input_gradient, const float* w, const float* b,
                   int threads, std::vector<float>& u,
                   std::vector<float>& bias) {
  const auto& l = wp.layout;
  const int r = l.r;
  const int alpha = winograd::alpha;
  const auto C = g.in_c;
  const auto O = g.out_c;
  const auto n = l.out_c; // the outputs of the plan's conv
  // Every element is written below: no zeroing pass.
  grow_to(u, int64_t{alpha} * alpha * l.cpad * l.opad);
  // Per input channel ci (on the threads), every output co at once (the
  // innermost loop, so that it runs in vectors), each value's sums over
  // the terms of one (ci, co) alone, in order.
  const auto gk_size = static_cast<size_t>(r * r * n);
  const auto half_size = static_cast<size_t>(alpha * r * n);
  std::vector<std::vector<double>> scratch(
    static_cast<size_t>(std::max(threads, 1)),
    std::vector<double>(gk_size + half_size + static_cast<size_t>(n)));
  parallel_for(threads, l.cpad, [&](int64_t ci, int thread) {
    auto row = [&](int i, int j) {
      return u.data() + ((i * alpha + j) * l.cpad + ci) * l.opad;
    };
    if (ci >= l.c) { // the channel block's padding rows
      for (int ij = 0; ij < alpha * alpha; ++ij)
        std::fill(row(ij / alpha, ij % alpha),
                  row(ij / alpha, ij % alpha) + l.opad, 0.0f);
      return;
    }
    double* gk = scratch[static_cast<size_t>(thread)].data();
    double* half = gk + gk_size;
    double* s = half + half_size;
    for (int a = 0; a < r; ++a)
      for (int e = 0; e < r; ++e) {
        // The forward kernel tap (a, e) from input ci to output co, or
        // the flipped tap with the channel axes swapped.
        double* dst = gk + (a * r + e) * n;
        if (input_gradient) {
          const float* src = w + (((r - 1 - a) * r + (r - 1 - e)) * C) * O + ci;
          for (int64_t co = 0; co < n; ++co)
            dst[co] = src[co * O];
        } else {
          const float* src = w + ((a * r + e) * C + ci) * O;
          for (int64_t co = 0; co < n; ++co)
            dst[co] = src[co];
        }
      }
    for (int i = 0; i < alpha; ++i) // G g
      for (int e = 0; e < r; ++e)
        weighted_sum(
          r, [&](int a) { return winograd::g(r, i, a); },
          [&](int a) { return gk + (a * r + e) * n; }, n,
          half + (i * r + e) * n);
    for (int i = 0; i < alpha; ++i) // (G g) G^T
      for (int j = 0; j < alpha; ++j) {
        weighted_sum(
          r, [&](int e) { return winograd::g(r, j, e); },
          [&](int e) { return half + (i * r + e) * n; }, n, s);
        round_into(s, n, l.opad, row(i, j));
      }
  });
  bias.assign(static_cast<size_t>(l.opad), 0.0f);
  if (b != nullptr)
    std::copy(b, b + l.out_c, bias.begin());
}

void winograd_images(const winograd_plan& wp, const float* src, int64_t n,
                     const float* u, const float* bias, bool relu,
                     float* out, float* padded, float* scratch) {
  pad_images(src, n, wp.src, wp.padded, wp.top, wp.left, padded);
  auto l = wp.layout;
  l.in = padded;
  l.u = u;
  l.bias = bias;
  l.relu = relu;
  l.out = out;
  auto tiles = n * l.tiles_h * l.tiles_w;
  for (int64_t t = 0; t < tiles; t += wp.block)
    conv_winograd_tiles(l, t, std::min(wp.block, tiles - t), scratch);
}

int64_t winograd_dw_floats(const winograd_plan& wp) {
  const auto& l = wp.layout;
  return int64_t{winograd::alpha} * winograd::alpha * l.cpad * l.opad;
}

void winograd_dw_images(const winograd_plan& wp, const float* x,
                        const float* ds, int64_t n, float* du, bool overwrite,
                        float* padded, float* scratch) {
  pad_images(x, n, wp.src, wp.padded, wp.top, wp.left, padded);
  auto l = wp.layout;
  l.in = padded;
  auto tiles = n * l.tiles_h * l.tiles_w;
  for (int64_t t = 0; t < tiles; t += wp.block)
    conv_winograd_dw_tiles(l, ds, t, std::min(wp.block, tiles - t), du,
                           overwrite && t == 0, scratch);
}

void unpack_winograd_dw(const conv2d_geometry& g, const winograd_plan& wp,
                        const float* du_partials, int64_t partials,
                        int threads, std::vector<double>& du, float* dw) {
  const auto& l = wp.layout;
  const int r = l.r;
  const int alpha = winograd::alpha;
  const auto size = winograd_dw_floats(wp);
  // The partials summed in order, in double, over contiguous parts of dU
  // on the threads (streams: megabytes for 64 channels).
  grow_to(du, size);
  const auto parts = std::clamp<int64_t>(size / min_elements_per_part, 1,
                                         std::max(threads, 1));
  parallel_for(static_cast<int>(parts), parts, [&](int64_t part, int) {
    auto [begin, end] = split(size, parts, part);
    double* sum = du.data();
    for (int64_t i = begin; i < end; ++i)
      sum[i] = du_partials[i];
    for (int64_t c = 1; c < partials; ++c) {
      const float* partial = du_partials + c * size;
      for (int64_t i = begin; i < end; ++i)
        sum[i] += partial[i];
    }
  });
  // Per input channel ci (on the threads), as pack_winograd: every output
  // co at once, each value's sums over the same terms in the same order
  // as for one (ci, co) alone.
  const auto n = g.out_c;
  const auto half_size = static_cast<size_t>(r * alpha * n);
  std::vector<std::vector<double>> scratch(
    static_cast<size_t>(std::max(threads, 1)),
    std::vector<double>(half_size + static_cast<size_t>(n)));
  parallel_for(threads, g.in_c, [&](int64_t ci, int thread) {
    double* half = scratch[static_cast<size_t>(thread)].data();
    double* s = half + half_size;
    auto at = [&](int i, int j) {
      return du.data() + ((i * alpha + j) * l.cpad + ci) * l.opad;
    };
    for (int a = 0; a < r; ++a) // G^T dU
      for (int j = 0; j < alpha; ++j)
        weighted_sum(
          alpha, [&](int i) { return winograd::g(r, i, a); },
          [&](int i) { return at(i, j); }, n, half + (a * alpha + j) * n);
    for (int a = 0; a < r; ++a) // (G^T dU) G
      for (int e = 0; e < r; ++e) {
        weighted_sum(
          alpha, [&](int j) { return winograd::g(r, j, e); },
          [&](int j) { return half + (a * alpha + j) * n; }, n, s);
        round_into(s, n, n, dw + ((a * r + e) * g.in_c + ci) * g.out_c);
      }
  });
}

void allow_winograd(bool allowed) {
  winograd_allowed.store(allowed, std::memory_order_relaxed);
}

} // namespace syncfac::cpu
