// The AMX part of kernels/cpu/bf16_gemm.hpp, compiled with the AMX and
// AVX-512 BF16 flags (kernels/CMakeLists.txt): nothing here runs before
// amx_bf16_ready() (kernels/cpu/bf16_gemm.cpp, baseline flags) said the
// CPU has them. Like the AVX-512 kernels (kernels/cpu/isa_kernels.hpp) it
// instantiates no template and defines no inline function another object
// could share (std::vector, std::max): the linker could keep this object's
// AVX-512 copy for baseline code. tests/kernels/isa_symbols.sh checks it.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_gemm_kernel.hpp"
#include "kernels/cpu/bf16_pack.hpp"

namespace syncfac::cpu::amx {

namespace {

// C is computed in blocks of 2 x 2 tiles of 16 x 16 floats; a tile of A
// holds 16 rows of 32 bfloat16 along k, a tile of B 16 pairs of rows of k
// for 16 columns.
constexpr int64_t tile_rows = 16;
constexpr int64_t block = 32; // rows and columns of C per block; k per step

int64_t at_least(int64_t x, int64_t floor) {
  return x > floor ? x : floor;
}

// Palette 1's configuration: 8 tiles of 16 rows x 64 bytes.
struct alignas(64) tile_config {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  tile_config cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = tile_rows;
  }
  _tile_loadconfig(&cfg);
}

// Operands are packed tile by tile: each tile's 16 rows of 64 bytes are
// one contiguous kilobyte, so a tile load reads 16 consecutive lines (the
// row-major layout's 16 rows a whole matrix row apart stalled the loads),
// and the tiles along k follow each other. A tile of A: rows i..i+15,
// k..k+31; of B: k-pairs k/2..k/2+15, columns j..j+15.
constexpr int64_t tile_elements = 512; // bfloat16 per tile

// a [m, k] into tiles of A, [mp / 16][kp / 32] tiles, zero-padded.
void pack_rows(const float* a, int64_t m, int64_t k, int64_t mp, int64_t kp,
               uint16_t* out) {
  const auto k_tiles = kp / block;
  for (int64_t i = 0; i < mp; ++i) {
    auto* row = out + (i / tile_rows) * k_tiles * tile_elements
                + (i % tile_rows) * block;
    if (i >= m) {
      for (int64_t t = 0; t < k_tiles; ++t)
        std::memset(row + t * tile_elements, 0, block * sizeof(uint16_t));
      continue;
    }
    const float* src = a + i * k;
    for (int64_t j = 0; j < kp; j += block) {
      auto lo = load_part(src + j, at_least(k - j, 0));
      auto hi = load_part(src + j + 16, at_least(k - j - 16, 0));
      _mm512_storeu_si512(row + (j / block) * tile_elements, to_bf16(hi, lo));
    }
  }
}

// b [k, n] into tiles of B, [np / 16][kp / 32] tiles of VNNI pairs
// (b[k][j], b[k + 1][j] side by side), zero-padded.
void pack_pairs(const float* b, int64_t k, int64_t n, int64_t kp, int64_t np,
                uint16_t* out) {
  const __m512 zero = _mm512_setzero_ps();
  const auto k_tiles = kp / block;
  for (int64_t r = 0; r < kp; r += 2) {
    auto* pair_row = out + (r / block) * tile_elements
                     + ((r % block) / 2) * block;
    for (int64_t j = 0; j < np; j += tile_rows) {
      auto cols = at_least(n - j, 0);
      auto r0 = r < k ? load_part(b + r * n + j, cols) : zero;
      auto r1 = r + 1 < k ? load_part(b + (r + 1) * n + j, cols) : zero;
      _mm512_storeu_si512(pair_row + (j / tile_rows) * k_tiles
                                       * tile_elements,
                          pair_rows(r0, r1));
    }
  }
}

} // namespace

void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c) {
  auto mp = round_up(m, block);
  auto kp = round_up(at_least(k, 1), block);
  auto np = round_up(n, block);
  // Per-thread scratch: the products run once per layer and step.
  thread_local scratch a_tiles, b_tiles, c_panel;
  auto* ap = a_tiles.of<uint16_t>(mp * kp);
  auto* bp = b_tiles.of<uint16_t>(kp * np);
  auto* cp = c_panel.of<float>(block * np);
  pack_rows(a, m, k, mp, kp, ap);
  pack_pairs(b, k, n, kp, np, bp);
  configure_tiles();
  const auto k_tiles = kp / block;
  constexpr int64_t tile_stride = 64; // bytes between a packed tile's rows
  const auto c_stride = np * 4;       // bytes between rows of C's row panel
  for (int64_t i0 = 0; i0 < mp; i0 += block) {
    const uint16_t* a0 = ap + (i0 / tile_rows) * k_tiles * tile_elements;
    const uint16_t* a1 = a0 + k_tiles * tile_elements;
    for (int64_t j0 = 0; j0 < np; j0 += block) {
      const uint16_t* b0 = bp + (j0 / tile_rows) * k_tiles * tile_elements;
      const uint16_t* b1 = b0 + k_tiles * tile_elements;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t t = 0; t < k_tiles; ++t) {
        auto at = t * tile_elements;
        _tile_loadd(4, a0 + at, tile_stride);
        _tile_loadd(6, b0 + at, tile_stride);
        _tile_loadd(5, a1 + at, tile_stride);
        _tile_loadd(7, b1 + at, tile_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      float* c0 = cp + j0;
      _tile_stored(0, c0, c_stride);
      _tile_stored(1, c0 + tile_rows, c_stride);
      _tile_stored(2, c0 + tile_rows * np, c_stride);
      _tile_stored(3, c0 + tile_rows * np + tile_rows, c_stride);
    }
    // The row panel out, scaled, without its padding.
    auto rows = at_most(block, m - i0);
    const __m512 scale = _mm512_set1_ps(alpha);
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = cp + i * np;
      float* dst = c + (i0 + i) * n;
      int64_t j = 0;
      for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(dst + j, _mm512_mul_ps(scale, _mm512_loadu_ps(src + j)));
      if (j < n) {
        auto mask = static_cast<__mmask16>((1u << (n - j)) - 1u);
        _mm512_mask_storeu_ps(dst + j, mask,
                              _mm512_mul_ps(scale, _mm512_loadu_ps(src + j)));
      }
    }
  }
  _tile_release();
}

} // namespace syncfac::cpu::amx
