#include "runtime/net/listen_address.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <caf/io/network/interfaces.hpp>

#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac::net {

namespace {

std::string unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

bool is_numeric(const std::string& host) {
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1
         || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

bool loopback_sockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    auto a = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a))
      return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

} // namespace

bool is_wildcard_address(const std::string& host) {
  auto h = unbracketed(host);
  return h == "0.0.0.0" || h == "::" || h == "*";
}

caf::expected<std::string> bind_address(const std::string& host) {
  auto h = unbracketed(host);
  if (h.empty())
    return make_error(ec::invalid_config, "empty listen address");
  if (h == "*")
    return std::string{"0.0.0.0"};
  if (is_wildcard_address(h) || is_numeric(h))
    return h;
  auto res = caf::io::network::interfaces::native_address(h);
  if (!res)
    return make_error(ec::invalid_config,
                      "listen address '" + host
                        + "' does not resolve (give --bind ADDR, e.g. "
                          "0.0.0.0, where the cluster entry names no "
                          "address of this machine)");
  return res->first;
}

bool is_loopback_host(const std::string& host) {
  auto h = unbracketed(host);
  if (h.empty() || is_wildcard_address(h))
    return false;
  addrinfo hint;
  std::memset(&hint, 0, sizeof(hint));
  hint.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hint, &found) != 0 || found == nullptr)
    return false;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard{found,
                                                           freeaddrinfo};
  for (auto* i = found; i != nullptr; i = i->ai_next)
    if (!loopback_sockaddr(i->ai_addr))
      return false;
  return true;
}

std::vector<std::string> network_hosts(const cluster_spec& cluster,
                                       const std::string& bind) {
  std::vector<std::string> out;
  auto note = [&](const std::string& host) {
    if (!is_loopback_host(host)
        && std::find(out.begin(), out.end(), host) == out.end())
      out.push_back(host);
  };
  for (const auto& t : cluster.tasks())
    note(cluster.address(t).host);
  if (!bind.empty())
    note(bind);
  return out;
}

caf::error require_tls_off_loopback(const cluster_spec& cluster,
                                    const std::string& bind, bool tls,
                                    bool insecure) {
  if (tls || insecure)
    return caf::none;
  auto hosts = network_hosts(cluster, bind);
  if (hosts.empty())
    return caf::none;
  return make_error(ec::invalid_config,
                    "the cluster reaches beyond loopback (" + comma_joined(hosts)
                      + ") and CAF's protocol has no authentication of its "
                        "own: give --tls_dir DIR (scripts/make-cluster-certs.sh"
                        ", docs/tls.md), or --insecure to speak plaintext "
                        "on a network you trust");
}

std::string insecure_warning(const cluster_spec& cluster,
                             const std::string& bind, bool tls) {
  if (tls)
    return {};
  auto hosts = network_hosts(cluster, bind);
  if (hosts.empty())
    return {};
  return "warning: --insecure: plaintext without authentication to and from "
         + comma_joined(hosts)
         + "; anyone who reaches these ports may act as any task "
           "(docs/tls.md)";
}

} // namespace syncfac::net
