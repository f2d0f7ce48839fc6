// load_model_file (runtime/model_file.hpp): the file read as an input
// file, the description measured against this machine, then built once.
// Apart from the reader so that the reader alone (fuzz_model_file) needs
// no model.

#include "runtime/model_file.hpp"

#include <filesystem>

#include "runtime/base/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/model.hpp"
#include "runtime/model_footprint.hpp"

namespace syncfac {

caf::expected<model_description> load_model_file(const std::string& path) {
  auto source = "model file '" + path + "'";
  auto text = read_input_file(path, source, max_description_bytes);
  if (!text)
    return text.error();
  return load_model_text(*text, source,
                         std::filesystem::path{path}.stem().string());
}

caf::expected<model_description>
load_model_text(const std::string& json_text, const std::string& source,
                const std::string& default_name) {
  auto desc = parse_model_description(json_text, source);
  if (!desc)
    return desc;
  if (desc->name.empty())
    desc->name = default_name;
  // Measure before building: model::make allocates every weight, and a
  // typo'd size must be refused by name rather than end in bad_alloc.
  if (auto err = check_model_buildable(*desc, source))
    return err;
  // Chain the shapes now: a model that cannot be built fails before any
  // data is read or file written.
  auto built = model::make(described_spec(*desc), 0);
  if (!built)
    return with_context(built.error(), source);
  return desc;
}

} // namespace syncfac
