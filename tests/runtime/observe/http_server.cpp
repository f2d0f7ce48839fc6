#define BOOST_TEST_MODULE observe_http_server
#include <boost/test/unit_test.hpp>

// The metrics server's HTTP/1.1 over real sockets on 127.0.0.1 and ::1:
// answers with Connection: close and a Content-Length, 400/404/405/408/
// 413/414/431 as due, a silent client timed out without stopping the
// server, a port in use named, scrapes answered within 1 s among 300 idle
// connections and clients sending 1 MB heads.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
#include "runtime/observe/http_request.hpp"
#include "runtime/observe/http_server.hpp"
#include "runtime/observe/metrics_endpoint.hpp"

using namespace syncfac;
using namespace syncfac::observe;

namespace {

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Sends `request` and reads the answer until the server closes.
std::string roundtrip(uint16_t port, const std::string& request) {
  int fd = connect_to(port);
  BOOST_REQUIRE_GE(fd, 0);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string get(uint16_t port, const std::string& path) {
  return roundtrip(port, "GET " + path
                          + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

/// An endpoint's configuration labelled `job` and `task`.
metrics_endpoint_config endpoint_config(const std::string& job,
                                        int32_t task) {
  metrics_endpoint_config cfg;
  cfg.job = job;
  cfg.task = task;
  return cfg;
}

std::unique_ptr<http_server> echo_server(http_server_options opts = {}) {
  auto srv = http_server::start(opts, [](const std::string& path) {
    if (path != "/hello")
      return http_response{404, "text/plain", "no\n"};
    return http_response{200, "text/plain", "hi there\n"};
  });
  BOOST_REQUIRE(srv);
  return std::move(*srv);
}

} // namespace

BOOST_AUTO_TEST_CASE(a_get_is_answered_and_the_connection_closed) {
  auto srv = echo_server();
  auto res = get(srv->port(), "/hello?x=1");
  BOOST_TEST(res.rfind("HTTP/1.1 200 OK\r\n", 0) == 0u);
  BOOST_TEST(res.find("Connection: close\r\n") != std::string::npos);
  BOOST_TEST(res.find("Content-Length: 9\r\n") != std::string::npos);
  BOOST_TEST(res.substr(res.size() - 9) == "hi there\n");
  BOOST_TEST(get(srv->port(), "/other").rfind("HTTP/1.1 404", 0) == 0u);
  BOOST_TEST(srv->requests() == 2);
}

BOOST_AUTO_TEST_CASE(head_has_no_body_and_other_methods_are_refused) {
  auto srv = echo_server();
  auto head = roundtrip(srv->port(), "HEAD /hello HTTP/1.1\r\n\r\n");
  BOOST_TEST(head.rfind("HTTP/1.1 200", 0) == 0u);
  BOOST_TEST(head.find("hi there") == std::string::npos);
  auto post = roundtrip(srv->port(), "POST /hello HTTP/1.1\r\n\r\n");
  BOOST_TEST(post.rfind("HTTP/1.1 405", 0) == 0u);
  auto junk = roundtrip(srv->port(), "garbage\r\n\r\n");
  BOOST_TEST(junk.rfind("HTTP/1.1 400", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(an_oversized_request_gets_431) {
  http_server_options opts;
  opts.max_request_bytes = 1024;
  auto srv = echo_server(opts);
  auto res = roundtrip(srv->port(), "GET /hello HTTP/1.1\r\nX-Pad: "
                                     + std::string(4000, 'a') + "\r\n\r\n");
  BOOST_TEST(res.rfind("HTTP/1.1 431", 0) == 0u);
  // The server goes on.
  BOOST_TEST(get(srv->port(), "/hello").rfind("HTTP/1.1 200", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(a_silent_client_times_out_and_others_are_served) {
  http_server_options opts;
  opts.io_timeout = std::chrono::milliseconds{300};
  auto srv = echo_server(opts);
  int silent = connect_to(srv->port());
  BOOST_REQUIRE_GE(silent, 0);
  ::send(silent, "GET /hel", 8, MSG_NOSIGNAL);
  // Answered once the silent one timed out.
  BOOST_TEST(get(srv->port(), "/hello").rfind("HTTP/1.1 200", 0) == 0u);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::recv(silent, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(silent);
  BOOST_TEST(out.rfind("HTTP/1.1 408", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_is_named) {
  auto first = echo_server();
  http_server_options opts;
  opts.port = first->port();
  auto second = http_server::start(opts, [](const std::string&) {
    return http_response{};
  });
  BOOST_REQUIRE(!second);
  auto msg = render(second.error());
  BOOST_TEST(msg.find(std::to_string(first->port())) != std::string::npos);
  BOOST_TEST(msg.find("--metrics_port") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_bad_bind_address_is_named) {
  http_server_options opts;
  opts.bind_address = "not-an-address";
  auto srv = http_server::start(opts, [](const std::string&) {
    return http_response{};
  });
  BOOST_REQUIRE(!srv);
  BOOST_TEST(render(srv.error()).find("not-an-address") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(requests_are_parsed_strictly) {
  using outcome = http_parse::outcome;
  auto p = parse_http_request("GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n");
  BOOST_TEST((p.what == outcome::request));
  BOOST_TEST(p.method == "GET");
  BOOST_TEST(p.path == "/a");
  BOOST_TEST((parse_http_request("GET /a HTTP/1.1\r\nHost: x\r\n").what
              == outcome::incomplete));
  auto status = [](const std::string& text) {
    http_limits limits;
    limits.max_head_bytes = 256;
    limits.max_target_bytes = 64;
    auto q = parse_http_request(text, limits);
    return q.what == outcome::refused ? q.status : 0;
  };
  BOOST_TEST(status("GET a HTTP/1.1\r\n\r\n") == 400);
  BOOST_TEST(status("GET /a\r\n\r\n") == 400);
  BOOST_TEST(status(" /a HTTP/1.1\r\n\r\n") == 400);
  BOOST_TEST(status("GET /a HTTP/2.0\r\n\r\n") == 400);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nno colon\r\n\r\n") == 400);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nContent-Length: x\r\n\r\n") == 400);
  BOOST_TEST(status("DELETE /a HTTP/1.1\r\n\r\n") == 405);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nContent-Length: 5\r\n\r\n") == 413);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n") == 0);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
             == 413);
  // 414 as soon as the target is too long, before the line is whole.
  BOOST_TEST(status("GET /" + std::string(100, 'a')) == 414);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nX: " + std::string(300, 'b')) == 431);
  BOOST_TEST(status("GET /a HTTP/1.1\r\nX: " + std::string(300, 'b')
                    + "\r\n\r\n")
             == 431);
}

BOOST_AUTO_TEST_CASE(urls_bracket_ipv6_hosts) {
  BOOST_TEST(http_url("127.0.0.1", 9400, "/metrics")
             == "http://127.0.0.1:9400/metrics");
  BOOST_TEST(http_url("::1", 9400, "/metrics") == "http://[::1]:9400/metrics");
  BOOST_TEST(http_url("[::1]", 80, "/") == "http://[::1]:80/");
  BOOST_TEST(http_url("localhost", 80, "/") == "http://localhost:80/");
}

BOOST_AUTO_TEST_CASE(each_refusal_is_answered_with_its_status) {
  http_server_options opts;
  opts.max_request_bytes = 1024;
  opts.max_target_bytes = 128;
  auto srv = echo_server(opts);
  auto starts = [&](const std::string& request, const std::string& status) {
    auto res = roundtrip(srv->port(), request);
    BOOST_TEST(res.rfind("HTTP/1.1 " + status, 0) == 0u, res);
    return res;
  };
  starts("GET /hello HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", "413");
  starts("GET /" + std::string(500, 'x') + " HTTP/1.1\r\n\r\n", "414");
  auto post = starts("POST /hello HTTP/1.1\r\n\r\n", "405");
  BOOST_TEST(post.find("Allow: GET, HEAD\r\n") != std::string::npos);
  starts("GET /hello HTTP/1.1\r\nX: " + std::string(2000, 'y') + "\r\n\r\n",
         "431");
  starts("GET /hello HTTP/1.1\r\n\r\n", "200");
}

BOOST_AUTO_TEST_CASE(localhost_and_ipv6_bind_addresses) {
  for (std::string bind : {"localhost", "::1", "[::1]"}) {
    http_server_options opts;
    opts.bind_address = bind;
    auto srv = http_server::start(opts, [](const std::string&) {
      return http_response{200, "text/plain", "ok\n"};
    });
    BOOST_REQUIRE_MESSAGE(srv, bind << ": "
                                    << (srv ? "" : render(srv.error())));
    bool v6 = bind != "localhost";
    int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    int rc;
    if (v6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons((*srv)->port());
      inet_pton(AF_INET6, "::1", &a.sin6_addr);
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons((*srv)->port());
      inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    BOOST_REQUIRE_MESSAGE(rc == 0, bind << ": connect failed");
    std::string req = "GET / HTTP/1.1\r\n\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[256];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    ::close(fd);
    BOOST_REQUIRE(n > 0);
    BOOST_TEST(std::string(buf, static_cast<size_t>(n)).rfind("HTTP/1.1 200", 0)
               == 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_full_server_always_lets_a_new_client_in) {
  // Four connections fill the server; they time out (408) and stay open
  // without reading or closing, then more come and stay idle: a GET still
  // gets in each time, the oldest answered or idle connection making room.
  http_server_options opts;
  opts.max_connections = 4;
  opts.io_timeout = std::chrono::milliseconds{300};
  auto srv = echo_server(opts);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(srv->port()));
    BOOST_REQUIRE_GE(held.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds{450});
  BOOST_TEST(get(srv->port(), "/hello").rfind("HTTP/1.1 200", 0) == 0u);
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(srv->port()));
    BOOST_REQUIRE_GE(held.back(), 0);
  }
  BOOST_TEST(get(srv->port(), "/hello").rfind("HTTP/1.1 200", 0) == 0u);
  BOOST_TEST(srv->evicted() >= 2);
  for (int fd : held)
    ::close(fd);
}

BOOST_AUTO_TEST_CASE(idle_clients_and_huge_heads_do_not_delay_scrapes) {
  // 300 idle connections (more than max_connections: the oldest make
  // room) and four clients sending 1 MB heads over and over, while a
  // Prometheus scrape must be answered within 1 s each time.
  auto ep = metrics_endpoint::start(endpoint_config("chief", 0));
  BOOST_REQUIRE(ep);
  auto port = (*ep)->port();
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = connect_to(port);
    BOOST_REQUIRE_GE(fd, 0);
    ::send(fd, "GET /met", 8, MSG_NOSIGNAL);
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> refused_heads{0};
  std::vector<std::thread> floods;
  for (int t = 0; t < 4; ++t)
    floods.emplace_back([&] {
      std::string head = "GET /metrics HTTP/1.1\r\nX-Pad: "
                         + std::string(1 << 20, 'p') + "\r\n\r\n";
      while (!stop) {
        int fd = connect_to(port);
        if (fd < 0)
          continue;
        ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
        char buf[64];
        auto n = ::recv(fd, buf, sizeof buf, 0);
        if (n > 12 && std::string(buf, 12) == "HTTP/1.1 431")
          ++refused_heads;
        ::close(fd);
      }
    });
  double slowest = 0;
  for (int i = 0; i < 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto res = get(port, "/metrics");
    auto s = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                           - t0)
               .count();
    slowest = std::max(slowest, s);
    BOOST_TEST(res.rfind("HTTP/1.1 200", 0) == 0u, res.substr(0, 80));
    BOOST_TEST(res.find("syncfac_up{job=\"chief\",task=\"0\"} 1\n")
               != std::string::npos);
    BOOST_TEST(s < 1.0, "scrape " << i << " took " << s << " s");
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
  stop = true;
  for (auto& f : floods)
    f.join();
  BOOST_TEST_MESSAGE("slowest scrape " << slowest << " s, " << refused_heads
                                       << " 1 MB heads refused");
  BOOST_TEST(refused_heads.load() > 0);
  // The oldest idle connection was closed to make room, unanswered.
  char buf[16];
  BOOST_TEST(::recv(idle.front(), buf, sizeof buf, 0) <= 0);
  for (int fd : idle)
    ::close(fd);
}

BOOST_AUTO_TEST_CASE(the_endpoint_serves_metrics_status_and_the_page) {
  auto cfg = endpoint_config("ps", 1);
  cfg.status = std::make_shared<run_status>();
  cfg.status->train(5, 1.0, {{"loss", 0.25}});
  cfg.collectors.push_back([](const auto& labels) {
    return std::vector<metric_family>{
      {"syncfac_extra", "An extra family.", metric_type::gauge,
       {{labels, 7}}}};
  });
  auto ep = metrics_endpoint::start(std::move(cfg));
  BOOST_REQUIRE(ep);
  auto port = (*ep)->port();
  auto metrics = get(port, "/metrics");
  BOOST_TEST(metrics.find("Content-Type: text/plain; version=0.0.4")
             != std::string::npos);
  BOOST_TEST(metrics.find("syncfac_up{job=\"ps\",task=\"1\"} 1\n")
             != std::string::npos);
  BOOST_TEST(metrics.find("syncfac_train_loss{job=\"ps\",task=\"1\"} 0.25\n")
             != std::string::npos);
  BOOST_TEST(metrics.find("syncfac_extra{job=\"ps\",task=\"1\"} 7\n")
             != std::string::npos);
  BOOST_TEST(get(port, "/status.json").find("\"global_step\": 5")
             != std::string::npos);
  BOOST_TEST(get(port, "/").find("<svg") == std::string::npos); // drawn by JS
  BOOST_TEST(get(port, "/").find("id=\"initial\"") != std::string::npos);
  BOOST_TEST(get(port, "/missing").rfind("HTTP/1.1 404", 0) == 0u);
}
