#pragma once

// Certificates bound to tasks (docs/tls.md, "Certificates bound to
// tasks"). A cluster CA signs one certificate per task; its subject
// alternative names carry the task as the URI syncfac://JOB/INDEX and the
// host of the task's cluster entry (a DNS name or an IP address). With TLS,
// every node of a cluster checks each peer in three places:
//
//   - at start-up, its own certificate: it must name this node's task and
//     its cluster entry's host (a node given another task's files stops,
//     naming both tasks);
//   - on every connection, right after the TLS handshake and before any of
//     CAF's messages: both sides send a hello naming their task (and their
//     CAF node id), and each refuses a peer whose certificate names another
//     task than it claims, a task outside the cluster, a host other than
//     that task's entry, or, for the side that connected, another task than
//     the one the cluster file puts at the address it dialled; the refused
//     side is told why (tls_session.hpp);
//   - at the cluster's own hello (actors/node.hpp): the task a node claims
//     must be the task the connection it came through was verified for
//     (verified_task), so a worker's key cannot register as the chief or a
//     PS shard.
//
// The transport reads the node's task and cluster from its actor system's
// configuration (bind_tls_identity); a system without them (a test's or a
// benchmark's bare TLS link) checks only the CA.

#include <optional>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/node_id.hpp>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/net/tls.hpp"

struct x509_st;

namespace syncfac::net {

/// The subject alternative name that binds a certificate to task `t`:
/// "syncfac://worker/1".
std::string task_uri(const task_id& t);

/// The task a certificate names: its one syncfac:// URI. ec::invalid_config
/// when it has none, more than one, or one that does not parse.
caf::expected<task_id> certificate_task(x509_st* cert);

/// Whether the certificate's subject alternative names cover `host` (a DNS
/// name, or an IPv4/IPv6 address matched as an IP entry).
bool certificate_names_host(x509_st* cert, const std::string& host);

/// Who this node is and the cluster it checks its peers against.
struct task_identity {
  task_id self;
  cluster_spec cluster;
};

/// Why a peer presenting `cert` and claiming `claimed` is refused by a node
/// of `id` ("" when it is not). `dialled` is set on the side that
/// connected: the task the cluster file puts at the address it dialled.
std::string peer_refusal(const task_identity& id, x509_st* cert,
                         const task_id& claimed,
                         const std::optional<task_id>& dialled);

/// The task the cluster file puts at host:port, if any.
std::optional<task_id> task_at(const cluster_spec& cluster,
                               const std::string& host, uint16_t port);

/// The TLS files of task `t` in `dir`, in the first layout that fits
/// (scripts/make-cluster-certs.sh writes each): `dir` itself when it holds
/// node.pem; `dir`/JOB-INDEX/ (a cluster's directory); `dir`/JOB-INDEX.pem
/// and .key beside ca.pem (a per-job directory, as a Kubernetes Secret
/// holds it). Checked as load_tls_dir checks; ec::invalid_config naming
/// `dir` and the layouts when none fits.
caf::expected<tls_files> load_task_tls(const std::string& dir,
                                       const task_id& t);

/// Checks that the node's own certificate (files from load_tls_dir) names
/// task `self` and the host of its cluster entry, then records task and
/// cluster in `cfg` for the transport. ec::invalid_config naming the
/// certificate file, the task it names and the task this node runs.
caf::error bind_tls_identity(caf::actor_system_config& cfg,
                             const tls_files& files, const task_id& self,
                             const cluster_spec& cluster);

/// Records task `self` and `cluster` in `cfg` for the transport, without
/// bind_tls_identity's check of the node's own certificate (which calls
/// it): for tests that play a node lying about itself.
void record_tls_identity(caf::actor_system_config& cfg, const task_id& self,
                         const cluster_spec& cluster);

/// A cluster node's --tls_dir: the files of task `self` in `dir`
/// (load_task_tls), set for the transport
/// (apply_tls) and bound to the task (bind_tls_identity).
caf::error configure_node_tls(caf::actor_system_config& cfg,
                              const std::string& dir, const task_id& self,
                              const cluster_spec& cluster);

/// What bind_tls_identity recorded in `cfg`; nullopt when nothing was.
std::optional<task_identity>
tls_identity_of(const caf::actor_system_config& cfg);

/// Whether `sys` binds its peers' tasks to their certificates.
bool binds_tasks(caf::actor_system& sys);

/// The task whose certificate the TLS connections of `sys` verified for
/// CAF node `node`; nullopt when no live connection was verified for it,
/// or connections verified different tasks for it (a peer that lied about
/// its node id: nothing is trusted then).
std::optional<task_id> verified_task(caf::actor_system& sys,
                                     const caf::node_id& node);

/// Why the last task hello of `sys` with the peer at host:port failed
/// (either side refusing), "" when none did: the connect loop's error names
/// it instead of a bare lost connection.
std::string tls_refusal(caf::actor_system& sys, const std::string& host,
                        uint16_t port);

} // namespace syncfac::net
