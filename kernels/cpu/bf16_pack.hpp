#pragma once

// What the two bfloat16 kernels share (bf16_gemm_kernel.cpp on AMX,
// bf16_gemm_avx512bf16.cpp on AVX512-BF16): their scratch, their rounding
// to bfloat16 and the pairing of two rows of B that both tdpbf16ps and
// vdpbf16ps read. Include it only from objects built with -mavx512bf16.
// Everything here is in an unnamed namespace: each object keeps its own
// copy, and no symbol is shared with another object that the linker could
// pick (tests/kernels/isa_symbols.sh).

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace syncfac::cpu {
namespace {

int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

int64_t at_most(int64_t x, int64_t ceiling) {
  return x < ceiling ? x : ceiling;
}

// A thread's scratch buffer, 64-byte aligned, grown as needed.
struct scratch {
  void* data = nullptr;
  size_t bytes = 0;

  scratch() = default;
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  ~scratch() {
    std::free(data);
  }

  template <class T>
  T* of(int64_t count) {
    auto need = static_cast<size_t>(round_up(count * int64_t{sizeof(T)}, 64));
    if (need > bytes) {
      std::free(data);
      data = std::aligned_alloc(64, need);
      bytes = data != nullptr ? need : 0;
      if (data == nullptr)
        throw std::bad_alloc{};
    }
    return static_cast<T*>(data);
  }
};

// The first n (<= 16) floats of x, zero beyond (none read beyond).
__m512 load_part(const float* x, int64_t n) {
  if (n >= 16)
    return _mm512_loadu_ps(x);
  if (n <= 0)
    return _mm512_setzero_ps();
  auto mask = static_cast<__mmask16>((1u << n) - 1u);
  return _mm512_maskz_loadu_ps(mask, x);
}

// lo's 16 floats then hi's, rounded to bfloat16 (nearest even).
__m512i to_bf16(__m512 hi, __m512 lo) {
  auto packed = _mm512_cvtne2ps_pbh(hi, lo);
  return reinterpret_cast<__m512i&>(packed);
}

// Two rows of B (16 columns each) as the 16 pairs (r0[j], r1[j]) in column
// order, rounded to bfloat16: the layout tdpbf16ps and vdpbf16ps read.
__m512i pair_rows(__m512 r0, __m512 r1) {
  // After unpacklo/unpackhi, each 128-bit lane holds two (r0, r1) pairs of
  // columns; these gather the pairs in column order.
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5,
                                          6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12,
                                           13, 14, 15, 28, 29, 30, 31);
  auto lo = _mm512_unpacklo_ps(r0, r1);
  auto hi = _mm512_unpackhi_ps(r0, r1);
  auto x0 = _mm512_permutex2var_ps(lo, first, hi);
  auto x1 = _mm512_permutex2var_ps(lo, second, hi);
  return to_bf16(x1, x0);
}

} // namespace
} // namespace syncfac::cpu
