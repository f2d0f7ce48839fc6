#include "runtime/net/tls_session.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>
#include <cstring>

#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "runtime/base/error.hpp"

namespace syncfac::net {

namespace {

using caf::io::network::rw_state;

// OpenSSL's output BIO: every byte it writes lands in the session's buffer,
// which the session sends in large pieces.
int output_write(BIO* bio, const char* data, int size) {
  if (size <= 0)
    return 0;
  static_cast<tls_session*>(BIO_get_data(bio))
    ->buffer_output(data, static_cast<size_t>(size));
  return size;
}

long output_ctrl(BIO*, int cmd, long, void*) {
  // Flushing is the session's job; OpenSSL only needs to hear it worked.
  // Every other query (kTLS, pending bytes, ...) answers "no".
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int output_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* output_method() {
  static const BIO_METHOD* method = [] {
    auto* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                           "syncfac TLS output");
    if (m != nullptr) {
      BIO_meth_set_write(m, output_write);
      BIO_meth_set_ctrl(m, output_ctrl);
      BIO_meth_set_create(m, output_create);
    }
    return m;
  }();
  return method;
}

bool would_block(int err) {
  return err == EAGAIN || err == EWOULDBLOCK;
}

} // namespace

tls_session::tls_session(ssl_st* ssl, bool server) : ssl_(ssl) {
  if (server)
    SSL_set_accept_state(ssl_);
  else
    SSL_set_connect_state(ssl_);
}

tls_session::~tls_session() {
  SSL_free(ssl_); // frees both BIOs
}

caf::expected<std::unique_ptr<tls_session>>
tls_session::make(const ssl_context_ptr& ctx, native_socket fd, bool server) {
  auto fail = [](std::string what) {
    auto errs = take_ssl_errors();
    return make_error(ec::io_error, "TLS: " + what
                                      + (errs.empty() ? "" : " (" + errs + ")"));
  };
  auto* method = output_method();
  if (ctx == nullptr || method == nullptr)
    return fail("no SSL context or output BIO");
  auto* ssl = SSL_new(ctx.get());
  if (ssl == nullptr)
    return fail("cannot create an SSL session");
  auto* in = BIO_new_socket(fd, BIO_NOCLOSE);
  auto* out = BIO_new(method);
  if (in == nullptr || out == nullptr) {
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl);
    return fail("cannot create the session's BIOs");
  }
  SSL_set_bio(ssl, in, out);
  SSL_set_default_read_buffer_len(ssl, read_buffer);
  std::unique_ptr<tls_session> session{new tls_session(ssl, server)};
  BIO_set_data(out, session.get());
  if (session->continue_handshake(fd) == progress::failed)
    return make_error(ec::io_error,
                      "TLS: the handshake failed at once: "
                        + session->why_failed());
  return session;
}

void tls_session::buffer_output(const char* data, size_t size) {
  out_.insert(out_.end(), data, data + size);
}

bool tls_session::send_buffered(native_socket fd) {
  while (output_pending()) {
    auto n = ::send(fd, out_.data() + out_sent_, out_.size() - out_sent_,
                    MSG_NOSIGNAL);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && would_block(errno)) {
      return true;
    } else {
      return false;
    }
  }
  out_.clear(); // keeps the capacity for the next chunk
  out_sent_ = 0;
  return true;
}

tls_session::progress tls_session::continue_handshake(native_socket fd) {
  auto ret = SSL_do_handshake(ssl_);
  if (!send_buffered(fd)) {
    failure_ = std::string{"cannot send: "} + std::strerror(errno);
    return progress::failed;
  }
  if (ret == 1) {
    handshaking_ = false;
    // From now on read as much as the socket holds, up to read_buffer
    // bytes, rather than each record's header and body with a read() each.
    // Not before: the handshake may end in a write event, and records read
    // ahead then would wait in OpenSSL's buffer with no read event to come.
    SSL_set_read_ahead(ssl_, 1);
    return progress::done;
  }
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return progress::pending;
    case SSL_ERROR_SYSCALL:
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      failure_ = "the peer closed the connection";
      return progress::failed;
    default: {
      // A peer without a certificate of the cluster CA ends here.
      auto errs = take_ssl_errors();
      failure_ = errs.empty() ? "OpenSSL refused the peer" : errs;
      return progress::failed;
    }
  }
}

tls_session::rw_state tls_session::after_failed_call(int ret,
                                                     native_socket fd) {
  auto err = SSL_get_error(ssl_, ret);
  // The call may have produced output (an alert, a key update): it goes out
  // now or with the next write.
  if (!send_buffered(fd))
    return rw_state::failure;
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
    return rw_state::success; // nothing now: the next event brings more
  ERR_clear_error();
  return rw_state::failure;
}

std::optional<tls_session::rw_state>
tls_session::while_handshaking(native_socket fd, rw_state pending) {
  if (!handshaking_)
    return std::nullopt;
  switch (continue_handshake(fd)) {
    case progress::failed:
      return rw_state::failure;
    case progress::pending:
      return pending;
    default:
      return std::nullopt; // done: the call goes on
  }
}

tls_session::rw_state tls_session::read_some(size_t& result, native_socket fd,
                                             void* buf, size_t len) {
  result = 0;
  if (auto state = while_handshaking(fd, rw_state::success))
    return *state;
  if (len == 0)
    return rw_state::indeterminate;
  auto ret = SSL_read(ssl_, buf,
                      static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (ret > 0) {
    result = static_cast<size_t>(ret);
    return rw_state::success;
  }
  return after_failed_call(ret, fd);
}

tls_session::rw_state tls_session::write_some(size_t& result,
                                              native_socket fd,
                                              const void* buf, size_t len) {
  result = 0;
  // A write event with nothing to write and nothing buffered ends the
  // stream's interest in writing; the handshake goes on with reads.
  auto idle = len == 0 && !output_pending() ? rw_state::indeterminate
                                            : rw_state::success;
  if (auto state = while_handshaking(fd, idle))
    return *state;
  if (output_pending()) {
    if (!send_buffered(fd))
      return rw_state::failure;
    if (output_pending())
      return rw_state::success;
  }
  if (owed_ > 0) {
    result = owed_;
    owed_ = 0;
    return rw_state::success;
  }
  if (len == 0)
    return rw_state::indeterminate;
  auto chunk = static_cast<int>(std::min(len, write_chunk));
  auto ret = SSL_write(ssl_, buf, chunk);
  if (ret <= 0)
    return after_failed_call(ret, fd);
  if (!send_buffered(fd))
    return rw_state::failure;
  if (output_pending())
    owed_ = static_cast<size_t>(ret);
  else
    result = static_cast<size_t>(ret);
  return rw_state::success;
}

bool tls_session::must_read_more(native_socket, size_t) {
  // With read-ahead, records can wait in OpenSSL's buffer after the socket
  // is drained, and no event would come for them: the stream reads on
  // until OpenSSL holds nothing or only part of a record (SSL_read then
  // wants the socket and the stream stops).
  return SSL_has_pending(ssl_) == 1;
}

} // namespace syncfac::net
