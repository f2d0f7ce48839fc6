#pragma once

// The AMX kernel behind kernels/cpu/bf16_gemm.hpp, in its own object built
// with the AMX flags; call it through cpu::matmul_bf16 only.

#include <cstdint>

namespace syncfac::cpu::amx {

void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c);

} // namespace syncfac::cpu::amx
