// The Winograd micro-kernel (winograd_kernels.hpp), compiled once per
// instruction-set level into the namespace SYNCFAC_KERNEL_ISA
// (kernels/cpu/isa_kernels.hpp): the vector width and the GEMM's register
// blocking follow the level's simd.hpp.
#include "kernels/cpu/isa_kernels.hpp"

#include <algorithm>

#include "kernels/cpu/simd.hpp"
#include "kernels/cpu/winograd_transforms.hpp"

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

using simd::lanes;
using simd::vf;

constexpr int64_t cb = winograd_channel_block;
// Vectors per channel block: 1 zmm or 2 ymm.
constexpr int vectors = static_cast<int>(cb) / simd::width;
// GEMM rows (tiles) per register block: 12 accumulators at AVX2 (6 rows x
// 2 ymm) + 2 operands + 1 broadcast of the 16 ymm; at AVX-512 12 rows x 1
// zmm, 12 chains to cover the FMA latency on two ports.
constexpr int gemm_rows = 12 / vectors;

// The transformed tile's size of both variants (winograd_transforms.hpp).
constexpr int Alpha = winograd::alpha;

// A^T of the variant with output tile M as a compile-time table: F(4x4,
// 3x3) or F(2x2, 5x5).
template <int M>
struct transforms;

template <>
struct transforms<4> {
  static constexpr const auto& at = winograd::at4_3;
};

template <>
struct transforms<2> {
  static constexpr const auto& at = winograd::at2_5;
};

// y[i * ys] = sum_j coef(i, j) x[j * xs], i < Out, j < In, for constant
// coefficients: the loops unroll, so zero terms vanish and +-1 become an
// add or a subtraction.
template <int Out, int In, class Coef>
inline __attribute__((always_inline)) void
linear_map(Coef coef, const vf* x, int xs, vf* y, int ys) {
#pragma GCC unroll 8
  for (int i = 0; i < Out; ++i) {
    vf acc = simd::zero();
    bool first = true;
#pragma GCC unroll 8
    for (int j = 0; j < In; ++j) {
      float c = coef(i, j);
      vf v = x[j * xs];
      if (c == 0.0f)
        continue;
      if (first) {
        acc = c == 1.0f ? v : simd::fma(simd::broadcast(c), v, simd::zero());
        first = false;
      } else if (c == 1.0f) {
        acc = simd::add(acc, v);
      } else if (c == -1.0f) {
        acc = simd::sub(acc, v);
      } else {
        acc = simd::fma(simd::broadcast(c), v, acc);
      }
    }
    y[i * ys] = acc;
  }
}

// y = mat x.
template <int Rows, int Cols>
inline __attribute__((always_inline)) void
apply(const float (&mat)[Rows][Cols], const vf* x, int xs, vf* y, int ys) {
  linear_map<Rows, Cols>([&](int i, int j) { return mat[i][j]; }, x, xs, y,
                         ys);
}

// y = mat^T x (A's rows from A^T's table).
template <int Rows, int Cols>
inline __attribute__((always_inline)) void
apply_transposed(const float (&mat)[Rows][Cols], const vf* x, int xs, vf* y,
                 int ys) {
  linear_map<Cols, Rows>([&](int i, int j) { return mat[j][i]; }, x, xs, y,
                         ys);
}

// y = B^T x for one column (or row) of a window, factored by hand: 12
// operations for its 20 non-zero entries, and a constant x gives exact
// zeros in every row but the second (-6 x, one rounding), so that, as with
// the direct conv, the outputs of a window of equal values are equal (the
// output transform adds exact zeros).
inline __attribute__((always_inline)) void input_rows(const vf* x, int xs,
                                                      vf* y, int ys) {
  const vf x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs],
           x4 = x[4 * xs], x5 = x[5 * xs];
  const vf four = simd::broadcast(4.0f), five = simd::broadcast(-5.0f);
  const vf s12 = simd::add(x1, x2), s34 = simd::add(x3, x4);
  const vf d12 = simd::sub(x1, x2), d43 = simd::sub(x4, x3);
  const vf d31 = simd::sub(x3, x1), d42 = simd::sub(x4, x2);
  y[0] = simd::fma(four, x0, simd::fma(five, x2, x4));
  y[ys] = simd::fma(simd::broadcast(-4.0f), s12, s34);
  y[2 * ys] = simd::fma(four, d12, d43);
  y[3 * ys] = simd::fma(simd::broadcast(2.0f), d31, d42);
  y[4 * ys] = simd::fma(simd::broadcast(-2.0f), d31, d42);
  y[5 * ys] = simd::fma(four, x1, simd::fma(five, x3, x5));
}

// One vector's ring in input_transform: B^T d of the last alpha window
// columns; ring[slot * Alpha + i] is row i of the column in `slot`.
using ring_column = vf[Alpha * Alpha];

// One tile's V rows for N vectors of channels (x: the window's first
// value of the first vector, its columns `pixel` floats apart and its
// rows `row_stride`; ring[k] the ring of vector k), the last vector's
// loads masked to `last` where `tail`. A whole channel block goes
// through each column and row at once (N = vectors), so the addresses,
// the ring's slots and the loop steps are worked out once for its
// vectors (at AVX2 two ymm make a block); each vector's arithmetic is
// the same whatever N.
template <int N>
inline __attribute__((always_inline)) void
input_vectors(const float* x, int64_t pixel, int64_t row_stride, int fresh,
              const int (&slot)[Alpha], ring_column* ring, float* dst,
              int64_t plane, bool tail, lanes last) {
  for (int j = fresh; j < Alpha; ++j) { // B^T d of the new columns
    vf column[N][Alpha];
#pragma GCC unroll 8
    for (int i = 0; i < Alpha; ++i)
#pragma GCC unroll 4
      for (int k = 0; k < N; ++k) {
        const float* src = x + i * row_stride + j * pixel + k * simd::width;
        column[k][i] = tail && k == N - 1 ? simd::load(src, last)
                                          : simd::load(src);
      }
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k)
      input_rows(column[k], 1, ring[k] + slot[j] * Alpha, 1);
  }
#pragma GCC unroll 8
  for (int i = 0; i < Alpha; ++i) { // (B^T d) B, row by row
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      vf row[Alpha];
#pragma GCC unroll 8
      for (int j = 0; j < Alpha; ++j)
        row[j] = ring[k][slot[j] * Alpha + i];
      vf out[Alpha];
      input_rows(row, 1, out, 1);
#pragma GCC unroll 8
      for (int j = 0; j < Alpha; ++j)
        simd::store(dst + (i * Alpha + j) * plane + k * simd::width, out[j]);
    }
  }
}

// V's tile rows for tiles [first, first + count): B^T d B of each tile's
// alpha x alpha window, per channel block; lanes past c are zero.
//
// B^T d is taken column by column, and a tile's right neighbour shares
// alpha - M of its window's columns: those columns' B^T d is kept (a ring
// of alpha columns, slot = the column's x mod alpha, distinct for any
// alpha consecutive columns) and only the M new ones are computed, a
// third (F(4x4)) or two thirds (F(2x2)) less of the first stage's work
// for tiles inside a row. Each output's
// arithmetic is unchanged (the same column transforms, in the same
// order), so V does not depend on where a block starts.
template <int M>
void input_transform(const winograd_layout& l, int64_t first, int64_t count,
                     float* v) {
  const auto blocks = l.cpad / cb;
  const auto plane = blocks * count * cb; // one transform point's floats
  for (int64_t b = 0; b < blocks; ++b) {
    ring_column ring[vectors];
    auto img = first / (l.tiles_h * l.tiles_w);
    auto ty = first / l.tiles_w % l.tiles_h;
    auto tx = first % l.tiles_w;
    bool neighbour = false; // this tile is the last one's right neighbour
    for (int64_t t = 0; t < count; ++t) {
      const float* window
        = l.in + ((img * l.ph + M * ty) * l.pw + M * tx) * l.c;
      // Columns M tx .. M tx + alpha - 1; a neighbour computes the last M.
      const int fresh = neighbour ? Alpha - M : 0;
      int slot[Alpha]; // window column j's place in the ring
      for (int j = 0; j < Alpha; ++j)
        slot[j] = static_cast<int>((M * tx + j) % Alpha);
      float* dst = v + (b * count + t) * cb;
      if ((b + 1) * cb <= l.c) { // every lane a channel: the block at once
        input_vectors<vectors>(window + b * cb, l.c, l.pw * l.c, fresh,
                               slot, ring, dst, plane, false,
                               simd::first_lanes(simd::width));
      } else { // padding lanes (zero in V) or a short last vector
        for (int k = 0; k < vectors; ++k) {
          auto c0 = b * cb + k * simd::width;
          float* dk = dst + k * simd::width;
          if (c0 >= l.c) {
            for (int p = 0; p < Alpha * Alpha; ++p)
              simd::store(dk + p * plane, simd::zero());
            continue;
          }
          input_vectors<1>(window + c0, l.c, l.pw * l.c, fresh, slot,
                           ring + k, dk, plane, c0 + simd::width > l.c,
                           simd::first_lanes(static_cast<int>(l.c - c0)));
        }
      }
      // The next tile: right, or the next row's or image's first.
      neighbour = ++tx < l.tiles_w;
      if (!neighbour) {
        tx = 0;
        if (++ty == l.tiles_h) {
          ty = 0;
          ++img;
        }
      }
    }
  }
}

// acc[i] += x[i * xs] w for R rows and w one row of 16 channels: the step
// of both GEMMs below (one broadcast per row, the row's vectors reused).
// Start: acc[i] = x[i * xs] w instead, rounded as fma(x, w, 0) is.
template <int R, bool Start = false>
inline __attribute__((always_inline)) void
rank1_update(vf (&acc)[R][vectors], const float* x, int64_t xs,
             const float* w_row) {
  vf w[vectors];
#pragma GCC unroll 4
  for (int k = 0; k < vectors; ++k)
    w[k] = simd::load(w_row + k * simd::width);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    auto xi = simd::broadcast(x + i * xs);
#pragma GCC unroll 4
    for (int k = 0; k < vectors; ++k)
      acc[i][k] = simd::fma(xi, w[k], Start ? simd::zero() : acc[i][k]);
  }
}

// The R rows of 16 channels of acc to out, rows ld apart.
template <int R>
inline __attribute__((always_inline)) void
store_rows(const vf (&acc)[R][vectors], float* out, int64_t ld) {
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int k = 0; k < vectors; ++k)
      simd::store(out + i * ld + k * simd::width, acc[i][k]);
}

// m[p, t, o] = sum_c v[p, c / 16, t, c % 16] u[p, c, o] for R tiles
// from t0 and the 16 outputs of block ob: the sum over c in order, the
// same for every R.
template <int R>
void gemm_tile(const float* a, int64_t a_block_stride, int64_t blocks,
               const float* u, int64_t opad, float* m) {
  // The first channel's products start the sums (x * w rounds as
  // fma(x, w, 0) does): no zeroed accumulators, which GCC 12 kept on the
  // stack and cleared with rep stos on every call.
  vf acc[R][vectors];
  rank1_update<R, true>(acc, a, cb, u);
  for (int64_t b = 0; b < blocks; ++b, a += a_block_stride) {
    const float* ub = u + b * cb * opad;
#pragma GCC unroll 16
    for (int j = b == 0 ? 1 : 0; j < cb; ++j)
      rank1_update<R>(acc, a + j, cb, ub + j * opad);
  }
  store_rows<R>(acc, m, opad);
}

// The block's last, shorter register tile: the largest instance that fits.
template <int R = gemm_rows>
void gemm_rest(int rows, const float* a, int64_t stride, int64_t blocks,
               const float* u, int64_t opad, float* m) {
  if constexpr (R > 1) {
    if (rows < R)
      return gemm_rest<R - 1>(rows, a, stride, blocks, u, opad, m);
  }
  gemm_tile<R>(a, stride, blocks, u, opad, m);
}

void multiply(const winograd_layout& l, int64_t count, const float* v,
              float* m) {
  const auto blocks = l.cpad / cb;
  const auto plane = blocks * count * cb;
  for (int p = 0; p < Alpha * Alpha; ++p) {
    const float* vp = v + p * plane;
    const float* up = l.u + p * l.cpad * l.opad;
    float* mp = m + p * count * l.opad;
    for (int64_t o = 0; o < l.opad; o += cb) {
      int64_t t = 0;
      for (; t + gemm_rows <= count; t += gemm_rows)
        gemm_tile<gemm_rows>(vp + t * cb, count * cb, blocks, up + o,
                             l.opad, mp + t * l.opad + o);
      if (t < count)
        gemm_rest(static_cast<int>(count - t), vp + t * cb, count * cb,
                  blocks, up + o, l.opad, mp + t * l.opad + o);
    }
  }
}

// A tile's M x M block of outputs: where its first output lies in an
// [n, out_h, out_w, out_c] tensor, and its rows and columns inside the
// image (fewer than M where the last tile reaches past it).
struct output_block {
  int64_t offset;
  int rows;
  int cols;
};

template <int M>
output_block output_block_of(const winograd_layout& l, int64_t tile) {
  const auto per_image = l.tiles_h * l.tiles_w;
  auto img = tile / per_image;
  auto oy = M * (tile % per_image / l.tiles_w);
  auto ox = M * (tile % l.tiles_w);
  return {((img * l.out_h + oy) * l.out_w + ox) * l.out_c,
          static_cast<int>(std::min<int64_t>(M, l.out_h - oy)),
          static_cast<int>(std::min<int64_t>(M, l.out_w - ox))};
}

// y = A^T x for one column (or row) of M's alpha products. F(4, 3)
// factored by hand (10 operations for its 18 non-zero entries, where
// apply takes 14); the others through apply.
template <int M>
inline __attribute__((always_inline)) void output_rows(const vf* x, int xs,
                                                       vf* y, int ys) {
  if constexpr (M == 4) {
    const vf s12 = simd::add(x[xs], x[2 * xs]);
    const vf d12 = simd::sub(x[xs], x[2 * xs]);
    const vf s34 = simd::add(x[3 * xs], x[4 * xs]);
    const vf d34 = simd::sub(x[3 * xs], x[4 * xs]);
    y[0] = simd::add(simd::add(x[0], s12), s34);
    y[ys] = simd::fma(simd::broadcast(2.0f), d34, d12);
    y[2 * ys] = simd::fma(simd::broadcast(4.0f), s34, s12);
    y[3 * ys] = simd::add(simd::fma(simd::broadcast(8.0f), d34, d12),
                          x[5 * xs]);
  } else {
    apply(transforms<M>::at, x, xs, y, ys);
  }
}

// out = act(A^T m A + bias) for each tile's M x M outputs inside the
// image.
template <int M>
void output_transform(const winograd_layout& l, int64_t first,
                      int64_t count, const float* m) {
  const auto plane = count * l.opad;
  const auto zero = simd::zero();
  for (int64_t t = 0; t < count; ++t) {
    auto [offset, rows, cols] = output_block_of<M>(l, first + t);
    float* dst = l.out + offset;
    for (int64_t o = 0; o < l.out_c; o += simd::width) {
      bool tail = o + simd::width > l.out_c;
      lanes last = simd::first_lanes(static_cast<int>(l.out_c - o));
      // m's columns loaded as they are transformed (as the input
      // transform does): only A^T m's M x alpha vectors wait.
      const float* src = m + t * l.opad + o;
      vf half[M * Alpha];
      vf y[M * M];
      for (int j = 0; j < Alpha; ++j) { // A^T m, column by column
        vf column[Alpha];
        for (int i = 0; i < Alpha; ++i)
          column[i] = simd::load(src + (i * Alpha + j) * plane);
        output_rows<M>(column, 1, half + j, Alpha);
      }
      for (int i = 0; i < M; ++i) // (A^T m) A, row by row
        output_rows<M>(half + i * Alpha, 1, y + i * M, 1);
      auto bias = simd::load(l.bias + o);
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          auto r = simd::add(y[i * M + j], bias);
          if (l.relu)
            r = simd::max(zero, r);
          float* d = dst + (i * l.out_w + j) * l.out_c + o;
          if (tail)
            simd::store(d, r, last);
          else
            simd::store(d, r);
        }
    }
  }
}

template <int M>
void tiles(const winograd_layout& l, int64_t first, int64_t count,
           float* scratch) {
  float* v = scratch;
  float* m = scratch + int64_t{Alpha} * Alpha * count * l.cpad;
  input_transform<M>(l, first, count, v);
  multiply(l, count, v, m);
  output_transform<M>(l, first, count, m);
}

// One tile's Z columns for N vectors of channels from src's first (a
// whole channel block at once, as input_vectors), the last vector's loads
// masked to `last` where `tail`; positions outside rows x cols read as
// zero.
template <int M, int N>
inline __attribute__((always_inline)) void
ds_vectors(const winograd_layout& l, const float* src, float* z,
           int64_t plane, int rows, int cols, bool tail, lanes last) {
  using tr = transforms<M>;
  vf d[N][M * M];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j) {
      const float* p = src + (i * l.out_w + j) * l.out_c;
      bool inside = i < rows && j < cols;
#pragma GCC unroll 4
      for (int k = 0; k < N; ++k)
        d[k][i * M + j] = !inside ? simd::zero()
                          : tail && k == N - 1
                            ? simd::load(p + k * simd::width, last)
                            : simd::load(p + k * simd::width);
    }
  // (ds A^T) row by row, then A (ds A^T) column by column.
#pragma GCC unroll 4
  for (int k = 0; k < N; ++k) {
    vf half[M * Alpha];
    for (int i = 0; i < M; ++i)
      apply_transposed(tr::at, d[k] + i * M, 1, half + i * Alpha, 1);
    for (int q = 0; q < Alpha; ++q) {
      vf column[Alpha];
      apply_transposed(tr::at, half + q, Alpha, column, 1);
      for (int p = 0; p < Alpha; ++p)
        simd::store(z + (p * Alpha + q) * plane + k * simd::width,
                    column[p]);
    }
  }
}

// Z = A ds A^T of each tile's M x M block of ds, [alpha^2, count, opad]:
// zero where the block leaves the image and past out_c, so that outputs
// the forward pass does not write get no gradient. Whole channel blocks
// a block at a time, the rest a vector at a time.
template <int M>
void ds_transform(const winograd_layout& l, const float* ds, int64_t first,
                  int64_t count, float* z) {
  const auto plane = count * l.opad;
  const auto whole = l.out_c / cb * cb; // channels in whole blocks
  for (int64_t t = 0; t < count; ++t) {
    auto [offset, rows, cols] = output_block_of<M>(l, first + t);
    const float* src = ds + offset;
    float* zt = z + t * l.opad;
    for (int64_t o = 0; o < whole; o += cb)
      ds_vectors<M, vectors>(l, src + o, zt + o, plane, rows, cols, false,
                             simd::first_lanes(simd::width));
    for (int64_t o = whole; o < l.opad; o += simd::width) {
      if (o >= l.out_c) { // padding lanes of the last block
        for (int p = 0; p < Alpha * Alpha; ++p)
          simd::store(zt + p * plane + o, simd::zero());
        continue;
      }
      bool tail = o + simd::width > l.out_c;
      lanes last = simd::first_lanes(static_cast<int>(l.out_c - o));
      ds_vectors<M, 1>(l, src + o, zt + o, plane, rows, cols, tail, last);
    }
  }
}

// du[c0 + i, o0 .. o0 + 16) += sum_t v[t, i] z[t, o0 ..] for R channels i
// of one block (v: [count, 16], z: [count, opad] from o0), the tiles in
// order: dU's rows as accumulators, one broadcast of V per row and tile.
// Start: = instead of +=, the first tile's products starting the sums
// (rounded as fma(v, z, 0) rounds them, so the bits are those of += on a
// zeroed du) and du never read.
template <int R, bool Start>
void dw_gemm_tile(const float* v, const float* z, int64_t count,
                  int64_t opad, float* du) {
  vf acc[R][vectors];
  if constexpr (Start) {
    rank1_update<R, true>(acc, v, 1, z);
    v += cb;
    z += opad;
    --count;
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int k = 0; k < vectors; ++k)
        acc[i][k] = simd::load(du + i * opad + k * simd::width);
  }
  for (int64_t t = 0; t < count; ++t, v += cb, z += opad)
    rank1_update<R>(acc, v, 1, z);
  store_rows<R>(acc, du, opad);
}

// Channels of a block per dw_gemm_tile call: 16 rows x 1 zmm at AVX-512,
// 6 rows x 2 ymm at AVX2 (12 accumulators, 2 operands and a broadcast of
// the 16 ymm; the block's last call takes the 4 rows left).
constexpr int dw_rows = vectors == 1 ? 16 : 6;

template <bool Start, int R = dw_rows>
void dw_gemm_rest(int rows, const float* v, const float* z, int64_t count,
                  int64_t opad, float* du) {
  if constexpr (R > 1) {
    if (rows < R)
      return dw_gemm_rest<Start, R - 1>(rows, v, z, count, opad, du);
  }
  dw_gemm_tile<R, Start>(v, z, count, opad, du);
}

// du (+)= V^T Z over the block's count (>= 1) tiles; Start: =, every
// element of du written.
template <bool Start>
void dw_accumulate(const winograd_layout& l, int64_t count, const float* v,
                   const float* z, float* du) {
  const auto blocks = l.cpad / cb;
  const auto v_plane = blocks * count * cb;
  const auto z_plane = count * l.opad;
  for (int p = 0; p < Alpha * Alpha; ++p) {
    float* dup = du + p * l.cpad * l.opad;
    for (int64_t b = 0; b < blocks; ++b) {
      const float* vb = v + p * v_plane + b * count * cb;
      for (int64_t o = 0; o < l.opad; o += cb)
        for (int i = 0; i < cb; i += dw_rows)
          dw_gemm_rest<Start>(
            static_cast<int>(std::min<int64_t>(dw_rows, cb - i)), vb + i,
            z + p * z_plane + o, count, l.opad, dup + (b * cb + i) * l.opad + o);
    }
  }
}

template <int M>
void dw_tiles(const winograd_layout& l, const float* ds, int64_t first,
              int64_t count, float* du, bool overwrite, float* scratch) {
  float* v = scratch;
  float* z = scratch + int64_t{Alpha} * Alpha * count * l.cpad;
  input_transform<M>(l, first, count, v);
  ds_transform<M>(l, ds, first, count, z);
  if (overwrite)
    dw_accumulate<true>(l, count, v, z, du);
  else
    dw_accumulate<false>(l, count, v, z, du);
}

} // namespace

void conv_winograd_dw_tiles(const winograd_layout& l, const float* ds,
                            int64_t first, int64_t count, float* du,
                            bool overwrite, float* scratch) {
  if (count <= 0)
    return;
  if (l.m == 4)
    dw_tiles<4>(l, ds, first, count, du, overwrite, scratch);
  else
    dw_tiles<2>(l, ds, first, count, du, overwrite, scratch);
}

void conv_winograd_tiles(const winograd_layout& l, int64_t first,
                         int64_t count, float* scratch) {
  if (l.m == 4)
    tiles<4>(l, first, count, scratch);
  else
    tiles<2>(l, first, count, scratch);
}

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
