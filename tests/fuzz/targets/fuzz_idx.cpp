// libFuzzer target: the IDX reader (runtime/data/idx.*) on arbitrary file
// contents, plain or gzip-compressed (the reader decides by the magic
// bytes, as it does for real data files).
//
// read_idx takes a path, so each input is written to a scratch file first
// (in /dev/shm when there is one: no disk I/O per run). What it accepts
// must keep its promises: 1 to 4 dims, each >= 1, exactly element_count()
// bytes of data; and writing the array and reading it back gives the same
// array. Refusals are fine; crashes, out-of-bounds reads and allocations
// the input cannot justify (a 20-byte file claiming 2 GiB) are not.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

#include "runtime/data/idx.hpp"

namespace {

using namespace syncfac;

[[noreturn]] void broken() {
  __builtin_trap();
}

std::string scratch(const char* what) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string{dir} + "/syncfac-fuzz-idx-" + std::to_string(getpid())
         + "-" + what;
}

const std::string input_path = scratch("input");
const std::string output_path = scratch("output");

struct cleanup {
  ~cleanup() {
    std::remove(input_path.c_str());
    std::remove(output_path.c_str());
  }
} at_exit;

bool write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

void check(const idx_array& x) {
  if (x.dims.empty() || x.dims.size() > 4 || x.type != idx_ubyte)
    broken();
  for (auto d : x.dims)
    if (d < 1)
      broken();
  if (static_cast<int64_t>(x.data.size()) != x.element_count())
    broken();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!write_file(input_path, data, size))
    std::abort(); // the harness itself failed: no finding
  auto x = read_idx(input_path);
  if (!x)
    return 0;
  check(*x);
  if (write_idx(output_path, *x, false))
    broken(); // an accepted array must be writable
  auto y = read_idx(output_path);
  if (!y || y->dims != x->dims || y->data != x->data)
    broken();
  return 0;
}
