#pragma once

// The AVX512-BF16 kernel behind kernels/cpu/bf16_gemm.hpp (vdpbf16ps on
// zmm registers, for CPUs without AMX: AMD Zen 4 and later, Intel Cooper
// Lake), in its own object built with -mavx512bf16; call it through
// cpu::matmul_bf16 only.

#include <cstdint>

namespace syncfac::cpu::avx512bf16 {

void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c);

} // namespace syncfac::cpu::avx512bf16
