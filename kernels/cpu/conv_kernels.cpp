// The conv micro-kernels, compiled once per instruction-set level into the
// namespace SYNCFAC_KERNEL_ISA (kernels/cpu/isa_kernels.hpp): the vector
// width and the register blocking follow the level's simd.hpp.
#include "kernels/cpu/isa_kernels.hpp"

#include <algorithm>

#include "kernels/cpu/simd.hpp"

// Register blocking: R rows x V vectors of accumulators, V <= 2. With 16
// ymm registers (AVX2) R <= 6: at most 12 accumulators + 2 operands + 1
// broadcast = 15 registers, two FMAs per broadcast and ~1.5 loads per FMA
// pair. With 32 zmm registers (AVX-512) R <= 8 at V = 2 (16 accumulators)
// and R <= 12 at V = 1 (out_c <= 16, the ConvNet's layers): 12 chains
// cover the FMA latency on two ports with margin where 8 would just fit.

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

#ifdef SYNCFAC_SIMD_AVX512
constexpr int rows_for(int vectors) {
  return vectors == 1 ? 12 : 8;
}
#else
constexpr int rows_for(int) {
  return 6;
}
#endif

// Rows per tile when every column block of out_c has at most as many
// vectors as a one-vector block where out_c fits in one.
constexpr int rows_for_columns(int64_t out_c) {
  return rows_for(out_c <= simd::width ? 1 : 2);
}
constexpr int block_width = 2 * simd::width;

// Part i of `parts` equal parts of n (parallel.hpp's split, kept inside
// this level's namespace: see isa_kernels.hpp on shared inline functions).
struct span {
  int64_t begin;
  int64_t end;
};

span part_of(int64_t n, int64_t parts, int64_t i) {
  return {n * i / parts, n * (i + 1) / parts};
}

using simd::lanes;
using simd::vf;

struct out_block {
  int vectors;     // 1 or 2
  bool tail;       // the last vector is partial
  lanes last;      // its valid lanes
};

out_block make_block(int64_t left) {
  auto vectors = left > simd::width ? 2 : 1;
  auto in_last = static_cast<int>(
    std::min<int64_t>(left - simd::width * (vectors - 1), simd::width));
  return {vectors, in_last < simd::width, simd::first_lanes(in_last)};
}

// -- forward -----------------------------------------------------------------

struct forward_args {
  const float* base;
  const patch_layout* p;
  const int64_t* row_offsets; // R of them
  const float* w;             // at the column block
  int64_t opad;
  const float* bias;          // at the column block
  bool relu;
  float* out;                 // at the row and column block
  int64_t ldo;
  lanes last;
};

template <int R, int V, bool Tail>
void forward_tile(const forward_args& f) {
  vf acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v)
      acc[i][v] = simd::zero();
  const auto& p = *f.p;
  for (int64_t kh = 0; kh < p.k_h; ++kh) {
    const float* a[R];
    for (int i = 0; i < R; ++i)
      a[i] = f.base + f.row_offsets[i] + kh * p.tap_stride;
    const float* wk = f.w + kh * p.segment * f.opad;
    for (int64_t j = 0; j < p.segment; ++j, wk += f.opad) {
      vf b[V];
      // opad is a multiple of 8: a 16-float vector may pass the row's end.
      for (int v = 0; v < V; ++v)
        b[v] = Tail && v == V - 1 ? simd::load(wk + v * simd::width, f.last)
                                  : simd::load(wk + v * simd::width);
      for (int i = 0; i < R; ++i) {
        auto x = simd::broadcast(a[i] + j);
        for (int v = 0; v < V; ++v)
          acc[i][v] = simd::fma(x, b[v], acc[i][v]);
      }
    }
  }
  auto zero = simd::zero();
  for (int v = 0; v < V; ++v) {
    auto bias = Tail && v == V - 1 ? simd::load(f.bias + v * simd::width, f.last)
                                   : simd::load(f.bias + v * simd::width);
    for (int i = 0; i < R; ++i) {
      auto r = simd::add(acc[i][v], bias);
      if (f.relu)
        r = simd::max(zero, r);
      float* dst = f.out + i * f.ldo + v * simd::width;
      if (Tail && v == V - 1)
        simd::store(dst, r, f.last);
      else
        simd::store(dst, r);
    }
  }
}

// The tile of `rows` (1..R) rows.
template <int V, bool Tail, int R = rows_for(V)>
void forward_tile_rows(int rows, const forward_args& f) {
  if constexpr (R > 1)
    if (rows < R)
      return forward_tile_rows<V, Tail, R - 1>(rows, f);
  forward_tile<R, V, Tail>(f);
}

// -- weight gradient ---------------------------------------------------------

struct weight_args {
  const float* base;
  const int64_t* row_offsets; // all rows
  int64_t rows;
  const int64_t* taps;        // R tap offsets
  const float* ds;            // at the column block
  int64_t ldd;
  lanes last;
  float* dw;                  // at the row and column block
  int64_t opad;
};

template <int R, int V, bool Tail>
void weight_tile(const weight_args& f) {
  vf acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v)
      acc[i][v] = simd::zero();
  int64_t taps[R];
  for (int i = 0; i < R; ++i)
    taps[i] = f.taps[i];
  const float* d = f.ds;
  for (int64_t m = 0; m < f.rows; ++m, d += f.ldd) {
    const float* a = f.base + f.row_offsets[m];
    vf b[V];
    for (int v = 0; v < V; ++v)
      b[v] = Tail && v == V - 1 ? simd::load(d + v * simd::width, f.last)
                                : simd::load(d + v * simd::width);
    for (int i = 0; i < R; ++i) {
      auto x = simd::broadcast(a + taps[i]);
      for (int v = 0; v < V; ++v)
        acc[i][v] = simd::fma(x, b[v], acc[i][v]);
    }
  }
  // dw is padded to opad columns, a multiple of 8 but not of 16: the last
  // vector of a partial block is masked.
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) {
      float* dst = f.dw + i * f.opad + v * simd::width;
      if (Tail && v == V - 1)
        simd::store(dst, simd::add(simd::load(dst, f.last), acc[i][v]),
                    f.last);
      else
        simd::store(dst, simd::add(simd::load(dst), acc[i][v]));
    }
}

template <int V, bool Tail, int R = rows_for(V)>
void weight_tile_rows(int rows, const weight_args& f) {
  if constexpr (R > 1)
    if (rows < R)
      return weight_tile_rows<V, Tail, R - 1>(rows, f);
  weight_tile<R, V, Tail>(f);
}

// -- input gradient ----------------------------------------------------------

struct input_args {
  float* dx;
  const int64_t* row_offsets; // R of them
  int64_t offset;             // kh * tap_stride + j0
  const float* ds;            // at the first of the R rows
  int64_t out_c;
  const float* wt;            // at column kh * segment + j0
  int64_t ldwt;
  lanes last;
};

template <int R, int V, bool Tail>
void input_tile(const input_args& f) {
  vf acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v)
      acc[i][v] = simd::zero();
  const float* wo = f.wt;
  for (int64_t o = 0; o < f.out_c; ++o, wo += f.ldwt) {
    vf b[V];
    for (int v = 0; v < V; ++v)
      b[v] = Tail && v == V - 1 ? simd::load(wo + v * simd::width, f.last)
                                : simd::load(wo + v * simd::width);
    for (int i = 0; i < R; ++i) {
      auto x = simd::broadcast(f.ds + i * f.out_c + o);
      for (int v = 0; v < V; ++v)
        acc[i][v] = simd::fma(x, b[v], acc[i][v]);
    }
  }
  // Patches of neighbouring rows overlap: update row by row, in order.
  for (int i = 0; i < R; ++i) {
    float* dst = f.dx + f.row_offsets[i] + f.offset;
    for (int v = 0; v < V; ++v) {
      float* p = dst + v * simd::width;
      if (Tail && v == V - 1)
        simd::store(p, simd::add(simd::load(p, f.last), acc[i][v]), f.last);
      else
        simd::store(p, simd::add(simd::load(p), acc[i][v]));
    }
  }
}

template <int V, bool Tail, int R = rows_for(2)>
void input_tile_rows(int rows, const input_args& f) {
  if constexpr (R > 1)
    if (rows < R)
      return input_tile_rows<V, Tail, R - 1>(rows, f);
  input_tile<R, V, Tail>(f);
}

} // namespace

void conv_forward_rows(const float* base, const patch_layout& p,
                       int64_t rows, const float* w, int64_t opad,
                       const float* bias, int64_t out_c, bool relu,
                       float* out) {
  const int64_t step = rows_for_columns(out_c);
  for (int64_t m = 0; m < rows; m += step) {
    auto r = static_cast<int>(std::min<int64_t>(step, rows - m));
    for (int64_t o0 = 0; o0 < out_c; o0 += block_width) {
      auto blk = make_block(out_c - o0);
      forward_args f{base,      &p,    p.row_offsets + m,
                     w + o0,    opad,  bias + o0,
                     relu,      out + m * out_c + o0,
                     out_c,     blk.last};
      if (blk.vectors == 2)
        blk.tail ? forward_tile_rows<2, true>(r, f)
                 : forward_tile_rows<2, false>(r, f);
      else
        blk.tail ? forward_tile_rows<1, true>(r, f)
                 : forward_tile_rows<1, false>(r, f);
    }
  }
}

void conv_weight_grad(const float* base, const patch_layout& p,
                      const int64_t* tap_offsets, int64_t K, int64_t rows,
                      const float* ds, int64_t out_c, float* dw,
                      int64_t opad) {
  // Blocks of R - 1 or R taps rather than Rs and a remainder: every block
  // costs a pass over the rows, so a 1-tap remainder would cost as much as
  // a full block.
  const int64_t per_block = rows_for_columns(out_c);
  auto blocks = (K + per_block - 1) / per_block;
  // Passes over a slice of rows whose ds lines and patches stay in L1: over
  // a whole tile every pass would stream ds from L2 again.
  constexpr int64_t rows_per_slice = 128;
  for (int64_t m0 = 0; m0 < rows; m0 += rows_per_slice) {
    auto slice = std::min(rows_per_slice, rows - m0);
    for (int64_t o0 = 0; o0 < out_c; o0 += block_width) {
      auto blk = make_block(out_c - o0);
      for (int64_t b = 0; b < blocks; ++b) {
        auto ks = part_of(K, blocks, b);
        auto r = static_cast<int>(ks.end - ks.begin);
        weight_args f{base,
                      p.row_offsets + m0,
                      slice,
                      tap_offsets + ks.begin,
                      ds + m0 * out_c + o0,
                      out_c,
                      blk.last,
                      dw + ks.begin * opad + o0,
                      opad};
        if (blk.vectors == 2)
          blk.tail ? weight_tile_rows<2, true>(r, f)
                   : weight_tile_rows<2, false>(r, f);
        else
          blk.tail ? weight_tile_rows<1, true>(r, f)
                   : weight_tile_rows<1, false>(r, f);
      }
    }
  }
}

void conv_input_grad(float* dx, const patch_layout& p, int64_t rows,
                     const float* ds, int64_t out_c, const float* wt,
                     int64_t ldwt) {
  constexpr int64_t step = rows_for(2);
  for (int64_t m = 0; m < rows; m += step) {
    auto r = static_cast<int>(std::min<int64_t>(step, rows - m));
    for (int64_t kh = 0; kh < p.k_h; ++kh) {
      for (int64_t j0 = 0; j0 < p.segment; j0 += block_width) {
        auto blk = make_block(p.segment - j0);
        input_args f{dx,
                     p.row_offsets + m,
                     kh * p.tap_stride + j0,
                     ds + m * out_c,
                     out_c,
                     wt + kh * p.segment + j0,
                     ldwt,
                     blk.last};
        if (blk.vectors == 2)
          blk.tail ? input_tile_rows<2, true>(r, f)
                   : input_tile_rows<2, false>(r, f);
        else
          blk.tail ? input_tile_rows<1, true>(r, f)
                   : input_tile_rows<1, false>(r, f);
      }
    }
  }
}

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
