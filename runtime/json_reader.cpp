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

/// Follows the parse: the keys of every open object, the name of every
/// open container ("task", "layers[1]") and the nesting.
struct rule_checker {
  struct container {
    std::set<std::string> keys;
    std::string name;
    bool array = false;
    size_t next_index = 0; // of an array's next element
  };

  json_limits limits;
  std::vector<container> open;
  std::string last_key;

  /// The name of a value that starts now: its key, or its array's name
  /// and index.
  std::string element_name() {
    if (open.empty() || !open.back().array)
      return last_key;
    auto& parent = open.back();
    return parent.name + "[" + std::to_string(parent.next_index++) + "]";
  }

  bool operator()(int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        if (open.size() >= limits.max_depth)
          throw rule_broken{"nested deeper than "
                            + std::to_string(limits.max_depth) + " levels"};
        container c;
        c.name = element_name();
        c.array = event == json::parse_event_t::array_start;
        open.push_back(std::move(c));
        last_key.clear();
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty())
          open.pop_back();
        break;
      case json::parse_event_t::key:
        if (parsed.is_string()) {
          last_key = parsed.get<std::string>();
          if (!open.empty() && !open.back().keys.insert(last_key).second) {
            auto where = open.size() == 1
                           ? std::string{"at the top level"}
                           : "in " + json_excerpt(open.back().name, 60);
            throw rule_broken{"key " + json_excerpt(last_key)
                              + " appears twice " + where};
          }
        }
        break;
      case json::parse_event_t::value:
        element_name(); // counts an array's scalar element
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
