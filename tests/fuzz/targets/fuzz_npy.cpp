// libFuzzer target: the .npy reader (runtime/data/npy.*) and, on the same
// bytes, the .npz (zip) reader (runtime/data/npz.*) that holds .npy
// members, stored or deflated.
//
// What parse_npy accepts must keep its promises: a supported item size,
// exactly element_count() * item_size bytes of data, every element
// readable; and writing it and parsing that again gives the same array.
// Refusals are fine; crashes, out-of-bounds reads and allocations the
// input cannot justify (a 100-byte file claiming 8 GiB) are not.

#include <cstddef>
#include <cstdint>

#include "runtime/data/npy.hpp"
#include "runtime/data/npz.hpp"

namespace {

using namespace syncfac;

[[noreturn]] void broken() {
  __builtin_trap();
}

void check(const npy_array& x) {
  auto n = x.element_count();
  if (n < 0 || n > max_npy_elements)
    broken();
  if (x.item_size != 1 && x.item_size != 2 && x.item_size != 4
      && x.item_size != 8)
    broken();
  if (static_cast<int64_t>(x.data.size()) != n * x.item_size)
    broken();
  volatile double sink = 0;
  for (int64_t i = 0; i < n; ++i)
    sink = sink + x.as_double(i) + static_cast<double>(x.as_integer(i));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (auto x = parse_npy(data, size, "input")) {
    check(*x);
    auto again = write_npy(*x);
    auto y = parse_npy(again.data(), again.size(), "rewritten");
    if (!y || y->shape != x->shape || y->data != x->data
        || y->item_size != x->item_size || y->kind != x->kind)
      broken();
  }
  if (auto arrays = parse_npz(data, size, "input"))
    for (const auto& kv : *arrays)
      check(kv.second);
  return 0;
}
