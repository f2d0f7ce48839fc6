#pragma once

// TLS with mutual authentication between nodes (the transport in
// tls_transport.hpp): every node
// holds the cluster CA's certificate plus its own certificate and key, all
// signed by that CA. A peer without a CA-signed certificate is refused at
// the TLS handshake, in both directions.
//
// A node must fail at start-up, naming the file, when its files are half
// right (a missing file, a key that does not decrypt or does not belong to
// the certificate), not at its first connection (CAF 0.17's caf::openssl
// aborted or hung there). load_tls_dir therefore checks everything with the
// OpenSSL API first, ending with the SSL context the transport will build,
// and apply_tls refuses anything that load_tls_dir did not produce in full.
//
// The directory layout (scripts/make-cluster-certs.sh writes it):
//   ca.pem          the cluster CA's certificate (trust anchor)
//   node.pem        this node's certificate (optionally followed by
//                   intermediate certificates), signed by the CA
//   node.key        its private key (PEM; may be encrypted)
//   passphrase.txt  optional: the key's passphrase (first line)

#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace syncfac::net {

/// Absolute paths of a node's TLS files and the key's passphrase (empty
/// when the key is not encrypted).
struct tls_files {
  std::string cafile;
  std::string certificate;
  std::string key;
  std::string passphrase;
};

/// DIR holds ca.pem, node.pem, node.key (and optionally passphrase.txt for
/// an encrypted key). Checks everything before CAF sees it: the files exist
/// and are readable, the PEM parses, the key decrypts (passphrase), the key
/// matches the certificate, the certificate verifies against the CA, is
/// usable for both TLS server and client authentication, and neither it
/// nor the CA is expired or not yet valid. Each failure is an
/// ec::invalid_config error naming the file and the problem.
caf::expected<tls_files> load_tls_dir(const std::string& dir);

/// As load_tls_dir, for files of other names in `dir`: ca.pem, then
/// `certificate`, `key` and (when it exists) `passphrase`, e.g. a task's
/// worker-1.pem, worker-1.key of a per-job directory
/// (net::load_task_tls).
caf::expected<tls_files> load_tls_files(const std::string& dir,
                                        const std::string& certificate,
                                        const std::string& key,
                                        const std::string& passphrase);

/// Sets the openssl.* options (certificate, key, passphrase, cafile) on
/// `cfg`, where the TLS transport reads them. `cfg` must already have loaded
/// caf::io::middleman (syncfac::program_config does), and must not be used
/// to construct an actor system yet. Fails with ec::invalid_config, leaving
/// `cfg` untouched, when a path is empty or `files` has not been through
/// load_tls_dir's checks (the files are checked again: they may have
/// changed since).
caf::error apply_tls(caf::actor_system_config& cfg, const tls_files& files);

} // namespace syncfac::net
