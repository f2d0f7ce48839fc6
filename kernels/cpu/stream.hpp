#pragma once

// Cache-bypassing copies for outputs much larger than the caches. On the
// project machines a core sees ~8 MiB of L3, and a normal store to a line
// that is not cached first reads it from memory: streaming a ConvNet-sized
// activation gradient (6.4 MB) out saves that read.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu {

/// Outputs above this size are written with streaming stores.
constexpr int64_t stream_threshold_bytes = int64_t{4} << 20;

inline bool worth_streaming(int64_t floats) {
  return floats * 4 > stream_threshold_bytes;
}

/// dst[i] = src[i] for i < n, with non-temporal stores where possible.
inline void stream_copy(float* dst, const float* src, int64_t n) {
#ifdef SYNCFAC_SIMD_AVX2
  int64_t i = 0;
  // Streaming stores need 32-byte alignment: peel the head.
  while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 8 <= n; i += 8)
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i)
    dst[i] = src[i];
  // Streaming stores are weakly ordered; publish them before returning.
  _mm_sfence();
#else
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
#endif
}

} // namespace syncfac::cpu
