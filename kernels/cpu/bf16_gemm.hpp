#pragma once

// Matrix products in bfloat16 on the CPU (docs/kernels.md, "bfloat16
// products"): the inputs rounded to bfloat16 (nearest even), the products
// summed in float. K-FAC's preconditioning is two products of the gradient
// with the factors' inverses every step; they run on AMX tiles (~4x the
// FP32 FMA peak) or, on CPUs with AVX512-BF16 but no AMX (AMD Zen 4, Intel
// Cooper Lake), on vdpbf16ps (two products per float lane: ~2x the FP32
// FMA peak), with ~3 significant digits of input precision, which an
// approximate curvature does not need more of.

#include <cstdint>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac::cpu {

/// The kernels that compute matmul_bf16, best first. Both round the inputs
/// with the same instruction, so they differ only in the order of the sums.
enum class bf16_backend : uint8_t {
  /// AMX tiles (amx_tile, amx_bf16, and the OS's grant of the tile state).
  amx,
  /// vdpbf16ps on zmm registers (avx512_bf16).
  avx512_bf16,
};

/// "AMX" or "AVX512-BF16".
const char* to_string(bf16_backend backend) noexcept;

/// Whether this binary has `backend` and this CPU and OS run it at the
/// instruction-set level in use: none, or ec::unavailable naming the
/// backend and what is missing (a build without its kernel, the avx512
/// level that SYNCFAC_MAX_ISA or --isa leave out, a CPU feature, the OS's
/// tile state). The CPU and OS are asked once per backend.
caf::error bf16_backend_runs(bf16_backend backend);

/// The best backend that runs here, or ec::unavailable naming, for each
/// backend, what is missing.
caf::expected<bf16_backend> bf16_products_backend();

/// c[m, n] = alpha · a[m, k] · b[k, n] (row-major, leading dimensions k, n
/// and n), the inputs rounded to bfloat16, on the calling thread with
/// `backend`. Call only after bf16_backend_runs(backend) succeeded; a, b
/// and c must not overlap.
void matmul_bf16(bf16_backend backend, const float* a, const float* b,
                 int64_t m, int64_t k, int64_t n, float alpha, float* c);

} // namespace syncfac::cpu
