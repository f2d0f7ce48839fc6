// libFuzzer target: the checkpoint reader's decoder (runtime/checkpoint/
// safetensors.hpp: decode_safetensors), which every checkpoint load goes
// through, on arbitrary file contents.
//
// What it accepts must keep its promises: every tensor holds as many
// finite values as its shape says, the sizes it reports add up to the
// input, and encoding the contents again and decoding that gives the same
// tensors and metadata. Refusals are fine; crashes, out-of-bounds reads
// and allocations the input cannot justify are not.

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/checkpoint/safetensors.hpp"
#include "tests/same_parameters.hpp"

namespace {

using namespace syncfac;
using syncfac::test::same;

[[noreturn]] void broken() {
  __builtin_trap();
}

void check(const safetensors_contents& x, size_t size) {
  if (8 + x.header_bytes + x.data_bytes != size)
    broken();
  for (const auto& t : x.tensors)
    if (t.value.size() != element_count(t.value.shape())
        || !t.value.all_finite())
      broken();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto x = decode_safetensors(data, size, "fuzz.safetensors");
  if (!x)
    return 0;
  check(*x, size);
  auto bytes = encode_safetensors(x->tensors, x->metadata);
  if (!bytes)
    broken(); // what we read, we must be able to write
  auto y = decode_safetensors(bytes->data(), bytes->size(), "re-encoded");
  if (!y || !same(x->tensors, y->tensors) || x->metadata != y->metadata)
    broken();
  return 0;
}
