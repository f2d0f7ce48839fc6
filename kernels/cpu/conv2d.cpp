// conv2d forward/backward: tiles of whole images run in parallel; each tile
// is zero-padded into a thread-local buffer (small enough for L2) and fed to
// the implicit-GEMM micro-kernels of conv_kernels.cpp.

#include <algorithm>
#include <cstring>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/conv_kernels.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"
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
// Padding of each row of the transposed kernel, so that the input-gradient
// kernel can read full vectors past a kernel row's end.
constexpr int64_t wt_row_pad = 16;

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

struct conv_plan {
  int64_t hp = 0; // padded input height
  int64_t wp = 0; // padded input width
  bool padded = false;
  int64_t image_size = 0;  // in_h * in_w * C
  int64_t padded_size = 0; // hp * wp * C
  int64_t rows_per_image = 0;
  int64_t tile_images = 1;
  int64_t tiles = 0;
  int64_t K = 0;
  int64_t opad = 0;
  patch_layout layout{};
};

conv_plan make_plan(const conv2d_geometry& g) {
  conv_plan p;
  // The last window may end past the input (SAME) or before it (VALID).
  auto pad_bottom = std::max<int64_t>(
    0, (g.out_h - 1) * g.stride_h + g.k_h - g.in_h - g.pad_top);
  auto pad_right = std::max<int64_t>(
    0, (g.out_w - 1) * g.stride_w + g.k_w - g.in_w - g.pad_left);
  p.hp = g.pad_top + g.in_h + pad_bottom;
  p.wp = g.pad_left + g.in_w + pad_right;
  p.padded = p.hp != g.in_h || p.wp != g.in_w;
  p.image_size = g.in_h * g.in_w * g.in_c;
  p.padded_size = p.hp * p.wp * g.in_c;
  p.rows_per_image = g.out_h * g.out_w;
  p.K = g.patch_size();
  p.opad = round_up(g.out_c, simd::width);
  auto per_image = 4 * (2 * p.padded_size + p.rows_per_image * g.out_c);
  auto balanced = std::max<int64_t>(1, (g.batch + min_tiles - 1) / min_tiles);
  p.tile_images = std::clamp<int64_t>(tile_budget_bytes / per_image, 1,
                                      balanced);
  p.tiles = (g.batch + p.tile_images - 1) / p.tile_images;
  p.layout.k_h = g.k_h;
  p.layout.tap_stride = p.wp * g.in_c;
  p.layout.segment = g.k_w * g.in_c;
  return p;
}

void fill_row_offsets(const conv2d_geometry& g, conv_plan& p,
                      std::vector<int64_t>& offsets) {
  offsets.resize(static_cast<size_t>(p.tile_images * p.rows_per_image));
  auto* out = offsets.data();
  for (int64_t n = 0; n < p.tile_images; ++n)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow)
        *out++ = ((n * p.hp + oh * g.stride_h) * p.wp + ow * g.stride_w)
                 * g.in_c;
  p.layout.row_offsets = offsets.data();
}

void fill_tap_offsets(const conv_plan& p, std::vector<int64_t>& offsets) {
  offsets.resize(static_cast<size_t>(p.K));
  for (int64_t kh = 0; kh < p.layout.k_h; ++kh)
    for (int64_t j = 0; j < p.layout.segment; ++j)
      offsets[static_cast<size_t>(kh * p.layout.segment + j)]
        = kh * p.layout.tap_stride + j;
}

// w [K, O] -> [K, opad] and b [O] -> [opad], zero-filled past O.
void pack_forward(const conv_plan& p, int64_t out_c, const float* w,
                  const float* b, conv_workspace& ws) {
  ws.w_packed.assign(static_cast<size_t>(p.K * p.opad), 0.0f);
  for (int64_t k = 0; k < p.K; ++k)
    std::copy(w + k * out_c, w + (k + 1) * out_c,
              ws.w_packed.data() + k * p.opad);
  ws.bias.assign(static_cast<size_t>(p.opad), 0.0f);
  std::copy(b, b + out_c, ws.bias.data());
}

// w [K, O] -> [O, K + wt_row_pad].
void pack_transposed(const conv_plan& p, int64_t out_c, const float* w,
                     conv_workspace& ws) {
  auto ld = p.K + wt_row_pad;
  ws.w_transposed.assign(static_cast<size_t>(out_c * ld), 0.0f);
  for (int64_t k = 0; k < p.K; ++k)
    for (int64_t o = 0; o < out_c; ++o)
      ws.w_transposed[static_cast<size_t>(o * ld + k)] = w[k * out_c + o];
}

void reserve_thread_buffers(std::vector<std::vector<float>>& buffers,
                            int threads, int64_t size) {
  buffers.resize(static_cast<size_t>(threads));
  for (auto& buf : buffers)
    if (static_cast<int64_t>(buf.size()) < size)
      buf.resize(static_cast<size_t>(size));
}

// Copies n images into dst with zero borders; returns dst.
const float* pad_images(const conv2d_geometry& g, const conv_plan& p,
                        const float* x, int64_t n, float* dst) {
  auto row = g.in_w * g.in_c;
  auto prow = p.wp * g.in_c;
  auto left = g.pad_left * g.in_c;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t h = 0; h < p.hp; ++h) {
      float* d = dst + (img * p.hp + h) * prow;
      auto ih = h - g.pad_top;
      if (ih < 0 || ih >= g.in_h) {
        std::fill(d, d + prow, 0.0f);
        continue;
      }
      std::fill(d, d + left, 0.0f);
      const float* s = x + (img * g.in_h + ih) * row;
      std::copy(s, s + row, d + left);
      std::fill(d + left + row, d + prow, 0.0f);
    }
  return dst;
}

// The inverse of pad_images: the interior of n padded images to dx.
void unpad_images(const conv2d_geometry& g, const conv_plan& p,
                  const float* src, int64_t n, float* dx) {
  auto row = g.in_w * g.in_c;
  auto prow = p.wp * g.in_c;
  auto left = g.pad_left * g.in_c;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t h = 0; h < g.in_h; ++h) {
      const float* s = src + (img * p.hp + h + g.pad_top) * prow + left;
      std::copy(s, s + row, dx + (img * g.in_h + h) * row);
    }
}

caf::error check_conv_inputs(const char* op, const conv2d_geometry& g,
                             const tensor& x, const tensor& w) {
  if (auto err = check_geometry(op, g))
    return err;
  if (auto err = expect_shape(op, "input", x.shape(), "geometry input",
                              g.input_shape()))
    return err;
  if (w.shape() != g.kernel_shape())
    return mismatch(op, "input", x.shape(), "kernel", w.shape(),
                    "the geometry expects kernel "
                      + to_string(g.kernel_shape()));
  return caf::none;
}

struct tile_span {
  int64_t first_image;
  int64_t images;
  int64_t first_row;
  int64_t rows;
};

tile_span tile_of(const conv2d_geometry& g, const conv_plan& p, int64_t t) {
  tile_span s;
  s.first_image = t * p.tile_images;
  s.images = std::min(p.tile_images, g.batch - s.first_image);
  s.first_row = s.first_image * p.rows_per_image;
  s.rows = s.images * p.rows_per_image;
  return s;
}

struct backward_job {
  const conv2d_geometry& g;
  const conv_plan& p;
  conv_workspace& ws;
  activation act;
  const float* x;
  const float* y;
  const float* dy;
  float* ds;
  float* dx; // null: no input gradient
};

void add_column_sums(const float* ds, int64_t rows, int64_t cols,
                     float* sums) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t o = 0; o < cols; ++o)
      sums[o] += ds[m * cols + o];
}

void backward_tile(const backward_job& job, int64_t t, int thread,
                   float* dw_partial, float* db_partial) {
  const auto& g = job.g;
  const auto& p = job.p;
  auto s = tile_of(g, p, t);
  auto O = g.out_c;
  float* ds = job.ds + s.first_row * O;
  activation_grad(job.act, job.y + s.first_row * O,
                  job.dy + s.first_row * O, ds, s.rows * O);
  add_column_sums(ds, s.rows, O, db_partial);
  const float* x = job.x + s.first_image * p.image_size;
  auto idx = static_cast<size_t>(thread);
  const float* base
    = p.padded ? pad_images(g, p, x, s.images, job.ws.padded[idx].data())
               : x;
  conv_weight_grad(base, p.layout, job.ws.tap_offsets.data(), p.K, s.rows, ds,
                   O, dw_partial, p.opad);
  if (job.dx == nullptr)
    return;
  float* dx = job.dx + s.first_image * p.image_size;
  float* acc = p.padded ? job.ws.dpadded[idx].data() : dx;
  auto acc_size = s.images * (p.padded ? p.padded_size : p.image_size);
  std::fill(acc, acc + acc_size, 0.0f);
  conv_input_grad(acc, p.layout, s.rows, ds, O, job.ws.w_transposed.data(),
                  p.K + wt_row_pad);
  if (p.padded)
    unpad_images(g, p, acc, s.images, dx);
}

int64_t chunk_count(const conv_plan& p, int threads) {
  auto per_chunk = std::max<int64_t>(1, 4 * p.K * p.opad);
  auto by_memory = std::max<int64_t>(max_partial_bytes / per_chunk, threads);
  return std::min({p.tiles, max_chunks, by_memory});
}

} // namespace

caf::error cpu_backend::conv2d_forward(const conv2d_geometry& g,
                                       const tensor& x, const tensor& w,
                                       const tensor& b, activation act,
                                       tensor& y) {
  const char* op = "conv2d_forward";
  if (auto err = check_conv_inputs(op, g, x, w))
    return err;
  if (auto err = expect_shape(op, "bias", b.shape(), "out channels",
                              {g.out_c}))
    return err;
  auto p = make_plan(g);
  pack_forward(p, g.out_c, w.data(), b.data(), conv_);
  fill_row_offsets(g, p, conv_.row_offsets);
  if (p.padded)
    reserve_thread_buffers(conv_.padded, threads_,
                           p.tile_images * p.padded_size);
  y.resize(g.output_shape());
  bool fused = act == activation::relu || act == activation::identity;
  parallel_for(threads_, p.tiles, [&](int64_t t, int thread) {
    auto s = tile_of(g, p, t);
    const float* in = x.data() + s.first_image * p.image_size;
    const float* base
      = p.padded ? pad_images(g, p, in, s.images,
                              conv_.padded[static_cast<size_t>(thread)].data())
                 : in;
    float* out = y.data() + s.first_row * g.out_c;
    conv_forward_rows(base, p.layout, s.rows, conv_.w_packed.data(), p.opad,
                      conv_.bias.data(), g.out_c, act == activation::relu,
                      out);
    if (!fused) // while the tile is still in cache
      apply_activation(act, out, s.rows * g.out_c);
  });
  return caf::none;
}

caf::error cpu_backend::conv2d_backward(const conv2d_geometry& g,
                                        const tensor& x, const tensor& w,
                                        const tensor& y, const tensor& dy,
                                        activation act, tensor& ds,
                                        tensor& dw, tensor& db, tensor* dx) {
  const char* op = "conv2d_backward";
  if (auto err = check_conv_inputs(op, g, x, w))
    return err;
  if (auto err = expect_shape(op, "output", y.shape(), "geometry output",
                              g.output_shape()))
    return err;
  if (auto err = expect_shape(op, "output gradient", dy.shape(), "output",
                              y.shape()))
    return err;
  auto p = make_plan(g);
  fill_row_offsets(g, p, conv_.row_offsets);
  fill_tap_offsets(p, conv_.tap_offsets);
  if (dx != nullptr)
    pack_transposed(p, g.out_c, w.data(), conv_);
  if (p.padded) {
    reserve_thread_buffers(conv_.padded, threads_,
                           p.tile_images * p.padded_size);
    if (dx != nullptr)
      reserve_thread_buffers(conv_.dpadded, threads_,
                             p.tile_images * p.padded_size);
  }
  auto chunks = chunk_count(p, threads_);
  auto dw_size = p.K * p.opad;
  conv_.dw_partials.assign(static_cast<size_t>(chunks * dw_size), 0.0f);
  conv_.db_partials.assign(static_cast<size_t>(chunks * p.opad), 0.0f);
  ds.resize(g.output_shape());
  if (dx != nullptr)
    dx->resize(g.input_shape());
  backward_job job{g,       p,         conv_,     act,
                   x.data(), y.data(), dy.data(), ds.data(),
                   dx != nullptr ? dx->data() : nullptr};
  parallel_for(threads_, chunks, [&](int64_t c, int thread) {
    auto tiles = split(p.tiles, chunks, c);
    for (auto t = tiles.begin; t < tiles.end; ++t)
      backward_tile(job, t, thread, conv_.dw_partials.data() + c * dw_size,
                    conv_.db_partials.data() + c * p.opad);
  });
  dw.resize(g.kernel_shape());
  db.resize({g.out_c});
  std::fill(dw.values().begin(), dw.values().end(), 0.0f);
  std::fill(db.values().begin(), db.values().end(), 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    const float* part = conv_.dw_partials.data() + c * dw_size;
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t o = 0; o < g.out_c; ++o)
        dw[k * g.out_c + o] += part[k * p.opad + o];
    add_column_sums(conv_.db_partials.data() + c * p.opad, 1, g.out_c,
                    db.data());
  }
  return caf::none;
}

} // namespace syncfac::cpu
