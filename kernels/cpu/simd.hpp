#pragma once

// An 8-float vector for the hand-written micro-kernels. Release builds use
// AVX2/FMA (-march=x86-64-v3); any other target gets a plain-array version
// with the same interface, so the kernels are written once and a Debug build
// without -march still compiles and runs them.

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#  include <immintrin.h>
#  define SYNCFAC_SIMD_AVX2 1
#endif

namespace syncfac::cpu::simd {

constexpr int width = 8;

#ifdef SYNCFAC_SIMD_AVX2

using vf = __m256;

/// The first n (0..8) lanes of a vector.
struct lanes {
  __m256i mask;
};

inline lanes first_lanes(int n) noexcept {
  auto idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx)};
}

inline vf zero() noexcept {
  return _mm256_setzero_ps();
}

inline vf load(const float* p) noexcept {
  return _mm256_loadu_ps(p);
}

inline vf load(const float* p, lanes m) noexcept {
  return _mm256_maskload_ps(p, m.mask);
}

inline vf broadcast(const float* p) noexcept {
  return _mm256_broadcast_ss(p);
}

inline vf broadcast(float x) noexcept {
  return _mm256_set1_ps(x);
}

inline void store(float* p, vf x) noexcept {
  _mm256_storeu_ps(p, x);
}

inline void store(float* p, vf x, lanes m) noexcept {
  _mm256_maskstore_ps(p, m.mask, x);
}

inline vf fma(vf a, vf b, vf c) noexcept {
  return _mm256_fmadd_ps(a, b, c);
}

inline vf add(vf a, vf b) noexcept {
  return _mm256_add_ps(a, b);
}

/// a > b ? a : b per lane, so max(0, NaN) is NaN: a ReLU keeps NaNs
/// visible to the non-finite checks downstream.
inline vf max(vf a, vf b) noexcept {
  return _mm256_max_ps(a, b);
}

/// 8 int32 lanes, for arg-max indices.
using vi = __m256i;

/// Lanes start, start + 1, ..., start + 7.
inline vi iota(int32_t start) noexcept {
  return _mm256_add_epi32(_mm256_set1_epi32(start),
                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// All-ones lanes where a > b (false for NaN).
inline vf greater(vf a, vf b) noexcept {
  return _mm256_cmp_ps(a, b, _CMP_GT_OQ);
}

/// mask ? a : b per lane.
inline vf select(vf mask, vf a, vf b) noexcept {
  return _mm256_blendv_ps(b, a, mask);
}

inline vi select(vf mask, vi a, vi b) noexcept {
  return _mm256_castps_si256(_mm256_blendv_ps(
    _mm256_castsi256_ps(b), _mm256_castsi256_ps(a), mask));
}

inline void store(int32_t* p, vi x) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
}

#else

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

inline vf greater(vf a, vf b) noexcept {
  vf r;
  for (int i = 0; i < width; ++i)
    r.v[i] = a.v[i] > b.v[i] ? 1.0f : 0.0f;
  return r;
}

inline vf select(vf mask, vf a, vf b) noexcept {
  for (int i = 0; i < width; ++i)
    b.v[i] = mask.v[i] != 0.0f ? a.v[i] : b.v[i];
  return b;
}

inline vi select(vf mask, vi a, vi b) noexcept {
  for (int i = 0; i < width; ++i)
    b.v[i] = mask.v[i] != 0.0f ? a.v[i] : b.v[i];
  return b;
}

inline void store(int32_t* p, vi x) noexcept {
  for (int i = 0; i < width; ++i)
    p[i] = x.v[i];
}

#endif

} // namespace syncfac::cpu::simd
