#pragma once

// A small HTTP/1.1 server for /metrics and the status page: plain POSIX
// sockets on a thread of its own that serves every connection at once with
// poll(), so that a slow or idle client delays nobody. Each request is
// bounded in size (head, target) and time; at most max_connections are
// open, and a new one always gets in: the oldest connection already
// answered, else the oldest still sending its request, is closed for it.
// Every answer has Connection: close. Only GET and HEAD (http_request.hpp
// says what is refused with which status).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac::observe {

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Answers a GET of `path` (the query string cut off). Runs on the
/// server's thread; must not throw.
using http_handler = std::function<http_response(const std::string& path)>;

struct http_server_options {
  /// The address to listen on: an IPv4 or IPv6 literal ("[::1]" too) or a
  /// name such as localhost (its first address).
  std::string bind_address = "127.0.0.1";
  /// 0: a free port chosen by the system (see port()).
  uint16_t port = 0;
  /// A request line and headers longer than this get 431.
  size_t max_request_bytes = 8192;
  /// A request target longer than this gets 414.
  size_t max_target_bytes = 2048;
  /// Longest a client may take to send its request (then 408), and to take
  /// the answer.
  std::chrono::milliseconds io_timeout{5000};
  /// Open connections at most; one more closes the oldest connection that
  /// was answered already, else the oldest that has not sent a whole
  /// request yet.
  size_t max_connections = 128;
};

class http_server {
public:
  /// Listens and starts serving; ec::unavailable names the address and
  /// port when it cannot listen (the port in use), ec::invalid_argument a
  /// malformed address.
  static caf::expected<std::unique_ptr<http_server>>
  start(const http_server_options& opts, http_handler handler);

  /// Stops serving and joins the thread (an answer under way is finished
  /// or times out first).
  ~http_server();

  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The port it listens on.
  uint16_t port() const noexcept {
    return port_;
  }

  /// Requests answered so far.
  int64_t requests() const noexcept {
    return requests_.load();
  }

  /// Connections closed to make room for newer ones (max_connections).
  int64_t evicted() const noexcept {
    return evicted_.load();
  }

private:
  struct connection;

  http_server() = default;

  void serve();
  /// Reads what `c` sent; prepares its answer once there is one to give.
  void on_readable(connection& c);
  /// False once `c` is done with (answered and drained, or gone).
  bool on_writable(connection& c);
  void prepare_answer(connection& c, const http_response& r, bool body);

  http_server_options opts_;
  http_handler handler_;
  int listen_fd_ = -1;
  /// Written to on destruction to wake the poll of the serving thread.
  int wake_fds_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> evicted_{0};
  std::thread thread_;
};

/// The reason phrase of an HTTP status code ("Not Found").
const char* http_reason(int status);

} // namespace syncfac::observe
