#include "runtime/observe/http_server.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
#include "runtime/observe/http_request.hpp"

namespace syncfac::observe {

namespace {

using clock_type = std::chrono::steady_clock;

void network_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/// The drain after an answer (unread request bytes would make close()
/// send RST before the client read the answer) lasts at most this long.
constexpr std::chrono::milliseconds drain_limit{1000};

std::string render_response(const http_response& r, bool with_body) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " "
                    + http_reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  if (r.status == 405)
    out += "Allow: GET, HEAD\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (with_body)
    out += r.body;
  return out;
}

} // namespace

struct http_server::connection {
  enum class phase { reading, writing, draining };
  int fd = -1;
  phase now = phase::reading;
  clock_type::time_point deadline;
  std::string in;
  std::string out;
  size_t sent = 0;

  ~connection() {
    if (fd >= 0)
      ::close(fd);
  }
};

const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Unknown";
  }
}

caf::expected<std::unique_ptr<http_server>>
http_server::start(const http_server_options& opts, http_handler handler) {
  auto where = opts.bind_address + ":" + std::to_string(opts.port);
  auto host = opts.bind_address;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hint{};
  hint.ai_family = AF_UNSPEC;
  hint.ai_socktype = SOCK_STREAM;
  hint.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  auto port_text = std::to_string(opts.port);
  if (host.empty()
      || getaddrinfo(host.c_str(), port_text.c_str(), &hint, &found) != 0
      || found == nullptr)
    return make_error(ec::invalid_argument,
                      "metrics server: '" + opts.bind_address
                        + "' is no IPv4 or IPv6 address nor a name that "
                          "resolves (--metrics_bind)");
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard{found,
                                                           freeaddrinfo};
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return make_error(ec::unavailable, "metrics server: socket: "
                                         + std::string{std::strerror(errno)});
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (found->ai_family == AF_INET6) // only the address asked for
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0
      || ::listen(fd, SOMAXCONN) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::close(fd);
    return make_error(ec::unavailable, "metrics server: cannot listen on "
                                         + where + " (--metrics_port "
                                         + std::to_string(opts.port)
                                         + "): " + why);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  network_nonblocking(fd);
  std::unique_ptr<http_server> srv{new http_server};
  srv->opts_ = opts;
  srv->handler_ = std::move(handler);
  srv->listen_fd_ = fd;
  srv->port_ = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(srv->wake_fds_, O_CLOEXEC) != 0) {
    ::close(fd);
    srv->listen_fd_ = -1;
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
  using phase = connection::phase;
  std::vector<std::unique_ptr<connection>> open; // in the order accepted
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fds_[0], POLLIN, 0});
    auto now = clock_type::now();
    auto next = clock_type::time_point::max();
    for (auto& c : open) {
      short events = c->now == phase::writing ? POLLOUT : POLLIN;
      fds.push_back({c->fd, events, 0});
      next = std::min(next, c->deadline);
    }
    int wait_ms = -1;
    if (next != clock_type::time_point::max())
      wait_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now)
                 .count()
             + 1));
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    if (fds[1].revents != 0)
      return; // the destructor: the connections close with `open`
    now = clock_type::now();
    for (size_t i = 0; i < open.size(); ++i) {
      auto& c = *open[i];
      auto revents = fds[i + 2].revents;
      bool keep = true;
      if (revents != 0) {
        if (c.now == phase::reading)
          on_readable(c);
        else
          keep = on_writable(c);
      }
      if (keep && c.fd >= 0 && clock_type::now() >= c.deadline) {
        if (c.now == phase::reading) {
          // Too slow to send a request: 408, then close.
          http_response r{408, "text/plain; charset=utf-8",
                          "request timeout\n"};
          prepare_answer(c, r, true);
          keep = on_writable(c);
        } else {
          keep = false; // too slow to take its answer, or drained enough
        }
      }
      if (!keep || c.fd < 0)
        open[i].reset();
    }
    open.erase(std::remove(open.begin(), open.end(), nullptr), open.end());
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // Out of descriptors (EMFILE) leaves the connection pending and
        // the socket readable: wait a little rather than spin.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS
            || errno == ENOMEM)
          ::poll(nullptr, 0, 100);
        break;
      }
      auto c = std::make_unique<connection>();
      c->fd = fd;
      c->deadline = clock_type::now() + opts_.io_timeout;
      if (open.size() >= std::max<size_t>(opts_.max_connections, 1)) {
        // Full: room is made, never refused, so that no set of clients can
        // hold the server. First goes the oldest connection already
        // answered (waiting for its client to close), else the oldest still
        // sending its request, else the oldest of all.
        auto oldest_in = [&](phase p) {
          return std::find_if(open.begin(), open.end(),
                              [p](auto& x) { return x->now == p; });
        };
        auto victim = oldest_in(phase::draining);
        if (victim == open.end())
          victim = oldest_in(phase::reading);
        if (victim == open.end())
          victim = open.begin();
        open.erase(victim);
        ++evicted_;
      }
      open.push_back(std::move(c));
    }
  }
}

void http_server::on_readable(connection& c) {
  using phase = connection::phase;
  char buf[16384];
  for (;;) {
    auto n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK
                   && errno != EINTR)) {
      ::close(c.fd); // gone before a whole request: nothing to answer
      c.fd = -1;
      return;
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return; // everything read for now
    }
    c.in.append(buf, static_cast<size_t>(n));
    http_limits limits;
    limits.max_head_bytes = opts_.max_request_bytes;
    limits.max_target_bytes = opts_.max_target_bytes;
    auto parsed = parse_http_request(c.in, limits);
    if (parsed.what == http_parse::outcome::incomplete)
      continue;
    ++requests_;
    if (parsed.what == http_parse::outcome::refused) {
      prepare_answer(c,
                     http_response{parsed.status, "text/plain; charset=utf-8",
                                   parsed.why + "\n"},
                     true);
    } else {
      http_response res;
      try {
        res = handler_(parsed.path);
      } catch (const std::exception& e) {
        res = http_response{500, "text/plain; charset=utf-8",
                            std::string{"internal error: "} + e.what()
                              + "\n"};
      }
      prepare_answer(c, res, parsed.method != "HEAD");
    }
    c.in.clear();
    c.in.shrink_to_fit();
    if (c.now == phase::writing && !on_writable(c)) {
      ::close(c.fd);
      c.fd = -1;
    }
    return;
  }
}

void http_server::prepare_answer(connection& c, const http_response& r,
                                 bool body) {
  c.out = render_response(r, body);
  c.sent = 0;
  c.now = connection::phase::writing;
  c.deadline = clock_type::now() + opts_.io_timeout;
}

bool http_server::on_writable(connection& c) {
  using phase = connection::phase;
  if (c.now == phase::draining) {
    // What the client still sends after its answer is read and dropped
    // until it closes (or drain_limit passes).
    char buf[16384];
    for (;;) {
      auto n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0)
        continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK
                       || errno == EINTR);
    }
  }
  while (c.sent < c.out.size()) {
    auto n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                    MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return true; // the rest once the socket takes more
    if (n <= 0)
      return false; // the client went away
    c.sent += static_cast<size_t>(n);
  }
  ::shutdown(c.fd, SHUT_WR);
  c.now = phase::draining;
  c.deadline = std::min(c.deadline, clock_type::now() + drain_limit);
  c.out.clear();
  c.out.shrink_to_fit();
  return true;
}

} // namespace syncfac::observe
