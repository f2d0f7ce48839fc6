// K-FAC factor statistics: every factor is a scaled Gram matrix X^T X.
//
// Conv factors (and any rows that must be gathered or extracted) use fixed
// chunks of rows: a chunk im2cols tile after tile into its thread's buffer
// and accumulates tile^T tile into its own partial sum (Eigen's SYRK, the
// lower triangle only); the partials are added in chunk order at the end.
// Dense factors read the rows in place and split the lower triangle into
// fixed blocks, one GEMM (SYRK on the diagonal) over all rows each.
//
// The SYRK, GEMM and few-rows kernels are the selected instruction-set
// level's (kernels/cpu/gram_kernels.cpp through kernels/cpu/isa.hpp).
//
// Chunks, tiles and blocks depend only on the shapes, never on the thread
// count, so results are bit-identical for any number of threads. A team
// synchronises only before the reduction: on the shared cores, a first
// version with a barrier per tile (all threads filling one tile, then
// updating blocks of it) was 2-8x slower at two threads than at one.

#include "kernels/cpu/kfac_factors.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/kfac_checks.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/parallel.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

// Output blocks of a dense factor: large enough for Eigen's GEMM to run
// near its peak, small enough that a 785-wide factor gives two threads 28
// blocks to balance.
constexpr int64_t block_size = 128;

// A tile of rows fills about half of the 1 MiB L2 next to the partial sum
// it updates.
constexpr int64_t tile_floats = int64_t{1} << 17;
constexpr int64_t min_tile_rows = 16;
constexpr int64_t max_tile_rows = 4096;

// Chunks bound the parallelism of a conv factor; their partial sums are
// capped at 64 MiB together (16 chunks up to a width of 1024).
constexpr int64_t max_chunks = 16;
constexpr int64_t partial_floats = int64_t{1} << 24;

int64_t tile_rows_for(int64_t width) {
  auto rows = tile_floats / std::max<int64_t>(width, 1);
  return std::clamp(rows, min_tile_rows, max_tile_rows) / 16 * 16;
}

int64_t chunks_for(int64_t rows, int64_t width, int64_t tile_rows) {
  auto by_memory = partial_floats / std::max<int64_t>(width * width, 1);
  auto tiles = (rows + tile_rows - 1) / tile_rows;
  return std::clamp<int64_t>(std::min(tiles, by_memory), 1, max_chunks);
}

// Threads worth using for `items` independent items of a Gram matrix of
// `rows` rows of `width`.
int team_for(int threads, int64_t items, int64_t rows, int64_t width) {
  auto team = matmul_team(threads, width, width / 2 + 1, rows);
  return static_cast<int>(
    std::min<int64_t>(team, std::max<int64_t>(items, 1)));
}

// Scales row r of the lower triangle of sum [width, width] and mirrors it
// into column r (so rows can be finished concurrently). Scaling in double
// rounds once, to the float nearest the scaled float sum: a bias corner of
// m ones times 1/m is exactly 1.
void finish_row(float* sum, int64_t width, double scale, int64_t r) {
  for (int64_t c = 0; c <= r; ++c) {
    auto v = static_cast<float>(double{sum[r * width + c]} * scale);
    sum[r * width + c] = v;
    sum[c * width + r] = v;
  }
}

// Sets out [width, width] to scale * Σ rows^T rows over `rows` rows
// that fill(first, count, dst) writes row-major into dst. fill runs
// concurrently on disjoint rows and must not throw.
template <class Fill>
void tiled_gram(int threads, int64_t rows, int64_t width, double scale,
                const Fill& fill, tensor& out) {
  auto tile_rows = tile_rows_for(width);
  auto chunks = chunks_for(rows, width, tile_rows);
  auto team = team_for(threads, chunks, rows, width);
  auto area = width * width;
  // Uninitialised: each chunk zeroes its own partial (first touch).
  std::unique_ptr<float[]> partials(new float[chunks * area]);
  std::vector<std::vector<float>> tiles(static_cast<size_t>(team));
  for (auto& tile : tiles)
    tile.resize(static_cast<size_t>(tile_rows * width));
  out.resize({width, width});
  float* sum = out.data();
  const auto& kernels = isa_table();
  eigen_team(team, [&](int thread, int) {
    float* buffer = tiles[static_cast<size_t>(thread)].data();
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      float* part = partials.get() + c * area;
      std::fill(part, part + area, 0.0f);
      auto span = split(rows, chunks, c);
      for (auto first = span.begin; first < span.end; first += tile_rows) {
        auto count = std::min(tile_rows, span.end - first);
        fill(first, count, buffer);
        kernels.gram_lower_update(buffer, count, width, width, part, width);
      }
    }
    // After the loop's barrier: add the partials in chunk order.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < width; ++r) {
      for (int64_t k = r * width; k <= r * width + r; ++k) {
        float s = partials[k];
        for (int64_t c = 1; c < chunks; ++c)
          s += partials[c * area + k];
        sum[k] = s;
      }
      finish_row(sum, width, scale, r);
    }
  });
}

struct gram_block {
  int64_t row;
  int64_t col;
  int64_t rows;
  int64_t cols;

  int64_t work() const {
    return row == col ? rows * (cols + 1) / 2 : rows * cols;
  }
};

// The blocks of the lower triangle, largest first so that dynamic
// scheduling ends with small items (longest-processing-time order).
std::vector<gram_block> lower_blocks(int64_t width) {
  std::vector<gram_block> result;
  for (int64_t c = 0; c < width; c += block_size)
    for (int64_t r = c; r < width; r += block_size)
      result.push_back({r, c, std::min(block_size, width - r),
                        std::min(block_size, width - c)});
  std::stable_sort(result.begin(), result.end(),
                   [](const gram_block& x, const gram_block& y) {
                     return x.work() > y.work();
                   });
  return result;
}

// Sets out [width, width], width = cols (+ 1 with a bias), to scale *
// Σ ā ā^T over the first `rows` rows a of x [*, cols], ā = [a, 1] with a
// bias.
void direct_gram(int threads, const float* x, int64_t rows, int64_t cols,
                 bool bias, double scale, tensor& out) {
  auto width = cols + (bias ? 1 : 0);
  auto blocks = lower_blocks(cols);
  auto items = static_cast<int64_t>(blocks.size()) + (bias ? 1 : 0);
  auto team = team_for(threads, items, rows, width);
  out.resize({width, width});
  float* sum = out.data();
  const auto& kernels = isa_table();
  eigen_team(team, [&](int, int) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i) {
      if (i == static_cast<int64_t>(blocks.size())) {
        // The bias row: column sums, and m ones in the corner.
        float* bias_row = sum + cols * width;
        std::fill(bias_row, bias_row + cols, 0.0f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            bias_row[c] += x[r * cols + c];
        bias_row[cols] = static_cast<float>(rows);
        continue;
      }
      const auto& b = blocks[static_cast<size_t>(i)];
      float* block = sum + b.row * width + b.col;
      if (b.row == b.col) {
        for (int64_t r = 0; r < b.rows; ++r)
          std::fill(block + r * width, block + r * width + b.cols, 0.0f);
        kernels.gram_lower_update(x + b.row, rows, b.rows, cols, block,
                                  width);
      } else {
        kernels.gram_cross(x + b.row, cols, x + b.col, cols, rows, b.rows,
                           b.cols, block, width);
      }
    }
    // After the loop's barrier every lower element is final.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < width; ++r)
      finish_row(out.data(), width, scale, r);
  });
}

// -- few rows: the sub-sampled statistics ------------------------------------
//
// With sub-sampling a factor has few rows (16 examples; 16 x 4 conv
// locations) and a wide output (785^2 for the ConvNet's dense layer): the
// Gram matrix is bound by writing its output, and the blocked SYRK above
// pays for partial sums, a reduction and a transposed mirror pass. Here
// every output row is computed whole, both triangles, by a register-blocked
// kernel that streams the rows once per block of output rows: no partials,
// no mirror, the scaling fused into the store. out[i][j] and out[j][i] are
// the same FMA chain over k = 0..m-1 (x_ki x_kj = x_kj x_ki exactly), so the
// result is exactly symmetric; blocks never depend on the thread count.
// The kernel is isa_kernels::few_rows_block.

// Sets out [width, width], width = cols (+ 1 with a bias), to scale *
// Σ ā ā^T over the m rows a of x [m, cols] (row stride ld), ā = [a, 1]
// with a bias; for few rows (see above).
void few_rows_gram(int threads, const float* x, int64_t m, int64_t ld,
                   int64_t cols, bool bias, double scale, tensor& out) {
  auto width = cols + (bias ? 1 : 0);
  out.resize({width, width});
  float* o = out.data();
  constexpr int64_t block_rows = few_rows_block_rows;
  auto blocks = (cols + block_rows - 1) / block_rows;
  // Output writes dominate: a second thread pays from ~64K elements on.
  auto team = width * width * std::max<int64_t>(m, 8) >= (int64_t{1} << 19)
                ? threads : 1;
  auto parts = std::min<int64_t>(team, blocks);
  const auto& kernels = isa_table();
  parallel_for(static_cast<int>(parts), parts, [&](int64_t part, int) {
    auto span = split(blocks, parts, part);
    for (auto b = span.begin; b < span.end; ++b) {
      auto i0 = b * block_rows;
      auto count = static_cast<int>(std::min(block_rows, cols - i0));
      kernels.few_rows_block(x, m, ld, cols, i0, count, scale, o, width);
    }
  });
  if (!bias)
    return;
  // The bias row and column: column sums in row order, then m ones.
  std::vector<float> sums(static_cast<size_t>(cols), 0.0f);
  for (int64_t k = 0; k < m; ++k)
    for (int64_t c = 0; c < cols; ++c)
      sums[static_cast<size_t>(c)] += x[k * ld + c];
  for (int64_t c = 0; c < cols; ++c) {
    auto v = static_cast<float>(double{sums[static_cast<size_t>(c)]} * scale);
    o[c * width + cols] = v;
    o[cols * width + c] = v;
  }
  o[cols * width + cols]
    = static_cast<float>(static_cast<double>(static_cast<float>(m)) * scale);
}

// Copies the selected rows of a row-major [*, cols] matrix (the
// gradients of the sampled locations of a conv layer).
struct gather_rows {
  const float* data;
  int64_t cols;
  const int64_t* rows;

  void operator()(int64_t first, int64_t count, float* dst) const {
    for (int64_t i = 0; i < count; ++i) {
      const float* src = data + rows[first + i] * cols;
      std::copy(src, src + cols, dst + i * cols);
    }
  }
};

// Writes the im2col patches (kh, kw, c order, zero padding) of the selected
// rows n * T + t, with a trailing 1 when `bias`.
struct extract_patches {
  const conv2d_geometry& g;
  const float* x;
  const int64_t* rows;
  bool bias;

  void patch(int64_t row, float* dst) const {
    auto T = g.locations();
    auto n = row / T;
    auto oh = (row % T) / g.out_w;
    auto ow = (row % T) % g.out_w;
    auto C = g.in_c;
    auto segment = g.k_w * C; // one kernel row, contiguous in NHWC
    auto iw0 = ow * g.stride_w - g.pad_left;
    // Kernel columns whose input column lies inside the image.
    auto kw_lo = std::clamp<int64_t>(-iw0, 0, g.k_w);
    auto kw_hi = std::clamp<int64_t>(g.in_w - iw0, kw_lo, g.k_w);
    const float* image = x + n * g.in_h * g.in_w * C;
    for (int64_t kh = 0; kh < g.k_h; ++kh) {
      float* out = dst + kh * segment;
      auto ih = oh * g.stride_h - g.pad_top + kh;
      if (ih < 0 || ih >= g.in_h) {
        std::fill(out, out + segment, 0.0f);
        continue;
      }
      std::fill(out, out + kw_lo * C, 0.0f);
      const float* src = image + (ih * g.in_w + iw0 + kw_lo) * C;
      std::copy(src, src + (kw_hi - kw_lo) * C, out + kw_lo * C);
      std::fill(out + kw_hi * C, out + segment, 0.0f);
    }
    if (bias)
      dst[g.k_h * segment] = 1.0f;
  }

  void operator()(int64_t first, int64_t count, float* dst) const {
    auto width = g.patch_size() + (bias ? 1 : 0);
    for (int64_t i = 0; i < count; ++i)
      patch(rows[first + i], dst + i * width);
  }
};

// The first m rows of input [*, in] with a 1 appended when `bias`.
tensor dense_rows(const tensor& input, int64_t m, bool bias) {
  auto in = input.dim(1);
  auto width = in + (bias ? 1 : 0);
  tensor out({m, width});
  for (int64_t r = 0; r < m; ++r) {
    const float* src = input.data() + r * in;
    std::copy(src, src + in, out.data() + r * width);
    if (bias)
      out[r * width + in] = 1.0f;
  }
  return out;
}

// A_rows / G_rows null: both factors as matrices (dense_factors).
caf::error dense_impl(const tensor& input, const tensor& ds, bool with_bias,
                      const factor_sampling& s, int threads, tensor& A,
                      tensor& G, gram_rows* A_rows, gram_rows* G_rows) {
  const char* op = "dense_factors";
  if (auto err = check_dense_factors(op, input, ds, s, threads))
    return err;
  auto batch = input.dim(0);
  auto in = input.dim(1);
  auto out = ds.dim(1);
  // The sampled examples are the first m rows: no copy needed.
  auto m = sampled_row_count(s, batch, 1);
  auto inv_m = 1.0 / static_cast<double>(m);
  auto n = static_cast<double>(batch);
  if (A_rows != nullptr && m < in + (with_bias ? 1 : 0)) {
    *A_rows = gram_rows{dense_rows(input, m, with_bias), inv_m};
    A = tensor{};
  } else {
    if (A_rows != nullptr)
      *A_rows = gram_rows{};
    if (m <= few_factor_rows)
      few_rows_gram(threads, input.data(), m, in, in, with_bias, inv_m, A);
    else
      direct_gram(threads, input.data(), m, in, with_bias, inv_m, A);
  }
  // G = (1/m) Σ (N ds)(N ds)^T.
  if (G_rows != nullptr && m < out) {
    *G_rows = gram_rows{dense_rows(ds, m, false), n * n * inv_m};
    G = tensor{};
  } else {
    if (G_rows != nullptr)
      *G_rows = gram_rows{};
    if (m <= few_factor_rows)
      few_rows_gram(threads, ds.data(), m, out, out, false, n * n * inv_m, G);
    else
      direct_gram(threads, ds.data(), m, out, false, n * n * inv_m, G);
  }
  return caf::none;
}

// A_rows / G_rows null: both factors as matrices (conv_factors).
caf::error conv_impl(const conv2d_geometry& g, const tensor& x,
                     const tensor& ds, bool with_bias,
                     const factor_sampling& s, int threads, tensor& A,
                     tensor& G, gram_rows* A_rows, gram_rows* G_rows) {
  const char* op = "conv_factors";
  if (auto err = check_conv_factors(op, g, x, ds, s, threads))
    return err;
  auto rows = sampled_rows(s, g.batch, g.locations());
  auto m = static_cast<int64_t>(rows.size());
  auto inv_m = 1.0 / static_cast<double>(m);
  auto n = static_cast<double>(g.batch);
  auto P = g.patch_size();
  auto width = P + (with_bias ? 1 : 0);
  if (A_rows != nullptr && m < width) {
    tensor patches({m, width});
    extract_patches{g, x.data(), rows.data(), with_bias}(0, m,
                                                         patches.data());
    *A_rows = gram_rows{std::move(patches), inv_m};
    A = tensor{};
  } else {
    if (A_rows != nullptr)
      *A_rows = gram_rows{};
    if (m <= few_factor_rows) {
      // Gather the rows (patches without the bias 1, which few_rows_gram
      // adds), then one pass.
      std::vector<float> patches(static_cast<size_t>(m * P));
      extract_patches{g, x.data(), rows.data(), false}(0, m, patches.data());
      few_rows_gram(threads, patches.data(), m, P, P, with_bias, inv_m, A);
    } else {
      tiled_gram(threads, m, width, inv_m,
                 extract_patches{g, x.data(), rows.data(), with_bias}, A);
    }
  }
  // G = (1/m) Σ (N ds)(N ds)^T over the same (n, t).
  if (G_rows != nullptr && m < g.out_c) {
    tensor grads({m, g.out_c});
    gather_rows{ds.data(), g.out_c, rows.data()}(0, m, grads.data());
    *G_rows = gram_rows{std::move(grads), n * n * inv_m};
    G = tensor{};
  } else {
    if (G_rows != nullptr)
      *G_rows = gram_rows{};
    if (m <= few_factor_rows) {
      std::vector<float> grads(static_cast<size_t>(m * g.out_c));
      gather_rows{ds.data(), g.out_c, rows.data()}(0, m, grads.data());
      few_rows_gram(threads, grads.data(), m, g.out_c, g.out_c, false,
                    n * n * inv_m, G);
    } else {
      tiled_gram(threads, m, g.out_c, n * n * inv_m,
                 gather_rows{ds.data(), g.out_c, rows.data()}, G);
    }
  }
  return caf::none;
}

} // namespace

int64_t sampled_row_count(const factor_sampling& s, int64_t batch,
                          int64_t locations) {
  auto examples = s.max_examples > 0 ? std::min(batch, s.max_examples)
                                     : batch;
  auto per = s.max_locations > 0 ? std::min(locations, s.max_locations)
                                  : locations;
  return examples * per;
}

std::vector<int64_t> sampled_rows(const factor_sampling& s, int64_t batch,
                                  int64_t locations) {
  auto examples = s.max_examples > 0 ? std::min(batch, s.max_examples)
                                     : batch;
  auto per = s.max_locations > 0 ? std::min(locations, s.max_locations)
                                  : locations;
  std::vector<int64_t> result;
  result.reserve(static_cast<size_t>(sampled_row_count(s, batch,
                                                       locations)));
  if (per == locations) {
    for (int64_t r = 0; r < examples * locations; ++r)
      result.push_back(r);
    return result;
  }
  // Partial Fisher-Yates: position i takes one of the remaining ones. The
  // modulo's bias is below 2^-32 for any realistic T.
  std::mt19937_64 gen(s.seed);
  std::vector<int64_t> order(static_cast<size_t>(locations));
  for (int64_t n = 0; n < examples; ++n) {
    std::iota(order.begin(), order.end(), int64_t{0});
    for (int64_t i = 0; i < per; ++i) {
      auto left = static_cast<uint64_t>(locations - i);
      auto j = i + static_cast<int64_t>(gen() % left);
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
    // Ascending positions read the input in memory order.
    std::sort(order.begin(), order.begin() + per);
    for (int64_t i = 0; i < per; ++i)
      result.push_back(n * locations + order[static_cast<size_t>(i)]);
  }
  return result;
}

caf::error dense_factors(const tensor& input, const tensor& ds,
                         bool with_bias, const factor_sampling& s,
                         int threads, tensor& A, tensor& G) {
  return dense_impl(input, ds, with_bias, s, threads, A, G, nullptr,
                    nullptr);
}

caf::error dense_factors(const tensor& input, const tensor& ds,
                         bool with_bias, const factor_sampling& s,
                         int threads, tensor& A, tensor& G, gram_rows& A_rows,
                         gram_rows& G_rows) {
  return dense_impl(input, ds, with_bias, s, threads, A, G, &A_rows,
                    &G_rows);
}

caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                        const tensor& ds, bool with_bias,
                        const factor_sampling& s, int threads, tensor& A,
                        tensor& G) {
  return conv_impl(g, x, ds, with_bias, s, threads, A, G, nullptr, nullptr);
}

caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                        const tensor& ds, bool with_bias,
                        const factor_sampling& s, int threads, tensor& A,
                        tensor& G, gram_rows& A_rows, gram_rows& G_rows) {
  return conv_impl(g, x, ds, with_bias, s, threads, A, G, &A_rows, &G_rows);
}

caf::error fold_rows(tensor& raw, double beta,
                     const std::vector<gram_rows>& rows,
                     const std::vector<double>& weights) {
  const char* op = "fold_rows";
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_argument, std::string{op} + ": " + what);
  };
  if (rows.size() != weights.size())
    return bad(std::to_string(rows.size()) + " blocks of rows but "
               + std::to_string(weights.size()) + " weights");
  if (!(std::isfinite(beta) && beta >= 0.0))
    return bad("beta must be finite and >= 0, got " + std::to_string(beta));
  if (!raw.empty() && (raw.rank() != 2 || raw.dim(0) != raw.dim(1)))
    return bad("the matrix must be square, got " + raw.shape_string());
  int64_t width = raw.empty() ? -1 : raw.dim(1);
  int64_t total = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    const auto& x = rows[b].x;
    if (x.rank() != 2 || (width >= 0 && x.dim(1) != width))
      return mismatch(op, "rows", x.shape(), "matrix",
                      width >= 0 ? tensor_shape{width, width} : raw.shape(),
                      "block " + std::to_string(b));
    width = x.dim(1);
    auto f = weights[b] * rows[b].scale;
    if (!(std::isfinite(f) && weights[b] >= 0.0 && rows[b].scale >= 0.0))
      return bad("block " + std::to_string(b) + ": weight "
                 + std::to_string(weights[b]) + " and scale "
                 + std::to_string(rows[b].scale)
                 + " must be finite and >= 0");
    total += x.dim(0);
  }
  if (width < 0)
    return caf::none; // nothing to scale, nothing to add
  if (raw.empty())
    raw = tensor({width, width});
  // All blocks in one rank-k update: each scaled by the square root of its
  // weight (in double, rounded once), so that the rows' outer products
  // carry weight · scale.
  std::vector<float> y(static_cast<size_t>(total * width));
  float* dst = y.data();
  for (size_t b = 0; b < rows.size(); ++b) {
    auto f = std::sqrt(weights[b] * rows[b].scale);
    for (auto v : rows[b].x.values())
      *dst++ = static_cast<float>(double{v} * f);
  }
  float* sum = raw.data();
  auto b = static_cast<float>(beta);
  if (b != 1.0f)
    for (int64_t r = 0; r < width; ++r)
      for (int64_t c = 0; c <= r; ++c)
        sum[r * width + c] *= b;
  if (total > 0)
    isa_table().gram_lower_update(y.data(), total, width, width, sum, width);
  // The mirror by square tiles: element by element, the writes down a
  // column of the row-major matrix miss the cache at every row (785 wide).
  constexpr int64_t tile = 32;
  for (int64_t r0 = 0; r0 < width; r0 += tile)
    for (int64_t c0 = 0; c0 <= r0; c0 += tile) {
      auto r1 = std::min(r0 + tile, width);
      auto c1 = std::min(c0 + tile, width);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = std::max(r0, c + 1); r < r1; ++r)
          sum[c * width + r] = sum[r * width + c];
    }
  return caf::none;
}

caf::error ema_update(tensor& raw, float& weight, const tensor& stat,
                      float decay) {
  const char* op = "ema_update";
  if (!(decay >= 0.0f && decay < 1.0f))
    return make_error(ec::invalid_argument,
                      std::string{op} + ": decay must lie in [0, 1), got "
                        + std::to_string(decay));
  if (!(weight >= 0.0f && weight <= 1.0f))
    return make_error(ec::invalid_argument,
                      std::string{op} + ": weight must lie in [0, 1], got "
                        + std::to_string(weight));
  if (raw.empty() && weight != 0.0f)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": weight " + std::to_string(weight)
                        + " without an average to go with it");
  if (!raw.empty())
    if (auto err = expect_shape(op, "statistic", stat.shape(), "average",
                                raw.shape()))
      return err;
  if (!stat.all_finite())
    return make_error(ec::non_finite,
                      std::string{op} + ": statistic " + stat.shape_string()
                        + " holds NaN or Inf");
  if (raw.empty())
    raw = tensor(stat.shape());
  auto rest = 1.0f - decay;
  float* r = raw.data();
  const float* x = stat.data();
  for (int64_t i = 0; i < raw.size(); ++i)
    r[i] = decay * r[i] + rest * x[i];
  weight = decay * weight + rest;
  return caf::none;
}

caf::error ema_value(const tensor& raw, float weight, tensor& out) {
  const char* op = "ema_value";
  if (weight == 0.0f)
    return make_error(ec::invalid_argument,
                      std::string{op}
                        + ": no covariance update yet (weight 0)");
  if (!(weight > 0.0f && weight <= 1.0f))
    return make_error(ec::invalid_argument,
                      std::string{op} + ": weight must lie in (0, 1], got "
                        + std::to_string(weight));
  out.resize(raw.shape());
  for (int64_t i = 0; i < raw.size(); ++i)
    out[i] = raw[i] / weight;
  return caf::none;
}

} // namespace syncfac::cpu
