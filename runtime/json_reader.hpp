#pragma once

// The one reader of JSON documents that come from users: model
// descriptions (runtime/model_file), cluster files and TF_CONFIG
// (runtime/cluster/cluster_spec). The same rules everywhere
// (docs/robustness.md, "JSON input"): a size and a nesting limit, a key
// that occurs twice in one object refused (nlohmann keeps the last one
// silently), numbers beyond a double refused, and messages that quote at
// most a short excerpt of what was read.

#include <cstddef>
#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace syncfac {

struct json_limits {
  /// The longest text parsed.
  size_t max_bytes = size_t{16} << 20;
  /// The deepest nesting of objects and arrays (a model file needs 3).
  size_t max_depth = 64;
};

/// `text` as a JSON document (keys in the order read), or
/// ec::invalid_config: "not JSON: <parser's message>; the text:
/// <excerpt>", "key \"k\" appears twice in \"parent\"" (or "at the top
/// level"), "nested deeper than N levels", "N bytes, more than the M ...".
/// Messages do not begin with a source: the caller adds it.
caf::expected<nlohmann::ordered_json>
read_json(const std::string& text, const json_limits& limits = {});

/// `text` quoted for a message, cut to `max_chars` (then "..." follows);
/// bytes that are not UTF-8 become U+FFFD.
std::string json_excerpt(const std::string& text, size_t max_chars = 40);

/// json_excerpt without its quotes: escaped and cut as it, "..." after
/// a cut ("dropout", "xxxx...").
std::string text_excerpt(const std::string& text, size_t max_chars = 40);

/// "string \"16\"", "number 2.5", "array": what a value is, with the value
/// itself when it is a short scalar (a long string: its excerpt).
std::string json_describe(const nlohmann::ordered_json& value);

} // namespace syncfac
