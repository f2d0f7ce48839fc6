#pragma once

// Where a node listens, and whether its cluster crosses a network
// (docs/tls.md, "Where a node listens"). A node binds to the address its
// own cluster entry names, resolved once the way CAF resolves it when a
// peer connects (the first answer of getaddrinfo), so a cluster file of
// `localhost:PORT` entries is reachable on loopback only; `--bind ADDR`
// overrides it (e.g. 0.0.0.0 in a container whose Service name is not an
// address of its own). A cluster with a task off loopback speaks
// plaintext only when told to (--insecure): CAF's protocol has no
// authentication of its own.

#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac::net {

/// "0.0.0.0", "::", "[::]" and "*": every interface.
bool is_wildcard_address(const std::string& host);

/// The numeric address a node told to listen on `host` binds to: `host`
/// itself for a numeric or wildcard address ("[v6]" loses its brackets),
/// else the first address getaddrinfo gives for it (as CAF's connect
/// takes). ec::invalid_config naming `host` when it does not resolve.
caf::expected<std::string> bind_address(const std::string& host);

/// True when every address `host` resolves to is a loopback address
/// (127.0.0.0/8, ::1); false for a wildcard, a host that does not resolve
/// (it may name a machine not up yet) or any other address.
bool is_loopback_host(const std::string& host);

/// The hosts of `cluster` (and `bind`, when not empty) that are not
/// loopback, each once, in the cluster's task order.
std::vector<std::string> network_hosts(const cluster_spec& cluster,
                                       const std::string& bind = {});

/// Refuses plaintext across a network: ec::invalid_config naming the hosts
/// off loopback when there are any, `tls` is false and `insecure` is false.
/// `bind` is the --bind address (empty: none).
caf::error require_tls_off_loopback(const cluster_spec& cluster,
                                    const std::string& bind, bool tls,
                                    bool insecure);

/// The warning a node logs once when it runs in plaintext across a network
/// by --insecure; empty when every host is loopback or `tls` is on.
std::string insecure_warning(const cluster_spec& cluster,
                             const std::string& bind, bool tls);

} // namespace syncfac::net
