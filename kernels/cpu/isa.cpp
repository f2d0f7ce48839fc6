#include "kernels/cpu/isa.hpp"

#include <atomic>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#  include <cpuid.h>
#  define SYNCFAC_ISA_X86 1
#endif

#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

struct cpu_features {
  bool avx2_fma = false; // AVX2 + FMA, ymm state saved by the OS
  bool avx512 = false;   // AVX-512 F/BW/VL/DQ + the above, zmm state saved
};

cpu_features detect() {
  cpu_features f;
#ifdef SYNCFAC_ISA_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return f;
  bool fma = (c & (1u << 12)) != 0;
  bool osxsave = (c & (1u << 27)) != 0;
  bool avx = (c & (1u << 28)) != 0;
  if (!osxsave || !avx)
    return f;
  // Which register state the OS saves on a context switch: a CPU feature
  // is usable only where its registers survive one.
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void) hi;
  bool ymm_state = (lo & 0x6u) == 0x6u;          // SSE, AVX
  bool zmm_state = (lo & 0xe6u) == 0xe6u;        // + opmask, ZMM_Hi256, Hi16
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return f;
  bool avx2 = (b & (1u << 5)) != 0;
  bool avx512 = (b & (1u << 16)) != 0      // F
                && (b & (1u << 17)) != 0   // DQ
                && (b & (1u << 30)) != 0   // BW
                && (b & (1u << 31)) != 0;  // VL
  f.avx2_fma = avx2 && fma && ymm_state;
  f.avx512 = f.avx2_fma && avx512 && zmm_state;
#endif
  return f;
}

// SYNCFAC_MAX_ISA=LEVEL: levels above LEVEL count as missing, to run (and
// test) a binary as on an older CPU. Read once.
struct level_cap {
  std::string value; // empty: no cap
  bool valid = true;
};

const level_cap& cap() {
  static const level_cap c = [] {
    level_cap r;
    if (const char* v = std::getenv("SYNCFAC_MAX_ISA"))
      r.value = v;
    r.valid = r.value.empty() || r.value == "generic" || r.value == "avx2"
              || r.value == "avx512";
    return r;
  }();
  return c;
}

int rank_of(const std::string& name) {
  return name == "avx512" ? 2 : name == "avx2" ? 1 : 0;
}

const cpu_features& features() {
  static const cpu_features f = [] {
    auto r = detect();
    if (!cap().value.empty() && cap().valid && rank_of(cap().value) < 2)
      r.avx512 = false;
    return r;
  }();
  return f;
}

// The built tables, lowest first.
std::vector<const isa_kernels*> built_tables() {
  std::vector<const isa_kernels*> result{&base::table};
#ifdef SYNCFAC_HAVE_AVX512_KERNELS
  result.push_back(&avx512::table);
#endif
  return result;
}

bool supported(const isa_kernels& t) {
  std::string name = t.name;
  if (name == "avx512")
    return features().avx512;
  // The baseline: this code runs, so the CPU has what it was built for.
  return true;
}

const isa_kernels* best_supported() {
  const isa_kernels* best = &base::table;
  for (auto* t : built_tables())
    if (supported(*t))
      best = t;
  return best;
}

std::atomic<const isa_kernels*>& active() {
  static std::atomic<const isa_kernels*> table{best_supported()};
  return table;
}

std::string joined(const std::vector<std::string>& names) {
  std::string result;
  for (const auto& n : names)
    result += (result.empty() ? "" : ", ") + n;
  return result;
}

} // namespace

std::vector<std::string> built_isas() {
  std::vector<std::string> result;
  for (auto* t : built_tables())
    result.emplace_back(t->name);
  return result;
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> result;
  for (auto* t : built_tables())
    if (supported(*t))
      result.emplace_back(t->name);
  return result;
}

namespace {

// The built table named `name` if this CPU and OS run it; the errors as
// select_isa documents them.
caf::expected<const isa_kernels*> runnable(const std::string& name) {
  if (!cap().valid)
    return make_error(ec::invalid_config,
                      "SYNCFAC_MAX_ISA=" + in_quotes(cap().value)
                        + ": unknown instruction-set level (expected "
                          "generic, avx2 or avx512)");
  for (auto* t : built_tables()) {
    if (name != t->name)
      continue;
    if (!supported(*t))
      return make_error(ec::unavailable,
                        "--isa " + in_quotes(name)
                          + ": this CPU or its OS lacks it"
                          + (cap().value.empty()
                               ? std::string{}
                               : " (or SYNCFAC_MAX_ISA=" + cap().value
                                   + " hides it)")
                          + "; supported here: " + joined(supported_isas()));
    return t;
  }
  return make_error(ec::unknown_name,
                    "--isa " + in_quotes(name)
                      + ": unknown instruction-set level (this build has: auto, "
                      + joined(built_isas()) + ")");
}

} // namespace

const std::string& isa_cap() noexcept {
  return cap().value;
}

caf::error isa_runs(const std::string& name) {
  auto t = runnable(name);
  return t ? caf::none : t.error();
}

caf::error select_isa(const std::string& name) {
  if (name == "auto") {
    if (!cap().valid)
      return runnable(name).error();
    active().store(best_supported());
    return caf::none;
  }
  auto t = runnable(name);
  if (!t)
    return t.error();
  active().store(*t);
  return caf::none;
}

const char* isa_name() noexcept {
  return active().load(std::memory_order_relaxed)->name;
}

const isa_kernels& isa_table() noexcept {
  return *active().load(std::memory_order_relaxed);
}

} // namespace syncfac::cpu
