#include "runtime/observe/http_request.hpp"

#include <cctype>

namespace syncfac::observe {

namespace {

http_parse refuse(int status, std::string why) {
  http_parse p;
  p.what = http_parse::outcome::refused;
  p.status = status;
  p.why = std::move(why);
  return p;
}

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0
         || std::string_view{"!#$%&'*+-.^_`|~"}.find(c)
              != std::string_view::npos;
}

bool equals_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

} // namespace

http_parse parse_http_request(std::string_view received,
                              const http_limits& limits) {
  // The request line: METHOD SP TARGET SP HTTP/x.y. A target longer than
  // the limit is 414 as soon as it shows, whole line or not.
  auto line_end = received.find("\r\n");
  auto line = received.substr(0, line_end);
  auto sp1 = line.find(' ');
  if (sp1 != std::string_view::npos) {
    auto rest = line.substr(sp1 + 1);
    auto target_len = rest.find(' ');
    if ((target_len == std::string_view::npos ? rest.size() : target_len)
        > limits.max_target_bytes)
      return refuse(414, "request target over "
                           + std::to_string(limits.max_target_bytes)
                           + " bytes");
  } else if (line.size() > 32) {
    return refuse(400, "no method in the request line");
  }
  auto head_end = received.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (received.size() > limits.max_head_bytes)
      return refuse(431, "request head over "
                           + std::to_string(limits.max_head_bytes)
                           + " bytes");
    return {};
  }
  if (head_end + 4 > limits.max_head_bytes)
    return refuse(431, "request head over "
                         + std::to_string(limits.max_head_bytes) + " bytes");
  auto sp2 = line.find(' ', sp1 == std::string_view::npos ? 0 : sp1 + 1);
  if (sp1 == std::string_view::npos || sp1 == 0
      || sp2 == std::string_view::npos || sp2 == sp1 + 1)
    return refuse(400, "malformed request line");
  auto method = line.substr(0, sp1);
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto version = line.substr(sp2 + 1);
  for (char c : method)
    if (!is_token_char(c))
      return refuse(400, "malformed method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return refuse(400, "not HTTP/1.0 or HTTP/1.1");
  if (target.empty() || target.front() != '/')
    return refuse(400, "the target is not an absolute path");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return refuse(400, "control character in the target");
  // Headers: NAME ":" VALUE, no obsolete line folding. A body (a length
  // above 0, any transfer coding) is not taken: 413.
  auto headers = received.substr(line_end + 2, head_end + 2 - (line_end + 2));
  while (!headers.empty()) {
    auto eol = headers.find("\r\n");
    auto field = headers.substr(0, eol);
    headers.remove_prefix(eol + 2);
    auto colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return refuse(400, "malformed header line");
    auto name = field.substr(0, colon);
    for (char c : name)
      if (!is_token_char(c))
        return refuse(400, "malformed header name");
    auto value = trimmed(field.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return refuse(400, "control character in a header value");
    if (equals_nocase(name, "Transfer-Encoding"))
      return refuse(413, "request bodies are not accepted");
    if (equals_nocase(name, "Content-Length")) {
      if (value.empty())
        return refuse(400, "empty Content-Length");
      for (char c : value)
        if (c < '0' || c > '9')
          return refuse(400, "malformed Content-Length");
      if (value.find_first_not_of('0') != std::string_view::npos)
        return refuse(413, "request bodies are not accepted");
    }
  }
  if (method != "GET" && method != "HEAD")
    return refuse(405, "only GET and HEAD");
  http_parse p;
  p.what = http_parse::outcome::request;
  p.method = std::string{method};
  p.path = std::string{target.substr(0, target.find_first_of("?#"))};
  return p;
}

std::string http_url(const std::string& host, uint16_t port,
                     const std::string& path) {
  bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return "http://" + (v6 ? "[" + host + "]" : host) + ":"
         + std::to_string(port) + path;
}

} // namespace syncfac::observe
