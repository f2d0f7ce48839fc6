// libFuzzer target: the cluster file parser (runtime/cluster/
// cluster_spec.*) on arbitrary text, and the host:port and job:index
// parsers it uses.
//
// A spec that parse() accepts is valid by its contract, and its to_json()
// parses back to an equal spec (docs/cluster.md); an accepted address or
// task prints back to itself. Refusals are fine; crashes, uncaught
// exceptions (nlohmann's) and hangs are not.

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cluster/cluster_spec.hpp"

namespace {

using namespace syncfac;

[[noreturn]] void broken() {
  __builtin_trap();
}

void whole_file(const std::string& text) {
  auto spec = cluster_spec::parse(text, "fuzz.json");
  if (!spec)
    return;
  if (spec->validate())
    broken();
  auto again = cluster_spec::parse(spec->to_json(), "fuzz.json");
  if (!again || !(*again == *spec))
    broken();
}

void address(const std::string& text) {
  auto hp = host_port::parse(text);
  if (!hp)
    return;
  auto again = host_port::parse(hp->str());
  if (!again || *again != *hp)
    broken();
}

void task(const std::string& text) {
  auto t = task_id::parse(text);
  if (!t)
    return;
  auto again = task_id::parse(t->str());
  if (!again || *again != *t)
    broken();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  whole_file(text);
  address(text);
  task(text);
  return 0;
}
