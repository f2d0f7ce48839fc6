#include "kernels/cpu/bf16_gemm.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
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
#ifdef SYNCFAC_HAVE_AVX512_BF16_KERNELS
#  include "kernels/cpu/bf16_gemm_avx512bf16.hpp"
#endif

namespace syncfac::cpu {

namespace {

using kernel = void (*)(const float* a, const float* b, int64_t m, int64_t k,
                        int64_t n, float alpha, float* c);

// A CPU feature by its cpuid bit (leaf 7), under its /proc/cpuinfo name.
struct cpu_feature {
  const char* name;
  unsigned subleaf;
  int reg; // 0: eax, 3: edx
  unsigned bit;
};

constexpr cpu_feature amx_tile{"amx_tile", 0, 3, 24};
constexpr cpu_feature amx_bf16{"amx_bf16", 0, 3, 22};
constexpr cpu_feature avx512_bf16{"avx512_bf16", 1, 0, 5};

// Both backends pack their operands with AVX-512 (BF16): they need this
// level, as the kernels' level in use (kernels/cpu/isa.hpp).
constexpr const char* needed_level = "avx512";

// What a backend needs beyond the level, declared once for its check, its
// refusals and its call.
struct backend_needs {
  bf16_backend backend;
  const char* name;
  kernel run;             // nullptr: this build lacks it...
  const char* build_flag; // ...because its compiler lacked this flag
  std::array<const cpu_feature*, 3> features; // nullptr-terminated
  // AMX counts as the level above avx512: SYNCFAC_MAX_ISA=avx512 hides it,
  // so that an AMX machine runs as an AVX-512 one without it.
  bool above_avx512;
  // The OS must save the tile state and grant it to this process.
  bool tile_state;
};

#ifdef SYNCFAC_HAVE_AMX_KERNELS
constexpr kernel amx_kernel = amx::matmul_bf16;
#else
constexpr kernel amx_kernel = nullptr;
#endif
#ifdef SYNCFAC_HAVE_AVX512_BF16_KERNELS
constexpr kernel avx512_bf16_kernel = avx512bf16::matmul_bf16;
#else
constexpr kernel avx512_bf16_kernel = nullptr;
#endif

constexpr backend_needs backends[] = {
  {bf16_backend::amx, "AMX", amx_kernel, "-mamx-bf16",
   {&amx_tile, &amx_bf16, &avx512_bf16}, true, true},
  {bf16_backend::avx512_bf16, "AVX512-BF16", avx512_bf16_kernel,
   "-mavx512bf16", {&avx512_bf16, nullptr, nullptr}, false, false},
};

// Indexed by bf16_backend.
static_assert(backends[0].backend == bf16_backend::amx
              && backends[1].backend == bf16_backend::avx512_bf16);

const backend_needs& needs_of(bf16_backend backend) {
  return backends[static_cast<size_t>(backend)];
}

#if defined(__x86_64__)
bool cpu_has(const cpu_feature& f) {
  unsigned r[4] = {};
  if (!__get_cpuid_count(7, f.subleaf, &r[0], &r[1], &r[2], &r[3]))
    return false;
  return (r[f.reg] & (1u << f.bit)) != 0;
}

// Whether the OS saves the tile state and grants it to this process (asked
// for once: the grant covers every thread of the process).
std::string tile_state_missing() {
  // XCR0 bits 17-18: the OS saves the tile state...
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void) hi;
  if ((lo & 0x60000u) != 0x60000u)
    return "the OS does not save the AMX tile state (XCR0)";
  // ...and grants this process the tile data (Linux >= 5.16).
  constexpr long arch_req_xcomp_perm = 0x1023;
  constexpr long xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
    return "the OS refused the AMX tile state (arch_prctl "
           "ARCH_REQ_XCOMP_PERM; Linux >= 5.16 grants it)";
  return {};
}
#endif

// What `needs` lacks in this binary, CPU and OS beyond the level (empty:
// nothing).
std::string missing_here(const backend_needs& needs) {
  if (needs.run == nullptr)
    return std::string{"this build lacks it (its compiler lacked "}
           + needs.build_flag + ")";
#if !defined(__x86_64__)
  return "it is an x86-64 feature";
#else
  if (needs.above_avx512 && isa_cap() == "avx512")
    return "SYNCFAC_MAX_ISA=avx512 hides it";
  std::string lacking;
  for (const auto* f : needs.features)
    if (f != nullptr && !cpu_has(*f))
      lacking += std::string{" "} + f->name;
  if (!lacking.empty())
    return "the CPU lacks" + lacking;
  if (needs.tile_state)
    return tile_state_missing();
  return {};
#endif
}

const std::string& missing_once(bf16_backend backend) {
  static const std::array<std::string, std::size(backends)> missing = [] {
    std::array<std::string, std::size(backends)> m;
    for (size_t i = 0; i < m.size(); ++i)
      m[i] = missing_here(backends[i]);
    return m;
  }();
  return missing[static_cast<size_t>(backend)];
}

// Why the level the backends need is not in use (empty: it is), said of
// `who` ("it needs" or "they need").
std::string level_missing(const char* who) {
  // The CPU, the OS and SYNCFAC_MAX_ISA, which the process cannot change.
  static const std::string missing = [] {
    auto err = isa_runs(needed_level);
    return err ? render(err) : std::string{};
  }();
  if (!missing.empty())
    return std::string{who} + " the " + needed_level + " level: " + missing;
  // The level in use (--isa) may be below it on a CPU that runs it.
  const char* level = isa_name();
  if (std::strcmp(level, needed_level) != 0)
    return std::string{who} + " the " + needed_level
           + " level, and the kernels run at " + level + " (--isa)";
  return {};
}

// Empty when `backend` runs here now.
std::string missing_now(bf16_backend backend) {
  auto missing = level_missing("it needs");
  return missing.empty() ? missing_once(backend) : missing;
}

} // namespace

const char* to_string(bf16_backend backend) noexcept {
  return needs_of(backend).name;
}

caf::error bf16_backend_runs(bf16_backend backend) {
  auto missing = missing_now(backend);
  if (missing.empty())
    return caf::none;
  return make_error(ec::unavailable, std::string{"bfloat16 products on "}
                                       + to_string(backend) + ": " + missing);
}

caf::expected<bf16_backend> bf16_products_backend() {
  // Once for both backends, which need the same level.
  auto level = level_missing("they need");
  if (!level.empty())
    return make_error(ec::unavailable,
                      "bfloat16 products (AMX or AVX512-BF16): " + level);
  std::string why;
  for (const auto& needs : backends) {
    const auto& missing = missing_once(needs.backend);
    if (missing.empty())
      return needs.backend;
    why += std::string{why.empty() ? "" : "; "} + needs.name + ": " + missing;
  }
  return make_error(ec::unavailable,
                    "bfloat16 products: no backend runs here (" + why + ")");
}

void matmul_bf16(bf16_backend backend, const float* a, const float* b,
                 int64_t m, int64_t k, int64_t n, float alpha, float* c) {
  auto run = needs_of(backend).run;
  // bf16_backend_runs(backend) fails for a backend this build lacks: no
  // caller gets here with it.
  if (run == nullptr)
    std::abort();
  run(a, b, m, k, n, alpha, c);
}

} // namespace syncfac::cpu
