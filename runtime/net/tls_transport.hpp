#pragma once

// TLS between nodes, through CAF's own BASP broker: the same publish and
// remote_actor as caf::io::middleman, but every connection is a
// tls_session (runtime/net/tls_session.hpp) with mutual authentication
// against the cluster CA. It replaces caf::openssl, whose session sends
// each 16 KiB record on its own (docs/tls.md, "The transport").
//
// The actor system must have been configured with apply_tls (tls.hpp): the
// transport reads the files from its openssl.* settings.

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/scoped_actor.hpp>

namespace syncfac::net {

/// How long publish and connect wait for the TLS middleman by default.
constexpr std::chrono::seconds tls_request_timeout{30};

/// The actor that opens TLS listeners and connections for `sys`, spawned on
/// first use. ec::invalid_config when `sys` has no TLS files (apply_tls was
/// not called) or OpenSSL refuses them.
caf::expected<caf::io::middleman_actor> tls_middleman(caf::actor_system& sys);

/// The actor that opens `sys`'s connections to peers: tls_middleman when
/// `tls`, else CAF's own middleman actor (errors: tls_middleman's).
caf::expected<caf::io::middleman_actor>
connection_manager(caf::actor_system& sys, bool tls);

/// Publishes `whom` on `port` (0: any) of `in` (nullptr: every address)
/// over TLS; the bound port.
caf::expected<uint16_t>
tls_publish(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
            std::set<std::string> interface, uint16_t port,
            const char* in = nullptr, bool reuse = false,
            std::chrono::milliseconds timeout = tls_request_timeout);

template <class Handle>
caf::expected<uint16_t>
tls_publish(const Handle& whom, uint16_t port, const char* in = nullptr,
            bool reuse = false) {
  auto& sys = whom.home_system();
  caf::detail::type_list<Handle> tk;
  return tls_publish(sys, caf::actor_cast<caf::strong_actor_ptr>(whom),
                     sys.message_types(tk), port, in, reuse);
}

/// The actor published at host:port, asked of `manager` (CAF's middleman
/// actor for plain connections, tls_middleman for TLS) with a bounded wait:
/// CAF 0.17's own remote_actor waits without a timeout for a peer that
/// accepts the connection but never answers the handshake. A handshake that
/// completes later stays with the middleman, which answers the next attempt
/// at once. Errors: sec::no_actor_published_at_port,
/// sec::unexpected_actor_messaging_interface, ec::timeout naming the wait.
caf::expected<caf::strong_actor_ptr>
remote_actor_via(caf::scoped_actor& self,
                 const caf::io::middleman_actor& manager,
                 const std::string& host, uint16_t port,
                 const std::set<std::string>& expected_interface,
                 std::chrono::milliseconds timeout);

/// The actor published at host:port, over TLS, if its interface is
/// assignable to `expected_interface`; ec::timeout naming the address when
/// the peer does not answer within `timeout` (a frozen process accepts the
/// connection but never completes the handshake).
caf::expected<caf::strong_actor_ptr>
tls_remote_actor(caf::actor_system& sys, const std::string& host,
                 uint16_t port, const std::set<std::string>& expected_interface,
                 std::chrono::milliseconds timeout = tls_request_timeout);

template <class Handle>
caf::expected<Handle>
tls_remote_actor(caf::actor_system& sys, const std::string& host,
                 uint16_t port,
                 std::chrono::milliseconds timeout = tls_request_timeout) {
  caf::detail::type_list<Handle> tk;
  auto ptr = tls_remote_actor(sys, host, port, sys.message_types(tk), timeout);
  if (!ptr)
    return ptr.error();
  return caf::actor_cast<Handle>(std::move(*ptr));
}

} // namespace syncfac::net
