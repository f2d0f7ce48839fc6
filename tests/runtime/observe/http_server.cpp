#define BOOST_TEST_MODULE observe_http_server
#include <boost/test/unit_test.hpp>

// The metrics server's HTTP/1.1 over real sockets on 127.0.0.1: answers
// with Connection: close and a Content-Length, 404/405/400/431 as due, a
// silent client timed out without stopping the server, a port in use named.

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
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

BOOST_AUTO_TEST_CASE(request_lines_are_parsed_strictly) {
  std::string m;
  std::string p;
  BOOST_TEST(parse_request_line("GET /a?b HTTP/1.1\r\n", m, p));
  BOOST_TEST(m == "GET");
  BOOST_TEST(p == "/a");
  BOOST_TEST(!parse_request_line("GET a HTTP/1.1\r\n", m, p));
  BOOST_TEST(!parse_request_line("GET /a\r\n", m, p));
  BOOST_TEST(!parse_request_line(" /a HTTP/1.1\r\n", m, p));
}

BOOST_AUTO_TEST_CASE(the_endpoint_serves_metrics_status_and_the_page) {
  metrics_endpoint_config cfg;
  cfg.job = "ps";
  cfg.task = 1;
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
