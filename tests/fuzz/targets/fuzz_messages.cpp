// libFuzzer target: the wire decoders of the messages a peer can send
// (CAF's binary_deserializer on our types, as a receiving node runs it).
//
// The first input byte picks the type, the rest is the message body. A
// decoder may refuse anything, but it must never crash, read out of bounds
// or allocate what the bytes cannot justify (ASan, UBSan and libFuzzer's
// malloc limit watch that), and what it accepts must keep the promises the
// receivers rely on:
//   - every tensor holds exactly as many values as its shape says (the
//     shard, covariance and inverse checks index by shape);
//   - encoding an accepted value and decoding it again gives the same
//     bytes (a codec that changes a value in transit would let a peer's
//     message mean one thing to the sender and another to us).
//     Except for a value with a non-finite float field: CAF 0.17 encodes
//     scalar floats with detail::pack754, which loops forever on +-Inf (it
//     halves the value until it drops below 2) and sends NaN as a finite
//     number. Decoding can produce Inf (the receivers refuse it:
//     check_inverse, the chief's diverged-loss check), so only the
//     re-encoding is skipped; see docs/robustness.md.
// What the receivers then check (unknown variables, shapes, NaN/Inf,
// sparse indices) is tested case by case in tests/bad_input.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "messages/cluster_messages.hpp"
#include "messages/kfac_messages.hpp"
#include "messages/row_pull.hpp"
#include "messages/sync_messages.hpp"

namespace {

using namespace syncfac;

/// A broken promise: libFuzzer reports it as a crash with the input.
[[noreturn]] void broken() {
  __builtin_trap();
}

void check(const tensor& x) {
  bool default_constructed = x.rank() == 0 && x.size() == 0;
  if (!default_constructed && x.size() != element_count(x.shape()))
    broken();
}

void check(const named_tensor& x) {
  check(x.value);
}

void check(const sparse_update& x) {
  check(x.rows);
}

void check(const layer_stats& x) {
  check(x.a);
  check(x.g);
}

void check(const layer_factors& x) {
  check(x.a);
  check(x.g);
}

void check(const layer_inverse& x) {
  check(x.a);
  check(x.g);
  check(x.a_values);
  check(x.g_values);
}

template <class T>
void check(const std::vector<T>& xs) {
  for (const auto& x : xs)
    check(x);
}

void check(const gradient_push& x) {
  check(x.dense);
  check(x.sparse);
}

void check(const stats_update& x) {
  check(x.layers);
}

void check(const factor_set& x) {
  check(x.layers);
}

void check(const inverse_set& x) {
  check(x.layers);
}

// Messages without tensors keep no shape promise.
void check(const node_hello&) {
}

void check(const node_info&) {
}

void check(const worker_report&) {
}

void check(const shard_params& x) {
  check(x.values);
  check(x.rows);
}

void check(const row_request&) {
}

/// Walks a value like a serializer and notes any float that CAF 0.17's
/// encoder cannot take: pack754 loops forever on +-Inf and turns NaN into
/// a finite number. Generic, so new message fields are covered.
class float_probe final : public caf::serializer {
public:
  bool non_finite = false;

  caf::error begin_object(uint16_t&, std::string&) override {
    return caf::none;
  }
  caf::error end_object() override {
    return caf::none;
  }
  caf::error begin_sequence(size_t&) override {
    return caf::none;
  }
  caf::error end_sequence() override {
    return caf::none;
  }
  caf::error apply_raw(size_t, void*) override {
    return caf::none;
  }

protected:
  caf::error apply_impl(int8_t&) override {
    return caf::none;
  }
  caf::error apply_impl(uint8_t&) override {
    return caf::none;
  }
  caf::error apply_impl(int16_t&) override {
    return caf::none;
  }
  caf::error apply_impl(uint16_t&) override {
    return caf::none;
  }
  caf::error apply_impl(int32_t&) override {
    return caf::none;
  }
  caf::error apply_impl(uint32_t&) override {
    return caf::none;
  }
  caf::error apply_impl(int64_t&) override {
    return caf::none;
  }
  caf::error apply_impl(uint64_t&) override {
    return caf::none;
  }
  caf::error apply_impl(float& x) override {
    return note(std::isfinite(x));
  }
  caf::error apply_impl(double& x) override {
    return note(std::isfinite(x));
  }
  caf::error apply_impl(long double& x) override {
    return note(std::isfinite(x));
  }
  caf::error apply_impl(std::string&) override {
    return caf::none;
  }
  caf::error apply_impl(std::u16string&) override {
    return caf::none;
  }
  caf::error apply_impl(std::u32string&) override {
    return caf::none;
  }

private:
  caf::error note(bool finite) {
    non_finite = non_finite || !finite;
    return caf::none;
  }
};

template <class T>
bool encodable(T& x) {
  float_probe probe;
  probe(x);
  return !probe.non_finite;
}

/// The receiving side's actor system (one per process, never torn down):
/// actor handles in a message (node_hello.node) resolve against it, as
/// they do on a node; a handle naming an unknown actor decodes as invalid.
caf::actor_system& receiver() {
  static auto* cfg = new caf::actor_system_config;
  static auto* sys = new caf::actor_system{*cfg};
  return *sys;
}

template <class T>
std::vector<char> encode(T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{receiver(), buf};
  if (sink(x))
    broken(); // whatever was decoded must encode
  return buf;
}

/// Decodes `T` from the bytes; checks what was accepted.
template <class T>
void decode(const char* data, size_t size) {
  T x;
  caf::binary_deserializer source{receiver(), data, size};
  if (source(x))
    return;
  check(x);
  if (!encodable(x))
    return;
  auto first = encode(x);
  T y;
  caf::binary_deserializer again{receiver(), first.data(), first.size()};
  if (again(y))
    broken();
  if (encode(y) != first)
    broken();
}

using decoder = void (*)(const char*, size_t);

constexpr decoder decoders[] = {
  decode<tensor>,        decode<gradient_push>, decode<stats_update>,
  decode<factor_set>,    decode<inverse_set>,   decode<node_hello>,
  decode<node_info>,     decode<worker_report>, decode<sparse_update>,
  decode<shard_params>,  decode<row_request>,
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1)
    return 0;
  constexpr size_t n = sizeof(decoders) / sizeof(decoders[0]);
  decoders[data[0] % n](reinterpret_cast<const char*>(data + 1), size - 1);
  return 0;
}
