// libFuzzer target: the metrics/status server's request parser
// (runtime/observe/http_request.*) on arbitrary bytes, under the server's
// default limits and under small ones.
//
// Its contract: a refusal carries one of 400, 405, 413, 414, 431 and a
// reason; an accepted request is GET or HEAD with a path that starts with
// '/' and holds no query, fragment or control character; a head over the
// limit is never accepted; and a prefix of an accepted request is never
// accepted with another path (the server parses as bytes arrive).
// Crashes, hangs and sanitizer reports are bugs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/observe/http_request.hpp"

namespace {

using namespace syncfac::observe;

[[noreturn]] void broken() {
  __builtin_trap();
}

void check(std::string_view text, const http_limits& limits) {
  auto p = parse_http_request(text, limits);
  switch (p.what) {
    case http_parse::outcome::incomplete:
      if (text.size() > limits.max_head_bytes
          && text.find("\r\n\r\n") == std::string_view::npos)
        broken(); // an over-long head must be refused, not waited for
      return;
    case http_parse::outcome::refused:
      if (p.why.empty())
        broken();
      switch (p.status) {
        case 400: case 405: case 413: case 414: case 431: return;
        default: broken();
      }
    case http_parse::outcome::request: {
      if (p.method != "GET" && p.method != "HEAD")
        broken();
      if (p.path.empty() || p.path.front() != '/')
        broken();
      for (char c : p.path)
        if (c == '?' || c == '#' || static_cast<unsigned char>(c) <= 0x20)
          broken();
      auto end = text.find("\r\n\r\n");
      if (end == std::string_view::npos || end + 4 > limits.max_head_bytes)
        broken();
      return;
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text, http_limits{});
  http_limits small;
  small.max_head_bytes = 64;
  small.max_target_bytes = 16;
  check(text, small);
  // Byte by byte, as a slow client sends it: every prefix parses.
  for (size_t n = 0; n < text.size() && n < 256; ++n)
    check(text.substr(0, n), small);
  return 0;
}
