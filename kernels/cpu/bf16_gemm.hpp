#pragma once

// Matrix products in bfloat16 on the CPU's AMX tiles (docs/kernels.md,
// "bfloat16 products on AMX"): the inputs rounded to bfloat16 (nearest
// even), the products summed in float. K-FAC's preconditioning is two
// products of the gradient with the factors' inverses every step; on a CPU
// with AMX they run at ~4x the FP32 FMA peak, with ~3 significant digits
// of input precision, which an approximate curvature does not need more of.

#include <cstdint>

#include <caf/error.hpp>

namespace syncfac::cpu {

/// Whether this binary has the AMX kernels and this CPU and OS run them:
/// cpuid's AMX-TILE, AMX-BF16 and AVX512-BF16 bits, and the OS's grant of
/// the tile state to this process (asked for once, on the first call). An
/// error is ec::unavailable naming what is missing.
caf::error amx_bf16_ready();

/// c[m, n] = alpha · a[m, k] · b[k, n] (row-major, leading dimensions k, n
/// and n), the inputs rounded to bfloat16, on the calling thread's tiles.
/// Call only after amx_bf16_ready() succeeded; a, b and c must not overlap.
void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c);

} // namespace syncfac::cpu
