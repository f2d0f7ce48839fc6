#pragma once

// What this process may use: memory (the least of its cgroup's
// memory.max, the physical memory and RLIMIT_AS, less what it already
// uses) and threads. Runs are sized against these before anything is
// allocated or started (docs/robustness.md, "Sizes before allocation"),
// so that a typo'd size is refused by name instead of ending the process
// in std::bad_alloc or std::system_error.

#include <cstdint>
#include <string>

#include <caf/error.hpp>

namespace syncfac {

/// An amount and where it comes from ("physical memory", "cgroup
/// memory.max", "RLIMIT_AS (ulimit -v)", "threads-max").
struct host_limit {
  uint64_t amount = UINT64_MAX;
  std::string source;
};

/// The bytes this process may still allocate.
host_limit usable_memory();

/// The threads this process may still start.
host_limit usable_threads();

/// "7.3 TiB", "512 MiB", "100 bytes"; "more than 16 EiB" for UINT64_MAX
/// (a figure that saturated).
std::string byte_size(uint64_t bytes);

/// ec::invalid_config "<what> needs <bytes>, more than the <limit> this
/// process may use (<source>)" when `need` > limit.amount.
caf::error check_memory(uint64_t need, const std::string& what,
                        const host_limit& limit);

/// Overflow-safe arithmetic for sizes: UINT64_MAX stands for "too many"
/// and stays so.
inline uint64_t saturating_mul(uint64_t x, uint64_t y) {
  uint64_t out;
  return __builtin_mul_overflow(x, y, &out) ? UINT64_MAX : out;
}

inline uint64_t saturating_add(uint64_t x, uint64_t y) {
  uint64_t out;
  return __builtin_add_overflow(x, y, &out) ? UINT64_MAX : out;
}

} // namespace syncfac
