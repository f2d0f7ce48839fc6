#include "kernels/cpu/bf16_gemm.hpp"

#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#  include <cpuid.h>
#  include <sys/syscall.h>
#  include <unistd.h>
#endif

#include "kernels/cpu/isa.hpp"
#include "runtime/base/error.hpp"

#ifdef SYNCFAC_HAVE_AMX_KERNELS
#  include "kernels/cpu/bf16_gemm_kernel.hpp"
#endif

namespace syncfac::cpu {

namespace {

// What amx_bf16_ready() found, decided once: empty when AMX runs here.
std::string amx_missing() {
#if !defined(SYNCFAC_HAVE_AMX_KERNELS)
  return "this build has no AMX kernels (its compiler lacked -mamx-bf16)";
#elif !defined(__x86_64__)
  return "AMX is an x86-64 feature";
#else
  // The kernel packs its operands with AVX-512 (BF16): the avx512 level
  // must run here, which also honours SYNCFAC_MAX_ISA.
  if (auto err = isa_runs("avx512"))
    return "it needs the avx512 level: " + render(err);
  // AMX counts as the level above avx512: capped there, the program runs
  // as on an AVX-512 CPU without AMX.
  if (isa_cap() == "avx512")
    return "SYNCFAC_MAX_ISA=avx512 hides it";
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return "the CPU does not report its extended features (cpuid 7)";
  bool tile = (d & (1u << 24)) != 0;
  bool bf16 = (d & (1u << 22)) != 0;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  bool avx512_bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)
                     && (a1 & (1u << 5)) != 0;
  if (!tile || !bf16 || !avx512_bf16)
    return std::string{"the CPU lacks"} + (tile ? "" : " amx_tile")
           + (bf16 ? "" : " amx_bf16") + (avx512_bf16 ? "" : " avx512_bf16");
  // The OS must save the tile state (XCR0 bits 17-18)...
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void) hi;
  if ((lo & 0x60000u) != 0x60000u)
    return "the OS does not save the AMX tile state (XCR0)";
  // ...and grant this process the tile data (Linux >= 5.16; the grant
  // covers every thread of the process).
  constexpr long arch_req_xcomp_perm = 0x1023;
  constexpr long xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
    return "the OS refused the AMX tile state (arch_prctl "
           "ARCH_REQ_XCOMP_PERM; Linux >= 5.16 grants it)";
  return {};
#endif
}

const std::string& amx_state() {
  static const std::string missing = amx_missing();
  return missing;
}

} // namespace

caf::error amx_bf16_ready() {
  const auto& missing = amx_state();
  if (missing.empty())
    return caf::none;
  return make_error(ec::unavailable,
                    "bfloat16 products on AMX: " + missing);
}

void matmul_bf16(const float* a, const float* b, int64_t m, int64_t k,
                 int64_t n, float alpha, float* c) {
#ifdef SYNCFAC_HAVE_AMX_KERNELS
  amx::matmul_bf16(a, b, m, k, n, alpha, c);
#else
  // amx_bf16_ready() fails in such a build: no caller gets here.
  (void) a, (void) b, (void) m, (void) k, (void) n, (void) alpha, (void) c;
  std::abort();
#endif
}

} // namespace syncfac::cpu
