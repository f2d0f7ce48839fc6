#include "runtime/observe/http_server.hpp"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/error.hpp"

namespace syncfac::observe {

namespace {

using clock_type = std::chrono::steady_clock;

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    auto n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return; // the client went away or timed out: nothing more to do
    sent += static_cast<size_t>(n);
  }
}

std::string render_response(const http_response& r, bool with_body) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " "
                    + http_reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (with_body)
    out += r.body;
  return out;
}

} // namespace

const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Unknown";
  }
}

bool parse_request_line(const std::string& head, std::string& method,
                        std::string& path) {
  auto eol = head.find("\r\n");
  auto line = head.substr(0, eol);
  auto sp1 = line.find(' ');
  if (sp1 == std::string::npos || sp1 == 0)
    return false;
  auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || sp2 == sp1 + 1)
    return false;
  if (line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return false;
  method = line.substr(0, sp1);
  path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (path.empty() || path[0] != '/')
    return false;
  if (auto q = path.find_first_of("?#"); q != std::string::npos)
    path.resize(q);
  return true;
}

caf::expected<std::unique_ptr<http_server>>
http_server::start(const http_server_options& opts, http_handler handler) {
  auto where = opts.bind_address + ":" + std::to_string(opts.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(opts.port);
  if (inet_pton(AF_INET, opts.bind_address.c_str(), &addr.sin_addr) != 1)
    return make_error(ec::invalid_argument,
                      "metrics server: '" + opts.bind_address
                        + "' is not an IPv4 address");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return make_error(ec::unavailable, "metrics server: socket: "
                                         + std::string{std::strerror(errno)});
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || ::listen(fd, 16) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::close(fd);
    return make_error(ec::unavailable, "metrics server: cannot listen on "
                                         + where + " (--metrics_port "
                                         + std::to_string(opts.port)
                                         + "): " + why);
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<http_server> srv{new http_server};
  srv->opts_ = opts;
  srv->handler_ = std::move(handler);
  srv->listen_fd_ = fd;
  srv->port_ = ntohs(addr.sin_port);
  if (::pipe2(srv->wake_fds_, O_CLOEXEC) != 0) {
    ::close(fd);
    return make_error(ec::unavailable, "metrics server: pipe: "
                                         + std::string{std::strerror(errno)});
  }
  srv->thread_ = std::thread{[s = srv.get()] { s->serve(); }};
  return srv;
}

http_server::~http_server() {
  if (wake_fds_[1] >= 0) {
    char c = 0;
    [[maybe_unused]] auto n = ::write(wake_fds_[1], &c, 1);
  }
  if (thread_.joinable())
    thread_.join();
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]})
    if (fd >= 0)
      ::close(fd);
}

void http_server::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    if (fds[1].revents != 0)
      return;
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      // Out of descriptors (EMFILE) leaves the connection pending and the
      // socket readable: wait a little rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS
          || errno == ENOMEM)
        ::poll(nullptr, 0, 100);
      continue;
    }
    answer(conn);
    ::close(conn);
  }
}

void http_server::answer(int fd) {
  set_timeouts(fd, opts_.io_timeout);
  auto deadline = clock_type::now() + opts_.io_timeout;
  std::string head;
  char buf[2048];
  http_response bad;
  bool done = false;
  while (!done) {
    if (clock_type::now() >= deadline) {
      bad.status = 408;
      break;
    }
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        bad.status = 408;
      else
        return; // closed before a whole request: nothing to answer
      break;
    }
    head.append(buf, static_cast<size_t>(n));
    if (head.find("\r\n\r\n") != std::string::npos)
      done = true;
    else if (head.size() > opts_.max_request_bytes)
      break;
  }
  if (!done || head.find("\r\n\r\n") > opts_.max_request_bytes) {
    if (bad.status == 200)
      bad.status = 431;
    bad.body = std::string{http_reason(bad.status)} + "\n";
    send_all(fd, render_response(bad, true));
    return;
  }
  ++requests_;
  std::string method;
  std::string path;
  http_response res;
  if (!parse_request_line(head, method, path)) {
    res.status = 400;
    res.body = "malformed request line\n";
  } else if (method != "GET" && method != "HEAD") {
    res.status = 405;
    res.body = "only GET and HEAD\n";
  } else {
    try {
      res = handler_(path);
    } catch (const std::exception& e) {
      res = http_response{500, "text/plain; charset=utf-8",
                          std::string{"internal error: "} + e.what() + "\n"};
    }
  }
  send_all(fd, render_response(res, method != "HEAD"));
  // Let the client read everything before the close resets the
  // connection (unread request bytes would make close() send RST).
  ::shutdown(fd, SHUT_WR);
  while (clock_type::now() < deadline && ::recv(fd, buf, sizeof buf, 0) > 0) {
  }
}

} // namespace syncfac::observe
