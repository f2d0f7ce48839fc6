#include "runtime/json_reader.hpp"

#include <memory>
#include <set>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/json.hpp"

namespace syncfac {

namespace {

using json = nlohmann::ordered_json;

/// Thrown from the parser's callback to stop at the first broken rule
/// (the callback cannot stop the parser otherwise).
struct rule_broken {
  std::string what;
};

/// Follows the parse: the keys of every open object and the nesting.
struct rule_checker {
  json_limits limits;
  std::vector<std::set<std::string>> open_keys;
  std::vector<std::string> open_names; // the key that opened each container
  std::string last_key;

  bool operator()(int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (open_keys.size() >= limits.max_depth)
          throw rule_broken{"nested deeper than "
                            + std::to_string(limits.max_depth) + " levels"};
        open_keys.emplace_back();
        open_names.push_back(last_key);
        last_key.clear();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open_keys.empty()) {
          open_keys.pop_back();
          open_names.pop_back();
        }
        break;
      case json::parse_event_t::key:
        if (parsed.is_string()) {
          last_key = parsed.get<std::string>();
          if (!open_keys.empty()
              && !open_keys.back().insert(last_key).second) {
            auto where = open_names.back().empty()
                           ? std::string{open_keys.size() == 1
                                           ? "at the top level"
                                           : "in an unnamed object"}
                           : "in " + json_excerpt(open_names.back());
            throw rule_broken{"key " + json_excerpt(last_key)
                              + " appears twice " + where};
          }
        }
        break;
      case json::parse_event_t::value:
        last_key.clear();
        break;
    }
    return true;
  }
};

} // namespace

std::string json_excerpt(const std::string& text, size_t max_chars) {
  // Cut at a character boundary so that a UTF-8 sequence is not split.
  size_t cut = text.size();
  if (cut > max_chars) {
    cut = max_chars;
    while (cut > 0
           && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;
  }
  auto quoted = json(text.substr(0, cut))
                  .dump(-1, ' ', false, json::error_handler_t::replace);
  return cut < text.size() ? quoted + "..." : quoted;
}

std::string text_excerpt(const std::string& text, size_t max_chars) {
  auto quoted = json_excerpt(text, max_chars); // "…" or "…"...
  bool cut = quoted.size() >= 5
             && quoted.compare(quoted.size() - 4, 4, "\"...") == 0;
  return quoted.substr(1, quoted.size() - (cut ? 5 : 2))
         + (cut ? "..." : "");
}

std::string json_describe(const json& value) {
  std::string kind = value.type_name();
  if (value.is_string())
    return kind + " " + json_excerpt(value.get_ref<const std::string&>());
  if (value.is_primitive() && !value.is_null())
    kind += " " + value.dump();
  return kind;
}

caf::expected<json> read_json(const std::string& text,
                              const json_limits& limits) {
  auto bad = [](std::string what) {
    return make_error(ec::invalid_config, std::move(what));
  };
  if (text.size() > limits.max_bytes)
    return bad(std::to_string(text.size()) + " bytes of JSON, more than the "
               + std::to_string(limits.max_bytes) + " read");
  auto checker = std::make_shared<rule_checker>();
  checker->limits = limits;
  try {
    return json::parse(text,
                       [checker](int depth, json::parse_event_t event,
                                 json& parsed) {
                         return (*checker)(depth, event, parsed);
                       });
  } catch (const rule_broken& broken) {
    return bad(broken.what);
  } catch (const json::exception& err) {
    // parse_error, and also out_of_range for a number too large for a
    // double (1e400).
    return bad("not JSON: " + json_error_text(err) + "; the text: "
               + json_excerpt(text, 120));
  }
}

} // namespace syncfac
