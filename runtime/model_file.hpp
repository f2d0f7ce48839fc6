#pragma once

// Model files: a model description (runtime/model_description.hpp) as
// JSON, the format of examples/models/*.json and docs/models.md:
//
//   {"name": "tiny", "input_shape": [28, 28, 1], "init": "glorot",
//    "layers": [{"type": "conv2d", "filters": 8, "kernel": 3,
//                "padding": "SAME", "activation": "relu"},
//               {"type": "max_pool", "window": 2, "stride": 2},
//               {"type": "flatten"}, {"type": "dense", "units": 10}],
//    "loss": "softmax_cross_entropy"}
//
// Every problem is ec::invalid_config (ec::io_error for a file that cannot
// be read) with a message that begins with the file and names the layer
// by its index in "layers", the field and the value.

#include <string>

#include <caf/expected.hpp>

#include "runtime/model_description.hpp"

namespace syncfac {

/// Reads JSON text into a description and checks its fields
/// (check_fields); `source` begins every message. Does not chain shapes.
caf::expected<model_description>
parse_model_description(const std::string& json_text,
                        const std::string& source);

/// Reads and parses the file at `path`, then builds the model once so that
/// shapes that do not chain and a loss that does not fit the last layer
/// are refused here, before any training starts. A description without a
/// name takes the file's stem ("seeds_convnet").
caf::expected<model_description> load_model_file(const std::string& path);

/// load_model_file's checks on a description held as JSON text (the
/// Python module's syncfac.load_model): parsed, measured and built once;
/// `source` begins every message. A description without a name keeps
/// `default_name`.
caf::expected<model_description>
load_model_text(const std::string& json_text, const std::string& source,
                const std::string& default_name);

} // namespace syncfac
