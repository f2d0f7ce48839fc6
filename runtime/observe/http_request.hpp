#pragma once

// What the metrics/status server makes of the bytes a client has sent so
// far (pure, fuzzed by tests/fuzz/targets/fuzz_http_request.cpp): wait for
// more, answer this request, or refuse it with a status code. Only GET
// and HEAD without a body; a request line, target and head bounded in
// size (docs/observability.md, "Prometheus").

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace syncfac::observe {

struct http_limits {
  /// Request line plus headers; longer: 431.
  size_t max_head_bytes = 8192;
  /// The request target (path and query); longer: 414.
  size_t max_target_bytes = 2048;
};

struct http_parse {
  enum class outcome {
    /// Not a whole head yet, nothing wrong so far.
    incomplete,
    /// A whole GET or HEAD: method and path (query and fragment cut off).
    request,
    /// Refused: answer `status` (400, 405, 413, 414, 431) with `why`.
    refused,
  };
  outcome what = outcome::incomplete;
  int status = 0;
  std::string why;
  std::string method;
  std::string path;
};

/// The received bytes' meaning under `limits`.
http_parse parse_http_request(std::string_view received,
                              const http_limits& limits = {});

/// "http://HOST:PORT/PATH" for a --metrics_bind address, an IPv6 one in
/// brackets ("http://[::1]:9400/metrics"), as a browser takes it.
std::string http_url(const std::string& host, uint16_t port,
                     const std::string& path);

} // namespace syncfac::observe
