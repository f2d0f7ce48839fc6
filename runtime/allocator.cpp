#include "runtime/allocator.hpp"

#include <malloc.h>

namespace syncfac {

namespace {

constexpr int mmap_threshold = 32 << 20;
constexpr int trim_threshold = 128 << 20;

} // namespace

bool keep_freed_memory() {
  bool ok = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1;
  return mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1 && ok;
}

} // namespace syncfac
