#pragma once

// The float vector of the hand-written micro-kernels, at the instruction
// set the including file is compiled for: 16 floats (zmm) where AVX-512
// F/BW/VL/DQ is on (the AVX-512 kernel objects, kernels/cpu/isa.hpp), 8
// (ymm) with AVX2/FMA (Release builds: -march=x86-64-v3), and otherwise a
// plain-array version with the 8-wide interface, so the kernels are written
// once and a Debug build without -march still compiles and runs them.
//
// Each variant lives in its own inline namespace: the same inline function
// compiled for two instruction sets must not be one symbol, or the linker
// could hand the AVX-512 copy to code that runs on an AVX2-only CPU.

#include <cstdint>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) \
  && defined(__AVX512DQ__) && defined(__FMA__)
#  include <immintrin.h>
#  define SYNCFAC_SIMD_AVX512 1
#  define SYNCFAC_SIMD_NAMESPACE zmm
#elif defined(__AVX2__) && defined(__FMA__)
#  include <immintrin.h>
#  define SYNCFAC_SIMD_AVX2 1
#  define SYNCFAC_SIMD_NAMESPACE ymm
#else
#  define SYNCFAC_SIMD_NAMESPACE scalar
#endif

// The operations whose AVX-512 and AVX2 forms differ in the intrinsics
// prefix only (_mm512 or _mm256), written once: zero, load, broadcast of a
// value, store, fma, add, sub, and max (a > b ? a : b per lane, so max(0, NaN)
// is NaN: a ReLU keeps NaNs visible to the non-finite checks downstream).
#define SYNCFAC_SIMD_COMMON_OPS(P)                                         \
  inline vf zero() noexcept {                                               \
    return P##_setzero_ps();                                                \
  }                                                                         \
  inline vf load(const float* p) noexcept {                                 \
    return P##_loadu_ps(p);                                                 \
  }                                                                         \
  inline vf broadcast(float x) noexcept {                                   \
    return P##_set1_ps(x);                                                  \
  }                                                                         \
  inline void store(float* p, vf x) noexcept {                              \
    P##_storeu_ps(p, x);                                                    \
  }                                                                         \
  inline vf fma(vf a, vf b, vf c) noexcept {                                \
    return P##_fmadd_ps(a, b, c);                                           \
  }                                                                         \
  inline vf add(vf a, vf b) noexcept {                                      \
    return P##_add_ps(a, b);                                                \
  }                                                                         \
  inline vf sub(vf a, vf b) noexcept {                                      \
    return P##_sub_ps(a, b);                                                \
  }                                                                         \
  inline vf max(vf a, vf b) noexcept {                                      \
    return P##_max_ps(a, b);                                                \
  }

namespace syncfac::cpu::simd {
inline namespace SYNCFAC_SIMD_NAMESPACE {

#ifdef SYNCFAC_SIMD_AVX512

constexpr int width = 16;

using vf = __m512;

/// The first n (0..16) lanes of a vector.
struct lanes {
  __mmask16 mask;
};

inline lanes first_lanes(int n) noexcept {
  return {static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u)};
}

SYNCFAC_SIMD_COMMON_OPS(_mm512)

/// Masked-off lanes are zero and never read (no fault past a buffer).
inline vf load(const float* p, lanes m) noexcept {
  return _mm512_maskz_loadu_ps(m.mask, p);
}

inline vf broadcast(const float* p) noexcept {
  return _mm512_set1_ps(*p);
}

inline void store(float* p, vf x, lanes m) noexcept {
  _mm512_mask_storeu_ps(p, m.mask, x);
}

using vi = __m512i;

inline vi iota(int32_t start) noexcept {
  return _mm512_add_epi32(_mm512_set1_epi32(start),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                            11, 12, 13, 14, 15));
}

inline vi splat(int32_t x) noexcept {
  return _mm512_set1_epi32(x);
}

inline vi add(vi a, vi b) noexcept {
  return _mm512_add_epi32(a, b);
}

/// A lane mask: AVX-512's mask register (no conversion to a vector).
using vmask = __mmask16;

/// The lanes where a > b (false for NaN).
inline vmask greater(vf a, vf b) noexcept {
  return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ);
}

inline vf select(vmask mask, vf a, vf b) noexcept {
  return _mm512_mask_blend_ps(mask, b, a);
}

inline vi select(vmask mask, vi a, vi b) noexcept {
  return _mm512_mask_blend_epi32(mask, b, a);
}

inline void store(int32_t* p, vi x) noexcept {
  _mm512_storeu_si512(p, x);
}

#elif defined(SYNCFAC_SIMD_AVX2)

constexpr int width = 8;

using vf = __m256;

/// The first n (0..8) lanes of a vector.
struct lanes {
  __m256i mask;
};

inline lanes first_lanes(int n) noexcept {
  auto idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx)};
}

SYNCFAC_SIMD_COMMON_OPS(_mm256)

inline vf load(const float* p, lanes m) noexcept {
  return _mm256_maskload_ps(p, m.mask);
}

inline vf broadcast(const float* p) noexcept {
  return _mm256_broadcast_ss(p);
}

inline void store(float* p, vf x, lanes m) noexcept {
  _mm256_maskstore_ps(p, m.mask, x);
}

/// 8 int32 lanes, for arg-max indices.
using vi = __m256i;

/// Lanes start, start + 1, ..., start + 7.
inline vi iota(int32_t start) noexcept {
  return _mm256_add_epi32(_mm256_set1_epi32(start),
                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline vi splat(int32_t x) noexcept {
  return _mm256_set1_epi32(x);
}

inline vi add(vi a, vi b) noexcept {
  return _mm256_add_epi32(a, b);
}

/// A lane mask: all-ones lanes of a vector.
using vmask = vf;

/// All-ones lanes where a > b (false for NaN).
inline vmask greater(vf a, vf b) noexcept {
  return _mm256_cmp_ps(a, b, _CMP_GT_OQ);
}

/// mask ? a : b per lane.
inline vf select(vmask mask, vf a, vf b) noexcept {
  return _mm256_blendv_ps(b, a, mask);
}

inline vi select(vmask mask, vi a, vi b) noexcept {
  return _mm256_castps_si256(_mm256_blendv_ps(
    _mm256_castsi256_ps(b), _mm256_castsi256_ps(a), mask));
}

inline void store(int32_t* p, vi x) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
}

#else

constexpr int width = 8;

struct vf {
  float v[width];
};

struct lanes {
  int n;
};

inline lanes first_lanes(int n) noexcept {
  return {n};
}

inline vf zero() noexcept {
  return vf{};
}

inline vf load(const float* p) noexcept {
  vf r;
  for (int i = 0; i < width; ++i)
    r.v[i] = p[i];
  return r;
}

inline vf load(const float* p, lanes m) noexcept {
  vf r{};
  for (int i = 0; i < m.n; ++i)
    r.v[i] = p[i];
  return r;
}

inline vf broadcast(float x) noexcept {
  vf r;
  for (int i = 0; i < width; ++i)
    r.v[i] = x;
  return r;
}

inline vf broadcast(const float* p) noexcept {
  return broadcast(*p);
}

inline void store(float* p, vf x) noexcept {
  for (int i = 0; i < width; ++i)
    p[i] = x.v[i];
}

inline void store(float* p, vf x, lanes m) noexcept {
  for (int i = 0; i < m.n; ++i)
    p[i] = x.v[i];
}

inline vf fma(vf a, vf b, vf c) noexcept {
  for (int i = 0; i < width; ++i)
    c.v[i] += a.v[i] * b.v[i];
  return c;
}

inline vf add(vf a, vf b) noexcept {
  for (int i = 0; i < width; ++i)
    a.v[i] += b.v[i];
  return a;
}

inline vf sub(vf a, vf b) noexcept {
  for (int i = 0; i < width; ++i)
    a.v[i] -= b.v[i];
  return a;
}

inline vf max(vf a, vf b) noexcept {
  for (int i = 0; i < width; ++i)
    a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
  return a;
}

struct vi {
  int32_t v[width];
};

inline vi iota(int32_t start) noexcept {
  vi r;
  for (int i = 0; i < width; ++i)
    r.v[i] = start + i;
  return r;
}

inline vi splat(int32_t x) noexcept {
  vi r;
  for (int i = 0; i < width; ++i)
    r.v[i] = x;
  return r;
}

inline vi add(vi a, vi b) noexcept {
  for (int i = 0; i < width; ++i)
    a.v[i] += b.v[i];
  return a;
}

/// A lane mask: 1 or 0 per lane.
using vmask = vf;

inline vmask greater(vf a, vf b) noexcept {
  vf r;
  for (int i = 0; i < width; ++i)
    r.v[i] = a.v[i] > b.v[i] ? 1.0f : 0.0f;
  return r;
}

inline vf select(vmask mask, vf a, vf b) noexcept {
  for (int i = 0; i < width; ++i)
    b.v[i] = mask.v[i] != 0.0f ? a.v[i] : b.v[i];
  return b;
}

inline vi select(vmask mask, vi a, vi b) noexcept {
  for (int i = 0; i < width; ++i)
    b.v[i] = mask.v[i] != 0.0f ? a.v[i] : b.v[i];
  return b;
}

inline void store(int32_t* p, vi x) noexcept {
  for (int i = 0; i < width; ++i)
    p[i] = x.v[i];
}

#endif

} // namespace SYNCFAC_SIMD_NAMESPACE
} // namespace syncfac::cpu::simd

#undef SYNCFAC_SIMD_COMMON_OPS
