// libFuzzer target: the model-file reader (runtime/model_file.*) on
// arbitrary text, through the project's JSON reader (runtime/json_reader.*),
// and the measure of what a description would allocate
// (runtime/model_footprint.*), which runs before anything is built.
//
// A description parse_model_description accepts passes check_fields, is
// measured without overflow or a crash, and its to_json() reads back to a
// description that prints the same (docs/models.md). Refusals are fine;
// crashes, uncaught exceptions (nlohmann's) and hangs are not.

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/model_file.hpp"
#include "runtime/model_footprint.hpp"

namespace {

using namespace syncfac;

[[noreturn]] void broken() {
  __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  auto desc = parse_model_description(text, "fuzz.json");
  if (!desc)
    return 0;
  if (check_fields(*desc, "fuzz.json"))
    broken();
  auto fp = measure_model(*desc, "fuzz.json");
  if (fp && fp->largest_parameters > fp->parameters)
    broken();
  auto again = parse_model_description(desc->to_json(), "fuzz.json");
  if (!again || again->to_json() != desc->to_json())
    broken();
  return 0;
}
