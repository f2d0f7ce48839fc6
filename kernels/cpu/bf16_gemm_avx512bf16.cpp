// The AVX512-BF16 part of kernels/cpu/bf16_gemm.hpp, compiled with the
// AVX-512 and AVX512-BF16 flags (kernels/CMakeLists.txt): nothing here runs
// before bf16_backend_runs() (kernels/cpu/bf16_gemm.cpp, baseline flags)
// said the CPU has them. Like the AMX kernel it instantiates no template
// and defines no inline function another object could share;
// tests/kernels/isa_symbols.sh checks it.
//
// vdpbf16ps adds to each of 16 float lanes the products of one pair of
// bfloat16 from each operand: B is packed as pairs of rows of k side by
// side (b[k][j], b[k + 1][j]) in panels of 32 columns, A row-major, where
// (a[i][k], a[i][k + 1]) already lie side by side, each pair broadcast to
// every lane. The inputs are rounded to bfloat16 by
// vcvtne2ps2bf16 (nearest even), the instruction the AMX kernel rounds
// with, so both backends see the same inputs.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_gemm_avx512bf16.hpp"
#include "kernels/cpu/bf16_pack.hpp"

namespace syncfac::cpu::avx512bf16 {

namespace {

// The micro-kernel's block of C: rows × 32 columns, 24 accumulators of the
// 32 zmm registers, beside B's two vectors and A's broadcast pair.
// vdpbf16ps has a latency of several cycles: 24 independent sums hide it.
constexpr int64_t rows = 12;
constexpr int64_t lanes = 16;
constexpr int64_t cols = 2 * lanes;
// Pairs of k per pass over a block of C: a panel of B (kc pairs × 32
// columns × 4 bytes, 16 KiB) and the 12 rows of A it meets (6 KiB) stay in
// L1 (32 KiB on Zen 4) while the rows of A pass.
constexpr int64_t kc = 128;

// a [m, k] as bfloat16 pairs, row-major: row i's pair p is (a[i][2p],
// a[i][2p + 1]) at out[i · pairs + p], as vdpbf16ps pairs them; an odd k's
// partner and the rows from m to mp are zero. Row-major, the rounding is
// one vector conversion per 32 values (a panel layout would scatter them).
void pack_a(const float* a, int64_t m, int64_t k, int64_t mp, int64_t kp,
            uint32_t* out) {
  const auto pairs = kp / 2;
  for (int64_t i = 0; i < mp; ++i) {
    uint32_t* dst = out + i * pairs;
    if (i >= m) {
      std::memset(dst, 0, static_cast<size_t>(pairs) * 4);
      continue;
    }
    const float* src = a + i * k;
    for (int64_t p0 = 0; p0 < pairs; p0 += lanes) {
      auto j = 2 * p0;
      auto lo = load_part(src + j, k - j);
      auto hi = load_part(src + j + lanes, k - j - lanes);
      auto count = at_most(lanes, pairs - p0);
      auto mask = count >= lanes ? static_cast<__mmask16>(0xffffu)
                                 : static_cast<__mmask16>((1u << count) - 1u);
      _mm512_mask_storeu_epi32(dst + p0, mask, to_bf16(hi, lo));
    }
  }
}

// b [k, n] into panels of 32 columns: panel c holds, for each pair p of k,
// 32 × (b[2p][j], b[2p + 1][j]) as bfloat16 pairs, columns beyond n and
// the odd k's partner zero.
void pack_b(const float* b, int64_t k, int64_t n, int64_t kp, int64_t np,
            uint32_t* out) {
  const __m512 zero = _mm512_setzero_ps();
  const auto pairs = kp / 2;
  for (int64_t r = 0; r < kp; r += 2) {
    uint32_t* pair_row = out + (r / 2) * cols;
    for (int64_t j = 0; j < np; j += lanes) {
      auto width = n - j;
      auto r0 = r < k ? load_part(b + r * n + j, width) : zero;
      auto r1 = r + 1 < k ? load_part(b + (r + 1) * n + j, width) : zero;
      _mm512_store_si512(pair_row + (j / cols) * pairs * cols + j % cols,
                         pair_rows(r0, r1));
    }
  }
}

// acc[r][h] (rows × 2 vectors) over `count` pairs of k of `rows` rows of
// A (`stride` pairs apart) and one panel of B (32 pairs per step).
void multiply_block(const uint32_t* ap, int64_t stride, const uint32_t* bp,
                    int64_t count, __m512* acc) {
  __m512 c[rows][2];
#pragma GCC unroll 12
  for (int64_t r = 0; r < rows; ++r) {
    c[r][0] = _mm512_setzero_ps();
    c[r][1] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < count; ++p) {
    auto b0 = (__m512bh) _mm512_load_si512(bp + p * cols);
    auto b1 = (__m512bh) _mm512_load_si512(bp + p * cols + lanes);
#pragma GCC unroll 12
    for (int64_t r = 0; r < rows; ++r) {
      auto x = (__m512bh) _mm512_set1_epi32(
        static_cast<int>(ap[r * stride + p]));
      c[r][0] = _mm512_dpbf16_ps(c[r][0], x, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], x, b1);
    }
  }
#pragma GCC unroll 12
  for (int64_t r = 0; r < rows; ++r) {
    acc[2 * r] = c[r][0];
    acc[2 * r + 1] = c[r][1];
  }
}

// c's block at (i0, j0) (at most rows × 32 of it inside m × n) gets
// alpha · acc, or adds it when `add` (the later passes along k).
void store_block(const __m512* acc, int64_t i0, int64_t j0, int64_t m,
                 int64_t n, float alpha, bool add, float* c) {
  const __m512 scale = _mm512_set1_ps(alpha);
  auto width = n - j0;
  __mmask16 masks[2];
  for (int h = 0; h < 2; ++h) {
    auto w = width - h * lanes;
    masks[h] = w >= lanes ? static_cast<__mmask16>(0xffffu)
               : w <= 0   ? static_cast<__mmask16>(0)
                          : static_cast<__mmask16>((1u << w) - 1u);
  }
  auto count = at_most(rows, m - i0);
  for (int64_t r = 0; r < count; ++r) {
    float* dst = c + (i0 + r) * n + j0;
    for (int h = 0; h < 2; ++h) {
      auto value = _mm512_mul_ps(scale, acc[2 * r + h]);
      if (add)
        value = _mm512_add_ps(value,
                              _mm512_maskz_loadu_ps(masks[h], dst + h * lanes));
      _mm512_mask_storeu_ps(dst + h * lanes, masks[h], value);
    }
  }
}

} // namespace

void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c) {
  auto mp = round_up(m, rows);
  auto kp = round_up(k > 0 ? k : 1, 2);
  auto np = round_up(n, cols);
  const auto pairs = kp / 2;
  // Per-thread scratch: the products run once per layer and step.
  thread_local scratch a_pairs, b_panels;
  auto* ap = a_pairs.of<uint32_t>(mp * pairs);
  auto* bp = b_panels.of<uint32_t>(np * pairs);
  pack_a(a, m, k, mp, kp, ap);
  pack_b(b, k, n, kp, np, bp);
  __m512 acc[2 * rows];
  for (int64_t p0 = 0; p0 < pairs; p0 += kc) {
    auto count = at_most(kc, pairs - p0);
    for (int64_t j0 = 0; j0 < np; j0 += cols) {
      const uint32_t* b_panel = bp + j0 * pairs + p0 * cols;
      for (int64_t i0 = 0; i0 < mp; i0 += rows) {
        multiply_block(ap + i0 * pairs + p0, pairs, b_panel, count, acc);
        store_block(acc, i0, j0, m, n, alpha, p0 > 0, c);
      }
    }
  }
}

} // namespace syncfac::cpu::avx512bf16
