#include "runtime/net/tls_transport.hpp"

#include <mutex>
#include <optional>
#include <utility>

#include <caf/atom.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/doorman.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/io/scribe.hpp>

#include "runtime/base/error.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls_session.hpp"
#include "runtime/net/verified_peers.hpp"

namespace syncfac::net {

namespace {

namespace network = caf::io::network;
using network::default_multiplexer;
using network::native_socket;
using network::rw_state;

/// The registry name of a system's TLS middleman.
constexpr auto registry_name = caf::atom("sfac_tls");

/// Non-blocking, and with keepalive as CAF gives its plain connections: the
/// kernel's backstop for a peer gone without a word, behind the middleman's
/// heartbeats.
void prepare_socket(native_socket fd) {
  network::nonblocking(fd, true);
  network::keepalive(fd, true);
}

/// What every session of a node with a task identity checks; empty
/// identity: the CA alone.
struct identity_checks {
  std::shared_ptr<const task_identity> identity;
  std::string own_node;
  std::shared_ptr<verified_peers> peers;

  /// The check of one connection with the peer at `address`; nullopt
  /// without an identity.
  std::optional<tls_peer_check>
  for_peer(std::string address, std::optional<task_id> dialled) const {
    if (!identity)
      return std::nullopt;
    tls_peer_check c;
    c.identity = identity;
    c.own_node = own_node;
    c.peers = peers;
    c.dialled = std::move(dialled);
    c.peer_address = std::move(address);
    return c;
  }
};

/// The stream policy: CAF's stream_impl calls these on the multiplexer.
class tls_policy {
public:
  explicit tls_policy(std::unique_ptr<tls_session> session)
    : session_(std::move(session)) {
  }

  rw_state read_some(size_t& result, native_socket fd, void* buf,
                     size_t len) {
    return session_->read_some(result, fd, buf, len);
  }

  rw_state write_some(size_t& result, native_socket fd, const void* buf,
                      size_t len) {
    return session_->write_some(result, fd, buf, len);
  }

  bool must_read_more(native_socket fd, size_t threshold) {
    return session_->must_read_more(fd, threshold);
  }

private:
  std::unique_ptr<tls_session> session_;
};

class tls_scribe : public caf::io::scribe {
public:
  tls_scribe(default_multiplexer& mpx, native_socket fd,
             std::unique_ptr<tls_session> session)
    : scribe(network::conn_hdl_from_socket(fd)),
      stream_(mpx, fd, std::move(session)) {
  }

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_)
      launch();
  }

  void ack_writes(bool enable) override {
    stream_.ack_writes(enable);
  }

  std::vector<char>& wr_buf() override {
    return stream_.wr_buf();
  }

  std::vector<char>& rd_buf() override {
    return stream_.rd_buf();
  }

  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }

  void flush() override {
    stream_.flush(this);
  }

  std::string addr() const override {
    auto x = network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string{};
  }

  uint16_t port() const override {
    auto x = network::remote_port_of_fd(stream_.fd());
    return x ? *x : uint16_t{0};
  }

  void add_to_loop() override {
    stream_.activate(this);
  }

  void remove_from_loop() override {
    stream_.passivate();
  }

private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    // A write event drives the handshake even before BASP has anything to
    // send; the stream stops asking once the session has nothing to write.
    stream_.force_empty_write(this);
  }

  bool launched_ = false;
  network::stream_impl<tls_policy> stream_;
};

class tls_doorman : public network::doorman_impl {
public:
  tls_doorman(default_multiplexer& mpx, native_socket fd, ssl_context_ptr ctx,
              identity_checks checks)
    : doorman_impl(mpx, fd), ctx_(std::move(ctx)), checks_(std::move(checks)) {
  }

  bool new_connection() override {
    if (detached())
      return false; // the broker let go while the event was pending
    auto& mpx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    prepare_socket(fd);
    auto addr = network::remote_addr_of_fd(fd);
    auto port = network::remote_port_of_fd(fd);
    auto where = host_port{addr ? *addr : std::string{"?"},
                           port ? *port : uint16_t{0}}
                   .str();
    auto session = tls_session::make(ctx_, fd, true,
                                     checks_.for_peer(where, std::nullopt));
    if (!session) {
      network::close_socket(fd);
      return true; // refuse this one, keep accepting
    }
    auto scribe = caf::make_counted<tls_scribe>(mpx, fd, std::move(*session));
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mpx, hdl);
  }

private:
  ssl_context_ptr ctx_;
  identity_checks checks_;
};

class tls_middleman_impl : public caf::io::middleman_actor_impl {
public:
  tls_middleman_impl(caf::actor_config& cfg, caf::actor broker,
                     ssl_context_ptr ctx, identity_checks checks)
    : middleman_actor_impl(cfg, std::move(broker)),
      ctx_(std::move(ctx)),
      checks_(std::move(checks)) {
  }

  const char* name() const override {
    return "syncfac.tls_middleman";
  }

  behavior_type make_behavior() override {
    // CAF kills its own middleman actor when the system shuts down its
    // network; the link ends this one at the same moment, while its thread
    // can still run (await_detached_threads waits for it).
    link_to(system().middleman().actor_handle());
    return middleman_actor_impl::make_behavior();
  }

  void on_exit() override {
    // The registry's reference would keep this actor, and so the thread
    // that the system's shutdown waits for, alive.
    system().registry().erase(registry_name);
    forget_verified_peers(system());
    middleman_actor_impl::on_exit();
  }

protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host,
                                             uint16_t port) override {
    auto where = host_port{host, port}.str();
    std::optional<task_id> dialled;
    if (checks_.identity) {
      dialled = task_at(checks_.identity->cluster, host, port);
      if (!dialled)
        return make_error(ec::invalid_config,
                          "TLS: " + where + " is the address of no task of "
                          "the cluster: this node connects to its tasks only");
    }
    auto fd = network::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    prepare_socket(*fd);
    auto session = tls_session::make(ctx_, *fd, false,
                                     checks_.for_peer(where, dialled));
    if (!session) {
      network::close_socket(*fd);
      return make_error(ec::io_error, "TLS with " + host + ":"
                                        + std::to_string(port) + ": "
                                        + render(session.error()));
    }
    return caf::make_counted<tls_scribe>(mpx(), *fd, std::move(*session));
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr,
                                           bool reuse) override {
    auto fd = network::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    return caf::make_counted<tls_doorman>(mpx(), *fd, ctx_, checks_);
  }

private:
  default_multiplexer& mpx() {
    return static_cast<default_multiplexer&>(system().middleman().backend());
  }

  ssl_context_ptr ctx_;
  identity_checks checks_;
};

/// CAF's request_timeout as ec::timeout saying what was waited for.
caf::error waited(caf::error err, const std::string& what,
                  std::chrono::milliseconds timeout) {
  if (err != caf::sec::request_timeout)
    return err;
  return make_error(ec::timeout, what + " within "
                                   + std::to_string(timeout.count()) + " ms");
}

tls_files files_of(const caf::actor_system_config& cfg) {
  tls_files files;
  files.cafile = cfg.openssl_cafile;
  files.certificate = cfg.openssl_certificate;
  files.key = cfg.openssl_key;
  files.passphrase = cfg.openssl_passphrase;
  return files;
}

} // namespace

caf::expected<caf::io::middleman_actor> tls_middleman(caf::actor_system& sys) {
  static std::mutex spawning;
  std::lock_guard<std::mutex> guard{spawning};
  auto& registry = sys.registry();
  if (auto existing = registry.get(registry_name))
    return caf::actor_cast<caf::io::middleman_actor>(std::move(existing));
  auto files = files_of(sys.config());
  if (files.cafile.empty() || files.certificate.empty() || files.key.empty())
    return make_error(ec::invalid_config,
                      "TLS: this actor system has no TLS files (apply_tls "
                      "was not called)");
  auto ctx = make_ssl_context(files);
  if (!ctx)
    return ctx.error();
  identity_checks checks;
  if (auto id = tls_identity_of(sys.config())) {
    checks.identity = std::make_shared<const task_identity>(std::move(*id));
    checks.own_node = to_string(sys.node());
    checks.peers = verified_peers_of(sys, true);
  }
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(
    caf::atom("BASP"));
  // Hidden: the system does not wait for it as for a user's actor.
  // Detached: it ends on its own thread once the link to CAF's middleman
  // actor fires; a scheduled actor might not run again before the
  // scheduler stops, and would then be cleaned up from the registry's
  // destructor, after the system it needs is gone.
  auto mm = sys.spawn<tls_middleman_impl, caf::detached + caf::hidden>(
    std::move(broker), std::move(*ctx), std::move(checks));
  registry.put(registry_name, mm);
  return mm;
}

caf::expected<caf::io::middleman_actor>
connection_manager(caf::actor_system& sys, bool tls) {
  if (tls)
    return tls_middleman(sys);
  return sys.middleman().actor_handle();
}

caf::expected<uint16_t>
tls_publish(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
            std::set<std::string> interface, uint16_t port, const char* in,
            bool reuse, std::chrono::milliseconds timeout) {
  auto mm = tls_middleman(sys);
  if (!mm)
    return mm.error();
  if (!whom)
    return make_error(ec::invalid_argument, "TLS: publish of no actor");
  caf::expected<uint16_t> result{caf::error{}};
  caf::scoped_actor self{sys, true};
  self
    ->request(*mm, timeout, caf::publish_atom::value, port, whom,
              std::move(interface), std::string{in != nullptr ? in : ""},
              reuse)
    .receive([&](uint16_t bound) { result = bound; },
             [&](caf::error& err) {
               result = waited(std::move(err),
                               "TLS: no answer to publishing on port "
                                 + std::to_string(port),
                               timeout);
             });
  return result;
}

caf::expected<caf::strong_actor_ptr>
remote_actor_via(caf::scoped_actor& self,
                 const caf::io::middleman_actor& manager,
                 const std::string& host, uint16_t port,
                 const std::set<std::string>& expected_interface,
                 std::chrono::milliseconds timeout) {
  auto& sys = self->system();
  caf::expected<caf::strong_actor_ptr> result{caf::error{}};
  self->request(manager, timeout, caf::connect_atom::value, host, port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          std::set<std::string>& ifs) {
        if (!ptr)
          result = caf::make_error(caf::sec::no_actor_published_at_port);
        else if (!sys.assignable(ifs, expected_interface))
          result = caf::make_error(
            caf::sec::unexpected_actor_messaging_interface);
        else
          result = std::move(ptr);
      },
      [&](caf::error& err) {
        result = waited(std::move(err),
                        "no handshake with " + host + ":"
                          + std::to_string(port) + " (a frozen process?)",
                        timeout);
      });
  return result;
}

caf::expected<caf::strong_actor_ptr>
tls_remote_actor(caf::actor_system& sys, const std::string& host,
                 uint16_t port, const std::set<std::string>& expected_interface,
                 std::chrono::milliseconds timeout) {
  auto mm = tls_middleman(sys);
  if (!mm)
    return mm.error();
  caf::scoped_actor self{sys, true};
  return remote_actor_via(self, *mm, host, port, expected_interface, timeout);
}

} // namespace syncfac::net
