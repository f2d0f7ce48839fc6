#pragma once

// Which instruction-set level the CPU kernels run at (docs/kernels.md,
// "Instruction-set levels"). One binary carries the baseline kernels (the
// build's flags; Release: x86-64-v3, "avx2") and, where the compiler
// could build them, AVX-512 ones ("avx512"); at start-up the best level
// the CPU and the OS support is chosen (cpuid, and xgetbv for the OS's
// saving of the ymm/zmm state), and --isa can force one the CPU has. The
// environment variable SYNCFAC_MAX_ISA=generic|avx2|avx512 hides the levels
// above it, as if the CPU lacked them (to run as on an older CPU).

#include <string>
#include <vector>

#include <caf/error.hpp>

#include "kernels/cpu/isa_kernels.hpp"

namespace syncfac::cpu {

/// The levels this binary has kernels for, lowest first.
std::vector<std::string> built_isas();

/// The built levels this CPU and OS can run, lowest first; "auto" picks the
/// last one.
std::vector<std::string> supported_isas();

/// Makes `name` the level of every CPU kernel from now on: "auto" (the best
/// supported level) or a name of built_isas(). A name not built is
/// ec::unknown_name, a level this CPU or OS lacks ec::unavailable, each
/// naming the value and the levels there are, and a SYNCFAC_MAX_ISA that
/// names no level ec::invalid_config; nothing changes on error.
/// Call it before kernels run (a program's start-up): a kernel running
/// meanwhile finishes at the level it started with.
caf::error select_isa(const std::string& name);

/// Whether this binary has level `name` and this CPU and OS run it (a
/// SYNCFAC_MAX_ISA below it hides it): none, or select_isa's error for it,
/// naming what is missing. Nothing changes.
caf::error isa_runs(const std::string& name);

/// SYNCFAC_MAX_ISA as given ("" without a cap): the levels above it count
/// as missing. "avx512" hides AMX as well (kernels/cpu/bf16_gemm.hpp), so
/// that an AMX machine runs as an AVX-512 one without it.
const std::string& isa_cap() noexcept;

/// The level now in use ("avx2", "avx512" or "generic").
const char* isa_name() noexcept;

/// The kernels of the level now in use.
const isa_kernels& isa_table() noexcept;

} // namespace syncfac::cpu
