#include "kernels/cpu/conv_plan.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu {

namespace {

// A tile's padded input plus its output rows should stay in L2 (1 MiB here,
// shared with the weights and the other operand), and the batch should split
// into enough tiles to balance two or more threads.
constexpr int64_t tile_budget_bytes = 256 * 1024;
constexpr int64_t min_tiles = 16;
// Weight-gradient partial sums: one per chunk of tiles, summed in a fixed
// order so that results do not depend on the thread count or scheduling.
constexpr int64_t max_chunks = 16;
constexpr int64_t max_partial_bytes = int64_t{64} << 20;

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

} // namespace

conv_plan make_plan(const conv2d_geometry& g) {
  conv_plan p;
  // The last window may end past the input (SAME) or before it (VALID).
  auto pad_bottom = std::max<int64_t>(
    0, (g.out_h - 1) * g.stride_h + g.k_h - g.in_h - g.pad_top);
  auto pad_right = std::max<int64_t>(
    0, (g.out_w - 1) * g.stride_w + g.k_w - g.in_w - g.pad_left);
  p.in = {g.in_h, g.in_w, g.in_c};
  p.padded = {g.pad_top + g.in_h + pad_bottom,
              g.pad_left + g.in_w + pad_right, g.in_c};
  p.needs_padding = p.padded.h != g.in_h || p.padded.w != g.in_w;
  p.rows_per_image = g.out_h * g.out_w;
  p.K = g.patch_size();
  p.opad = round_up(g.out_c, simd::width);
  auto per_image = 4 * (2 * p.padded.size() + p.rows_per_image * g.out_c);
  auto balanced = std::max<int64_t>(1, (g.batch + min_tiles - 1) / min_tiles);
  p.tile_images = std::clamp<int64_t>(tile_budget_bytes / per_image, 1,
                                      balanced);
  p.tiles = (g.batch + p.tile_images - 1) / p.tile_images;
  p.layout.k_h = g.k_h;
  p.layout.tap_stride = p.padded.w * g.in_c;
  p.layout.segment = g.k_w * g.in_c;
  p.layout.row_step = g.stride_w * g.in_c;
  return p;
}

dx_plan make_dx_plan(const conv2d_geometry& g) {
  dx_plan d;
  d.use = g.stride_h == 1 && g.stride_w == 1 && g.in_c >= simd::width;
  if (!d.use)
    return d;
  // dx[i] = sum_k ds[i - k + pad] w[k] = sum_k' ds_padded[i + k'] w[K-1-k']
  // with ds placed k - 1 - pad into the padded image.
  d.ds = {g.out_h, g.out_w, g.out_c};
  d.padded = {g.in_h + g.k_h - 1, g.in_w + g.k_w - 1, g.out_c};
  d.top = g.k_h - 1 - g.pad_top;
  d.left = g.k_w - 1 - g.pad_left;
  d.rows_per_image = g.in_h * g.in_w;
  d.K = g.k_h * g.k_w * g.out_c;
  d.cpad = round_up(g.in_c, simd::width);
  d.layout.k_h = g.k_h;
  d.layout.tap_stride = d.padded.w * g.out_c;
  d.layout.segment = g.k_w * g.out_c;
  d.layout.row_step = g.out_c;
  return d;
}

void fill_row_offsets(const conv2d_geometry& g, conv_plan& p,
                      std::vector<int64_t>& offsets) {
  offsets.resize(static_cast<size_t>(p.tile_images * p.rows_per_image));
  auto* out = offsets.data();
  for (int64_t n = 0; n < p.tile_images; ++n)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow)
        *out++ = ((n * p.padded.h + oh * g.stride_h) * p.padded.w
                  + ow * g.stride_w)
                 * g.in_c;
  p.layout.row_offsets = offsets.data();
}

void fill_dx_row_offsets(const conv2d_geometry& g, int64_t tile_images,
                         dx_plan& d, std::vector<int64_t>& offsets) {
  offsets.resize(static_cast<size_t>(tile_images * d.rows_per_image));
  auto* out = offsets.data();
  for (int64_t n = 0; n < tile_images; ++n)
    for (int64_t ih = 0; ih < g.in_h; ++ih)
      for (int64_t iw = 0; iw < g.in_w; ++iw)
        *out++ = ((n * d.padded.h + ih) * d.padded.w + iw) * g.out_c;
  d.layout.row_offsets = offsets.data();
}

void fill_tap_offsets(const conv_plan& p, std::vector<int64_t>& offsets) {
  offsets.resize(static_cast<size_t>(p.K));
  for (int64_t kh = 0; kh < p.layout.k_h; ++kh)
    for (int64_t j = 0; j < p.layout.segment; ++j)
      offsets[static_cast<size_t>(kh * p.layout.segment + j)]
        = kh * p.layout.tap_stride + j;
}

void pack_forward(const conv_plan& p, int64_t out_c, const float* w,
                  const float* b, conv_workspace& ws) {
  ws.w_packed.assign(static_cast<size_t>(p.K * p.opad), 0.0f);
  for (int64_t k = 0; k < p.K; ++k)
    std::copy(w + k * out_c, w + (k + 1) * out_c,
              ws.w_packed.data() + k * p.opad);
  ws.bias.assign(static_cast<size_t>(p.opad), 0.0f);
  std::copy(b, b + out_c, ws.bias.data());
}

void pack_transposed(const conv_plan& p, int64_t out_c, const float* w,
                     conv_workspace& ws) {
  auto ld = p.K + wt_row_pad;
  ws.w_transposed.assign(static_cast<size_t>(out_c * ld), 0.0f);
  for (int64_t k = 0; k < p.K; ++k)
    for (int64_t o = 0; o < out_c; ++o)
      ws.w_transposed[static_cast<size_t>(o * ld + k)] = w[k * out_c + o];
}

void pack_flipped(const conv2d_geometry& g, const dx_plan& d, const float* w,
                  conv_workspace& ws) {
  ws.w_flipped.assign(static_cast<size_t>(d.K * d.cpad), 0.0f);
  auto C = g.in_c;
  auto O = g.out_c;
  for (int64_t kh = 0; kh < g.k_h; ++kh)
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      const float* src = w + ((g.k_h - 1 - kh) * g.k_w + (g.k_w - 1 - kw)) * C * O;
      float* dst = ws.w_flipped.data() + (kh * g.k_w + kw) * O * d.cpad;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t o = 0; o < O; ++o)
          dst[o * d.cpad + c] = src[c * O + o];
    }
  ws.zero_bias.assign(static_cast<size_t>(d.cpad), 0.0f);
}

void pad_images(const float* src, int64_t n, image_box in, image_box out,
                int64_t top, int64_t left, float* dst) {
  auto row = in.w * in.c;
  auto prow = out.w * in.c;
  auto before = left * in.c;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t h = 0; h < out.h; ++h) {
      float* d = dst + (img * out.h + h) * prow;
      auto ih = h - top;
      if (ih < 0 || ih >= in.h) {
        std::fill(d, d + prow, 0.0f);
        continue;
      }
      std::fill(d, d + before, 0.0f);
      const float* s = src + (img * in.h + ih) * row;
      std::copy(s, s + row, d + before);
      std::fill(d + before + row, d + prow, 0.0f);
    }
}

void unpad_images(const float* src, int64_t n, image_box padded,
                  image_box out, int64_t top, int64_t left, float* dst) {
  auto row = out.w * out.c;
  auto prow = padded.w * out.c;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t h = 0; h < out.h; ++h) {
      const float* s = src + (img * padded.h + h + top) * prow + left * out.c;
      std::copy(s, s + row, dst + (img * out.h + h) * row);
    }
}

tile_span tile_of(const conv2d_geometry& g, const conv_plan& p, int64_t t) {
  tile_span s;
  s.first_image = t * p.tile_images;
  s.images = std::min(p.tile_images, g.batch - s.first_image);
  s.first_row = s.first_image * p.rows_per_image;
  s.rows = s.images * p.rows_per_image;
  return s;
}

int64_t chunk_count(const conv_plan& p, int threads) {
  auto per_chunk = std::max<int64_t>(1, 4 * p.K * p.opad);
  auto by_memory = std::max<int64_t>(max_partial_bytes / per_chunk, threads);
  return std::min({p.tiles, max_chunks, by_memory});
}

namespace {

constexpr int64_t line_floats = 16; // 64 bytes

} // namespace

void reserve_thread_buffers(std::vector<std::vector<float>>& buffers,
                            int threads, int64_t size) {
  buffers.resize(static_cast<size_t>(threads));
  for (auto& buf : buffers)
    if (static_cast<int64_t>(buf.size()) < size + line_floats)
      buf.resize(static_cast<size_t>(size + line_floats));
}

float* line_start(std::vector<float>& buffer) {
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  auto skip = (64 - address % 64) % 64 / sizeof(float);
  return buffer.data() + skip;
}

namespace {

// sums[o] += sum_m ds[m, o] for o < N, the sum over m in order: with N a
// constant the block's sums stay in registers (two ymm at N = 16), where
// the loop over a variable count kept them in memory and every row waited
// on a store and a reload (conv1's 100,352 rows a call).
template <int64_t N>
void add_block_sums(const float* ds, int64_t rows, int64_t cols,
                    float* sums) {
  float acc[N] = {};
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t o = 0; o < N; ++o)
      acc[o] += ds[m * cols + o];
  for (int64_t o = 0; o < N; ++o)
    sums[o] += acc[o];
}

} // namespace

// Accumulates in a local block first: sums is a per-chunk partial whose
// cache line may neighbour another thread's, and a float* that might alias
// ds would otherwise be reloaded for every row. Each column's sum runs
// over the rows in order whatever the block, so the bits do not depend on
// the blocking.
void add_column_sums(const float* ds, int64_t rows, int64_t cols,
                     float* sums) {
  constexpr int64_t block = 16;
  int64_t o0 = 0;
  for (; o0 + block <= cols; o0 += block)
    add_block_sums<block>(ds + o0, rows, cols, sums + o0);
  if (o0 == cols)
    return;
  auto n = cols - o0;
  float acc[block] = {};
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t o = 0; o < n; ++o)
      acc[o] += ds[m * cols + o0 + o];
  for (int64_t o = 0; o < n; ++o)
    sums[o0 + o] += acc[o];
}

} // namespace syncfac::cpu
