// The conv micro-kernels, compiled once per instruction-set level into the
// namespace SYNCFAC_KERNEL_ISA (kernels/cpu/isa_kernels.hpp): the vector
// width and the register blocking follow the level's simd.hpp.
#include "kernels/cpu/isa_kernels.hpp"

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "kernels/cpu/simd.hpp"

// Register blocking: R rows x V vectors of accumulators, V <= 2. With 16
// ymm registers (AVX2) R <= 6: at most 12 accumulators + 2 operands + 1
// broadcast = 15 registers, two FMAs per broadcast and ~1.5 loads per FMA
// pair. With 32 zmm registers (AVX-512) R <= 8 at V = 2 (16 accumulators)
// and R <= 12 at V = 1 (out_c <= 16, the ConvNet's layers): 12 chains
// cover the FMA latency on two ports with margin where 8 would just fit.
// AVX-512 also has a strided forward tile (16 or 12 rows of one output-image
// row, one pointer) and a transposed weight-gradient tile (4 outputs x 5
// vectors along the kernel row); see their comments below.

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

// Calls tile(std::integral_constant<int, N>{}) with N = min(count, Max)
// (count >= 1): the tiles take their rows, outputs or vectors as a
// template argument so that their accumulators stay in registers, and a
// block's last, shorter tile takes the largest instance that fits.
template <int Max, class Tile>
__attribute__((always_inline)) inline void with_count(int count,
                                                      Tile&& tile) {
  if constexpr (Max > 1)
    if (count < Max)
      return with_count<Max - 1>(count, tile);
  tile(std::integral_constant<int, Max>{});
}

#ifdef SYNCFAC_SIMD_AVX512
constexpr int rows_for(int vectors) {
  return vectors == 1 ? 12 : 8;
}
// The strided forward tile needs no pointer per row: 16 (V = 1) or 12
// (V = 2, 24 accumulators) rows, with the V operands 17 or 26 of the 32 zmm.
constexpr int strided_rows_for(int vectors) {
  return vectors == 1 ? 16 : 12;
}
// Patch steps (stride_w * C) with a strided forward tile: the ConvNet's
// conv1 (1) and the 16- and 32-channel layers and input gradients.
constexpr bool strided_forward = true;
#else
constexpr int rows_for(int) {
  return 6;
}
// 16 ymm hold 12 accumulators at R = 6: six row pointers fit the general
// registers, so AVX2 keeps the pointer-per-row tile.
constexpr int strided_rows_for(int) {
  return 6;
}
constexpr bool strided_forward = false;
#endif
// Output-image rows shorter than this run the pointer-per-row tile, whose
// blocks may cross rows: the strided tile's blocks would be too short.
constexpr int64_t min_strided_run = 8;

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

// The pieces every tile shares, inlined into each: zeroed accumulators,
// V vectors from p (the last one masked when Tail), dst += x for the
// V vectors of one accumulator row, and a walk over the patch rows.
template <int R, int V>
void zero_all(vf (&acc)[R][V]) {
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v)
      acc[i][v] = simd::zero();
}

template <int V, bool Tail>
void load_vectors(const float* p, lanes last, vf (&x)[V]) {
  for (int v = 0; v < V; ++v)
    x[v] = Tail && v == V - 1 ? simd::load(p + v * simd::width, last)
                              : simd::load(p + v * simd::width);
}

template <int V, bool Tail>
void add_vectors(float* dst, lanes last, const vf (&x)[V]) {
  for (int v = 0; v < V; ++v) {
    float* d = dst + v * simd::width;
    if (Tail && v == V - 1)
      simd::store(d, simd::add(simd::load(d, last), x[v]), last);
    else
      simd::store(d, simd::add(simd::load(d), x[v]));
  }
}

// The walk of the transposed and whole-kernel-row weight-gradient tiles
// over the patch rows of `f` (its base, row_offsets and rows) and their ds
// lines (ds, ldd apart): row(a, d) with a the row's patch at `offset` and
// d its ds line. Forced inline, with the tiles' row lambdas: the tiles
// then compile to the loops written out (the same vector instructions, in
// the same order; bench_conv_passes as fast), and the compiler inlines the
// tiles where it did. weight_tile keeps its loop written out: with the
// walk, GCC 12 moves more between registers in conv_weight_grad at
// AVX-512 (88 more mov, 28 more vmovq), where its tiles are inlined.
template <class Args, class Row>
[[gnu::always_inline]] inline void
for_each_patch_row(const Args& f, int64_t offset, Row row) {
  const float* d = f.ds;
  for (int64_t m = 0; m < f.rows; ++m, d += f.ldd)
    row(f.base + f.row_offsets[m] + offset, d);
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

// out = act(acc + bias), row by row.
template <int R, int V, bool Tail>
void store_forward(const forward_args& f, const vf (&acc)[R][V]) {
  auto zero = simd::zero();
  vf bias[V];
  load_vectors<V, Tail>(f.bias, f.last, bias);
  for (int v = 0; v < V; ++v) {
    for (int i = 0; i < R; ++i) {
      auto r = simd::add(acc[i][v], bias[v]);
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

template <int R, int V, bool Tail>
void forward_tile(const forward_args& f) {
  vf acc[R][V];
  zero_all(acc);
  const auto& p = *f.p;
  for (int64_t kh = 0; kh < p.k_h; ++kh) {
    const float* a[R];
    for (int i = 0; i < R; ++i)
      a[i] = f.base + f.row_offsets[i] + kh * p.tap_stride;
    const float* wk = f.w + kh * p.segment * f.opad;
    for (int64_t j = 0; j < p.segment; ++j, wk += f.opad) {
      vf b[V];
      // opad is a multiple of 8: a 16-float vector may pass the row's end.
      load_vectors<V, Tail>(wk, f.last, b);
      for (int i = 0; i < R; ++i) {
        auto x = simd::broadcast(a[i] + j);
        for (int v = 0; v < V; ++v)
          acc[i][v] = simd::fma(x, b[v], acc[i][v]);
      }
    }
  }
  store_forward<R, V, Tail>(f, acc);
}

// The tile of `rows` (1..R) rows.
template <int V, bool Tail, int R = rows_for(V)>
void forward_tile_rows(int rows, const forward_args& f) {
  with_count<R>(rows, [&](auto n) {
    forward_tile<decltype(n)::value, V, Tail>(f);
  });
}

// Rows of one output-image row: patch i of the block starts Step floats
// after patch i - 1, so one pointer with compile-time displacements
// addresses all R of them. The pointer-per-row tile above needs R + 4
// general registers, and at R = 12 the compiler parks pointers in vector
// registers and moves them back each iteration on the FMA port.
template <int R, int V, bool Tail, int Step>
void forward_tile_strided(const forward_args& f) {
  vf acc[R][V];
  zero_all(acc);
  const auto& p = *f.p;
  for (int64_t kh = 0; kh < p.k_h; ++kh) {
    const float* a = f.base + f.row_offsets[0] + kh * p.tap_stride;
    const float* wk = f.w + kh * p.segment * f.opad;
    for (int64_t j = 0; j < p.segment; ++j, wk += f.opad) {
      vf b[V];
      load_vectors<V, Tail>(wk, f.last, b);
      for (int i = 0; i < R; ++i) {
        auto x = simd::broadcast(a + i * Step + j);
        for (int v = 0; v < V; ++v)
          acc[i][v] = simd::fma(x, b[v], acc[i][v]);
      }
    }
  }
  store_forward<R, V, Tail>(f, acc);
}

template <int V, bool Tail, int Step, int R = strided_rows_for(V)>
void forward_strided_rows(int rows, const forward_args& f) {
  with_count<R>(rows, [&](auto n) {
    forward_tile_strided<decltype(n)::value, V, Tail, Step>(f);
  });
}

// Rows [m, m + n) where every patch starts row_step after the one before:
// one output-image row, or the rest of it.
int64_t uniform_run(const patch_layout& p, int64_t m, int64_t rows) {
  int64_t n = 1;
  while (m + n < rows
         && p.row_offsets[m + n] - p.row_offsets[m + n - 1] == p.row_step)
    ++n;
  return n;
}

// Rows [0, rows) cut at output-image rows (uniform runs) into near-equal
// blocks of at most `limit` rows (a 14-wide row is one block of 14, not
// 12 + 2): block(first, r) for each. Forced inline, with the callers'
// lambdas, as for_each_patch_row.
template <class Block>
[[gnu::always_inline]] inline void
for_each_run_block(const patch_layout& p, int64_t rows, int64_t limit,
                   Block block) {
  for (int64_t m = 0; m < rows;) {
    auto run = uniform_run(p, m, rows);
    auto parts = (run + limit - 1) / limit;
    for (int64_t q = 0; q < parts; ++q) {
      auto part = part_of(run, parts, q);
      block(m + part.begin, static_cast<int>(part.end - part.begin));
    }
    m += run;
  }
}

// The forward pass over rows cut at output-image rows into blocks of at
// most strided_rows_for(V) rows, each run by the strided tile.
template <int Step>
void forward_rows_strided(const float* base, const patch_layout& p,
                          int64_t rows, const float* w, int64_t opad,
                          const float* bias, int64_t out_c, bool relu,
                          float* out) {
  for (int64_t o0 = 0; o0 < out_c; o0 += block_width) {
    auto blk = make_block(out_c - o0);
    for_each_run_block(
      p, rows, strided_rows_for(blk.vectors),
      [&](int64_t first, int r) __attribute__((always_inline)) {
        forward_args f{base,      &p,    p.row_offsets + first,
                       w + o0,    opad,  bias + o0,
                       relu,      out + first * out_c + o0,
                       out_c,     blk.last};
        if (blk.vectors == 2)
          blk.tail ? forward_strided_rows<2, true, Step>(r, f)
                   : forward_strided_rows<2, false, Step>(r, f);
        else
          blk.tail ? forward_strided_rows<1, true, Step>(r, f)
                   : forward_strided_rows<1, false, Step>(r, f);
      });
  }
}

// -- forward, one input channel -------------------------------------------
// One input channel and stride 1 (row_step 1, kernel rows of S floats: the
// ConvNet's conv1, ResNet's stem): along an output-image row the patches
// overlap, out[i] += a[i + j] * w[j] for j < S, so each input value, once
// broadcast, feeds the S outputs it touches. A block of R outputs and one
// vector of output channels takes S weight vectors (kept in registers for
// the kernel row) and R + S - 1 broadcasts per kernel row for R * S FMAs,
// 0.25-0.4 loads per FMA, where forward_tile_strided takes one broadcast
// per FMA (conv1 at AVX-512: 0.90 ms against 0.96). Each output still sums
// its taps in (kh, j) order from zero, as forward_tile and
// forward_tile_strided do: the same bits.

#ifdef SYNCFAC_SIMD_AVX512
// R accumulators + S weights + 1 broadcast of the 32 zmm.
constexpr int sliding_rows = 16;
constexpr bool sliding_forward = true;
#else
// At AVX2 one vector of 8 outputs per pass leaves room for 9 rows at S = 5
// (an accumulator spills at 10): conv1's forward ran 0.95 ms against 0.87
// for forward_tile's 6 x 2 blocks, so AVX2 keeps those. (A template, not
// instantiated at all below AVX-512: 1 row there.)
constexpr int sliding_rows = 1;
constexpr bool sliding_forward = false;
#endif

template <int S, int R, bool Tail>
void forward_tile_sliding(const forward_args& f) {
  vf acc[R][1];
  zero_all(acc);
  const auto& p = *f.p;
  const float* a = f.base + f.row_offsets[0];
  const float* wk = f.w;
  for (int64_t kh = 0; kh < p.k_h; ++kh, a += p.tap_stride,
               wk += S * f.opad) {
    vf w[S];
    for (int j = 0; j < S; ++j)
      w[j] = Tail ? simd::load(wk + j * f.opad, f.last)
                  : simd::load(wk + j * f.opad);
    // Input value t touches outputs t - j; for each output the taps come
    // in increasing j as t increases. Unrolled in full, or GCC keeps the
    // accumulators in memory (their index depends on t).
#pragma GCC unroll 32
    for (int t = 0; t < R + S - 1; ++t) {
      auto x = simd::broadcast(a + t);
#pragma GCC unroll 8
      for (int j = 0; j < S; ++j) {
        const int i = t - j;
        if (i >= 0 && i < R)
          acc[i][0] = simd::fma(x, w[j], acc[i][0]);
      }
    }
  }
  store_forward<R, 1, Tail>(f, acc);
}

template <int S, bool Tail, int R = sliding_rows>
void forward_sliding_rows(int rows, const forward_args& f) {
  with_count<R>(rows, [&](auto n) {
    forward_tile_sliding<S, decltype(n)::value, Tail>(f);
  });
}

// The forward pass of a one-channel stride-1 convolution with kernel rows
// of S floats: blocks of at most sliding_rows of an output-image row (a
// 28-wide row: 14 and 14), each run for every vector of output channels
// while its patches are in L1.
template <int S>
void forward_rows_sliding(const float* base, const patch_layout& p,
                          int64_t rows, const float* w, int64_t opad,
                          const float* bias, int64_t out_c, bool relu,
                          float* out) {
  for_each_run_block(
    p, rows, sliding_rows,
    [&](int64_t first, int r) __attribute__((always_inline)) {
      for (int64_t o0 = 0; o0 < out_c; o0 += simd::width) {
        auto n = static_cast<int>(std::min<int64_t>(simd::width, out_c - o0));
        forward_args f{base,      &p,    p.row_offsets + first,
                       w + o0,    opad,  bias + o0,
                       relu,      out + first * out_c + o0,
                       out_c,     simd::first_lanes(n)};
        n < simd::width ? forward_sliding_rows<S, true>(r, f)
                        : forward_sliding_rows<S, false>(r, f);
      }
    });
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
  zero_all(acc);
  int64_t taps[R];
  for (int i = 0; i < R; ++i)
    taps[i] = f.taps[i];
  const float* d = f.ds;
  for (int64_t m = 0; m < f.rows; ++m, d += f.ldd) {
    const float* a = f.base + f.row_offsets[m];
    vf b[V];
    load_vectors<V, Tail>(d, f.last, b);
    for (int i = 0; i < R; ++i) {
      auto x = simd::broadcast(a + taps[i]);
      for (int v = 0; v < V; ++v)
        acc[i][v] = simd::fma(x, b[v], acc[i][v]);
    }
  }
  // dw is padded to opad columns, a multiple of 8 but not of 16: the last
  // vector of a partial block is masked.
  for (int i = 0; i < R; ++i)
    add_vectors<V, Tail>(f.dw + i * f.opad, f.last, acc[i]);
}

template <int V, bool Tail, int R = rows_for(V)>
void weight_tile_rows(int rows, const weight_args& f) {
  with_count<R>(rows, [&](auto n) {
    weight_tile<decltype(n)::value, V, Tail>(f);
  });
}

// -- weight gradient, transposed ---------------------------------------------
// Where a kernel row holds at least one vector (kw * C >= width), dw^T
// [o, k] takes its vectors along k instead: V consecutive patch vectors of
// one kernel row and R broadcasts of ds[m, o .. o + R) feed R * V FMAs per
// patch row, (R + V) / (R V) loads per FMA (0.45 at 4 x 5) against
// (R + 1) / R = 1.08 for weight_tile's one-vector o blocks at out_c = 16.
// The partial sums go to a thread's dw^T buffer, added into dw once per
// call.

#ifdef SYNCFAC_SIMD_AVX512
// 20 accumulators + 5 patch vectors + 1 broadcast of the 32 zmm.
constexpr int transposed_vectors = 5;
// Outputs per block for V patch vectors: fewer vectors, more outputs, so
// that a patch row always feeds 16-24 FMAs (a kernel row of 16 or 32
// floats, 1x1 convolutions of 16 or 32 channels, had 4 or 8).
constexpr int transposed_outputs_for(int vectors) {
  return vectors >= 4 ? 4 : vectors == 3 ? 6 : vectors == 2 ? 8 : 12;
}
constexpr bool transposed_weight_grad = true;
#else
// 16 ymm give no better ratio than weight_tile's 6 x 2 blocks.
constexpr int transposed_vectors = 1;
constexpr int transposed_outputs_for(int) {
  return 1;
}
constexpr bool transposed_weight_grad = false;
#endif

struct transposed_args {
  const float* base;
  const int64_t* row_offsets; // the slice's rows
  int64_t rows;
  int64_t offset;             // kh * tap_stride + j0
  const float* ds;            // at the slice's first row and output o0
  int64_t ldd;
  lanes last;                 // valid lanes of the last vector
  float* dwt;                 // at row o0, column kh * segment + j0
  int64_t ldt;
};

template <int R, int V, bool Tail>
void transposed_tile(const transposed_args& f) {
  vf acc[R][V];
  zero_all(acc);
  for_each_patch_row(f, f.offset, [&](const float* a, const float* d)
                                   __attribute__((always_inline)) {
    vf x[V];
    load_vectors<V, Tail>(a, f.last, x);
    for (int i = 0; i < R; ++i) {
      auto b = simd::broadcast(d + i);
      for (int v = 0; v < V; ++v)
        acc[i][v] = simd::fma(b, x[v], acc[i][v]);
    }
  });
  for (int i = 0; i < R; ++i)
    add_vectors<V, Tail>(f.dwt + i * f.ldt, f.last, acc[i]);
}

template <int V, bool Tail, int R = transposed_outputs_for(V)>
void transposed_tile_outputs(int outputs, const transposed_args& f) {
  with_count<R>(outputs, [&](auto n) {
    transposed_tile<decltype(n)::value, V, Tail>(f);
  });
}

template <bool Tail, int V = transposed_vectors>
void transposed_tile_vectors(int vectors, int outputs,
                             const transposed_args& f) {
  with_count<V>(vectors, [&](auto n) {
    transposed_tile_outputs<decltype(n)::value, Tail>(outputs, f);
  });
}

// A thread's dw^T buffer, grown as needed and freed when the thread ends.
// Not a std::vector: its members would be templates instantiated in this
// level's objects, weak symbols the linker may share with other levels
// (isa_kernels.hpp); this type has internal linkage.
struct transposed_buffer {
  float* data = nullptr;
  size_t size = 0;

  transposed_buffer() = default;
  transposed_buffer(const transposed_buffer&) = delete;
  transposed_buffer& operator=(const transposed_buffer&) = delete;
  ~transposed_buffer() {
    std::free(data);
  }

  // n zeroed floats.
  float* zeroed(size_t n) {
    if (n > size) {
      std::free(data);
      data = static_cast<float*>(std::malloc(n * sizeof(float)));
      if (data == nullptr)
        std::abort(); // as operator new would, without its symbols
      size = n;
    }
    for (size_t i = 0; i < n; ++i)
      data[i] = 0.0f;
    return data;
  }
};

thread_local transposed_buffer transposed_scratch;

// dw[k, o] += dwt[o, k]: one gather of a column of dw^T per row of dw and
// 16 outputs, where scalar adds cost ~8 % of a ConvNet tile's FMA time.
void add_transposed(const float* dwt, int64_t ldt, int64_t K, int64_t out_c,
                    float* dw, int64_t opad) {
#ifdef SYNCFAC_SIMD_AVX512
  const auto column = _mm512_mullo_epi32(
    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    _mm512_set1_epi32(static_cast<int32_t>(ldt)));
  for (int64_t o0 = 0; o0 < out_c; o0 += simd::width) {
    auto n = static_cast<int>(std::min<int64_t>(simd::width, out_c - o0));
    auto m = simd::first_lanes(n);
    const float* src = dwt + o0 * ldt;
    for (int64_t k = 0; k < K; ++k) {
      auto v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m.mask, column,
                                        src + k, 4);
      float* dst = dw + k * opad + o0;
      simd::store(dst, simd::add(simd::load(dst, m), v), m);
    }
  }
#else
  for (int64_t k = 0; k < K; ++k)
    for (int64_t o = 0; o < out_c; ++o)
      dw[k * opad + o] += dwt[o * ldt + k];
#endif
}

void weight_grad_transposed(const float* base, const patch_layout& p,
                            int64_t K, int64_t rows, const float* ds,
                            int64_t out_c, float* dw, int64_t opad) {
  const int64_t ldt = (K + simd::width - 1) / simd::width * simd::width;
  float* dwt = transposed_scratch.zeroed(static_cast<size_t>(out_c * ldt));
  const int64_t vectors = (p.segment + simd::width - 1) / simd::width;
  const int64_t vector_parts
    = (vectors + transposed_vectors - 1) / transposed_vectors;
  // As in conv_weight_grad: a slice's ds lines and patches stay in L1
  // across its k_h * vector_parts * output_parts passes.
  constexpr int64_t rows_per_slice = 128;
  for (int64_t m0 = 0; m0 < rows; m0 += rows_per_slice) {
    auto slice = std::min(rows_per_slice, rows - m0);
    for (int64_t kh = 0; kh < p.k_h; ++kh)
      for (int64_t vq = 0; vq < vector_parts; ++vq) {
        auto vs = part_of(vectors, vector_parts, vq);
        auto j0 = vs.begin * simd::width;
        auto count = static_cast<int>(vs.end - vs.begin);
        auto in_last = static_cast<int>(
          std::min<int64_t>(p.segment - j0 - (count - 1) * simd::width,
                            simd::width));
        bool tail = in_last < simd::width;
        const int64_t per_part = transposed_outputs_for(count);
        const int64_t output_parts = (out_c + per_part - 1) / per_part;
        for (int64_t oq = 0; oq < output_parts; ++oq) {
          auto os = part_of(out_c, output_parts, oq);
          transposed_args f{base,
                            p.row_offsets + m0,
                            slice,
                            kh * p.tap_stride + j0,
                            ds + m0 * out_c + os.begin,
                            out_c,
                            simd::first_lanes(in_last),
                            dwt + os.begin * ldt + kh * p.segment + j0,
                            ldt};
          auto outputs = static_cast<int>(os.end - os.begin);
          tail ? transposed_tile_vectors<true>(count, outputs, f)
               : transposed_tile_vectors<false>(count, outputs, f);
        }
      }
  }
  add_transposed(dwt, ldt, K, out_c, dw, opad);
}

// -- weight gradient, whole short kernel rows --------------------------------
// Kernel rows shorter than a vector (conv1: 5 floats, one channel) with the
// row length S a compile-time constant: a block of KH whole kernel rows is
// KH row pointers plus displacements 0 .. S - 1, so its KH * S taps (all 25
// of a 5 x 5 kernel) take one pass over the rows, where weight_tile, whose
// tap offsets sit in general registers, takes blocks of 8 or 9 (three
// passes at 10 loads per 8 FMAs, and 8 chains: no slack over the FMA
// latency).

#ifdef SYNCFAC_SIMD_AVX512
// 25 accumulators + the ds vector + a broadcast of the 32 zmm.
constexpr int kernel_row_taps = 25;
constexpr bool kernel_row_weight_grad = true;
#else
constexpr int kernel_row_taps = 1;
constexpr bool kernel_row_weight_grad = false;
#endif

struct kernel_rows_args {
  const float* base;
  const int64_t* row_offsets; // the slice's rows
  int64_t rows;
  int64_t first;              // kh0 * tap_stride
  int64_t tap_stride;
  const float* ds;            // at the slice's first row
  int64_t ldd;
  lanes last;
  float* dw;                  // at row kh0 * S
  int64_t opad;
};

template <int S, int KH, bool Tail>
void kernel_rows_tile(const kernel_rows_args& f) {
  vf acc[KH][S];
  zero_all(acc);
  for_each_patch_row(f, f.first, [&](const float* a, const float* d)
                                   __attribute__((always_inline)) {
    auto b = Tail ? simd::load(d, f.last) : simd::load(d);
    for (int r = 0; r < KH; ++r, a += f.tap_stride)
      for (int j = 0; j < S; ++j)
        acc[r][j] = simd::fma(simd::broadcast(a + j), b, acc[r][j]);
  });
  for (int r = 0; r < KH; ++r)
    for (int j = 0; j < S; ++j) {
      const vf one[1] = {acc[r][j]};
      add_vectors<1, Tail>(f.dw + (r * S + j) * f.opad, f.last, one);
    }
}

template <int S, bool Tail, int KH = kernel_row_taps / S>
void kernel_rows_tile_rows(int kernel_rows, const kernel_rows_args& f) {
  with_count<KH>(kernel_rows, [&](auto n) {
    kernel_rows_tile<S, decltype(n)::value, Tail>(f);
  });
}

template <int S>
void weight_grad_kernel_rows(const float* base, const patch_layout& p,
                             int64_t rows, const float* ds, int64_t out_c,
                             float* dw, int64_t opad) {
  constexpr int64_t per_block = kernel_row_taps / S;
  auto blocks = (p.k_h + per_block - 1) / per_block;
  auto blk = make_block(out_c);
  constexpr int64_t rows_per_slice = 128;
  for (int64_t m0 = 0; m0 < rows; m0 += rows_per_slice) {
    auto slice = std::min(rows_per_slice, rows - m0);
    for (int64_t b = 0; b < blocks; ++b) {
      auto ks = part_of(p.k_h, blocks, b);
      kernel_rows_args f{base,
                         p.row_offsets + m0,
                         slice,
                         ks.begin * p.tap_stride,
                         p.tap_stride,
                         ds + m0 * out_c,
                         out_c,
                         blk.last,
                         dw + ks.begin * S * opad,
                         opad};
      auto n = static_cast<int>(ks.end - ks.begin);
      blk.tail ? kernel_rows_tile_rows<S, true>(n, f)
               : kernel_rows_tile_rows<S, false>(n, f);
    }
  }
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
  zero_all(acc);
  const float* wo = f.wt;
  for (int64_t o = 0; o < f.out_c; ++o, wo += f.ldwt) {
    vf b[V];
    load_vectors<V, Tail>(wo, f.last, b);
    for (int i = 0; i < R; ++i) {
      auto x = simd::broadcast(f.ds + i * f.out_c + o);
      for (int v = 0; v < V; ++v)
        acc[i][v] = simd::fma(x, b[v], acc[i][v]);
    }
  }
  // Patches of neighbouring rows overlap: update row by row, in order.
  for (int i = 0; i < R; ++i)
    add_vectors<V, Tail>(f.dx + f.row_offsets[i] + f.offset, f.last, acc[i]);
}

template <int V, bool Tail, int R = rows_for(2)>
void input_tile_rows(int rows, const input_args& f) {
  with_count<R>(rows, [&](auto n) {
    input_tile<decltype(n)::value, V, Tail>(f);
  });
}

} // namespace

void conv_forward_rows(const float* base, const patch_layout& p,
                       int64_t rows, const float* w, int64_t opad,
                       const float* bias, int64_t out_c, bool relu,
                       float* out) {
  // row_step 1: one input channel and stride 1 (conv_plan's layout).
  if (sliding_forward && p.row_step == 1)
    switch (p.segment) {
    case 3:
      return forward_rows_sliding<3>(base, p, rows, w, opad, bias, out_c,
                                     relu, out);
    case 5:
      return forward_rows_sliding<5>(base, p, rows, w, opad, bias, out_c,
                                     relu, out);
    case 7:
      return forward_rows_sliding<7>(base, p, rows, w, opad, bias, out_c,
                                     relu, out);
    default:
      break;
    }
  if constexpr (strided_forward) {
    if (rows > 0
        && uniform_run(p, 0, rows) >= std::min(rows, min_strided_run))
      switch (p.row_step) {
      case 1:
        return forward_rows_strided<1>(base, p, rows, w, opad, bias, out_c,
                                       relu, out);
      case 16:
        return forward_rows_strided<16>(base, p, rows, w, opad, bias, out_c,
                                        relu, out);
      case 32:
        return forward_rows_strided<32>(base, p, rows, w, opad, bias, out_c,
                                        relu, out);
      default:
        break;
      }
  }
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
  // Both AVX-512 tiles read kernel rows whole: taps in fill_tap_offsets
  // order (conv_plan.hpp), as conv2d.cpp passes them.
  bool whole_rows = K > 0 && K == p.k_h * p.segment
                    && tap_offsets[K - 1]
                         == (p.k_h - 1) * p.tap_stride + p.segment - 1;
  if (transposed_weight_grad && whole_rows && p.segment >= simd::width)
    return weight_grad_transposed(base, p, K, rows, ds, out_c, dw, opad);
  // (A template, not instantiated at all below AVX-512: 1 / S rows there.)
  if constexpr (kernel_row_weight_grad)
    if (whole_rows && out_c <= simd::width) {
      if (p.segment == 5)
        return weight_grad_kernel_rows<5>(base, p, rows, ds, out_c, dw,
                                          opad);
      if (p.segment == 3)
        return weight_grad_kernel_rows<3>(base, p, rows, ds, out_c, dw,
                                          opad);
    }
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
