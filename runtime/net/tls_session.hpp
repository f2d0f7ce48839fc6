#pragma once

// One TLS connection as CAF's stream drives it (the policy of a
// caf::io::network::stream_impl), and the SSL context all of a node's
// connections share. Internal to runtime/net: tls_transport.hpp is the
// interface.
//
// Why not caf::openssl::session: it lets OpenSSL write each 16 KiB record
// with its own send(), so a 16 MiB push costs a thousand sends, each
// carried through the loopback stack on its own, and it blocks and
// unblocks SIGPIPE around every call. Here OpenSSL writes its records into
// a buffer and the session sends up to write_chunk of them at once, with
// MSG_NOSIGNAL. Reads go through OpenSSL's socket BIO with read-ahead, so
// that one read() brings several records.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/rw_state.hpp>

#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls.hpp"

struct ssl_st;
struct ssl_ctx_st;

namespace syncfac::net {

/// The OpenSSL error queue as text ("" when empty); clears the queue.
std::string take_ssl_errors();

using ssl_context_ptr = std::shared_ptr<ssl_ctx_st>;

class verified_peers;

/// What a session of a node with a task identity checks after the
/// handshake (task_identity.hpp): both sides send a hello record naming
/// their task and CAF node id, then a verdict record ("ok" or why not).
/// CAF's data flows only after both said ok.
struct tls_peer_check {
  std::shared_ptr<const task_identity> identity;
  /// This node's CAF node id, as the peer's verified_task will look it up.
  std::string own_node;
  /// Where a verified peer is recorded while its connection lives.
  std::shared_ptr<verified_peers> peers;
  /// On the side that connected: the task at the address it dialled.
  std::optional<task_id> dialled;
  /// The peer's address, for messages.
  std::string peer_address;
};

/// The context every connection of a node uses: its certificate chain and
/// key, the cluster CA as the only trust anchor, peers must present a
/// certificate (mutual authentication), TLS 1.2 or later, no session
/// tickets. ec::invalid_config naming the file OpenSSL refuses.
caf::expected<ssl_context_ptr> make_ssl_context(const tls_files& files);

/// One connection. Not thread-safe: CAF's multiplexer thread drives it,
/// after the thread that connected ran the first handshake step.
class tls_session {
public:
  using native_socket = caf::io::network::native_socket;
  using rw_state = caf::io::network::rw_state;

  /// Plaintext encrypted per send(): large enough that the sends of a
  /// 16 MiB message are few, small enough to keep the buffer in cache.
  static constexpr size_t write_chunk = 256 * 1024;

  /// OpenSSL's read-ahead buffer: several records per read().
  static constexpr size_t read_buffer = 256 * 1024;

  /// A session on the connected socket `fd`, its handshake started (the
  /// client's hello sent); ec::io_error saying why when OpenSSL fails, the
  /// peer does not speak TLS or the socket is gone.
  /// With `check`, the session also runs the task hello before it passes
  /// any data on.
  static caf::expected<std::unique_ptr<tls_session>>
  make(const ssl_context_ptr& ctx, native_socket fd, bool server,
       std::optional<tls_peer_check> check = std::nullopt);

  /// Size of a hello and of a verdict record.
  static constexpr size_t hello_record = 512;

  ~tls_session();
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  /// CAF's stream policy: success with result 0 means "nothing now, call
  /// again on the next event"; indeterminate (only for len 0) tells the
  /// stream there is nothing left to write.
  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len);
  rw_state write_some(size_t& result, native_socket fd, const void* buf,
                      size_t len);
  bool must_read_more(native_socket fd, size_t threshold);

  /// True once the handshake (and the task hello, if any) is done.
  bool handshake_done() const {
    return !handshaking_;
  }

  /// Appends ciphertext for the socket (OpenSSL's output BIO calls this).
  void buffer_output(const char* data, size_t size);

private:
  tls_session(ssl_st* ssl, bool server);

  enum class progress { done, pending, failed };

  progress continue_handshake(native_socket fd);
  /// The task hello after the handshake: send ours, read the peer's,
  /// judge it, send the verdict, read the peer's verdict.
  progress continue_hello(native_socket fd);
  /// Reads into in_ until it holds a whole record; false while it does not
  /// (failure_ says why when the connection is gone).
  std::optional<bool> read_record();
  /// Sends `text` as one record.
  void write_record(const std::string& text);
  /// With a check: logs on stderr why the handshake failed (failure_) and
  /// keeps it for tls_refusal.
  progress handshake_failed();
  /// Logs on stderr what ended the hello, and keeps it for make's error.
  progress hello_failed(std::string why);
  /// While the handshake runs, what a read or write returns (`pending` when
  /// it goes on); nothing once it is done and the call may proceed.
  std::optional<rw_state> while_handshaking(native_socket fd,
                                            rw_state pending);
  /// What a failed SSL_read or SSL_write (`ret` <= 0) means for the stream.
  rw_state after_failed_call(int ret, native_socket fd);
  std::string why_failed() const {
    return failure_;
  }
  /// Sends buffered ciphertext until done or the socket would block; false
  /// when the connection is gone.
  bool send_buffered(native_socket fd);
  bool output_pending() const {
    return out_sent_ < out_.size();
  }

  ssl_st* ssl_;
  bool handshaking_ = true;
  std::vector<char> out_;
  size_t out_sent_ = 0;
  // Plaintext bytes whose ciphertext is still in out_: reported to the
  // stream as written only once all of it is on the socket, so that the
  // stream keeps asking to write until then.
  size_t owed_ = 0;
  std::string failure_; // what ended the handshake, for make's error
  // The task hello; all empty without a check.
  std::optional<tls_peer_check> check_;
  enum class hello_step { send, read_hello, read_verdict, done };
  hello_step hello_ = hello_step::send;
  std::vector<char> in_;
  std::optional<task_id> peer_task_;
  std::string peer_node_;
  bool registered_ = false;
};

} // namespace syncfac::net
