#include "runtime/net/tls_session.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>
#include <cstdio>
#include <cstring>
#include <vector>

#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "runtime/base/error.hpp"
#include "runtime/net/verified_peers.hpp"

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
  if (registered_)
    check_->peers->remove(peer_node_, *peer_task_);
  SSL_free(ssl_); // frees both BIOs
}

caf::expected<std::unique_ptr<tls_session>>
tls_session::make(const ssl_context_ptr& ctx, native_socket fd, bool server,
                  std::optional<tls_peer_check> check) {
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
  session->check_ = std::move(check);
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
    if (check_) {
      auto hello = continue_hello(fd);
      if (hello != progress::done)
        return hello;
    }
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
      return handshake_failed();
    default: {
      // A peer without a certificate of the cluster CA ends here.
      auto errs = take_ssl_errors();
      failure_ = errs.empty() ? "OpenSSL refused the peer" : errs;
      auto verified = SSL_get_verify_result(ssl_);
      if (verified != X509_V_OK)
        failure_ += std::string{" (the peer's certificate: "}
                    + X509_verify_cert_error_string(verified)
                    + (verified == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
                           || verified
                                == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
                           || verified == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
                         ? "; it is not signed by this cluster's CA"
                         : "")
                    + ")";
      else if (failure_.find("alert unknown ca") != std::string::npos)
        failure_ += " (the peer does not trust this cluster's CA: a node "
                    "of another cluster?)";
      return handshake_failed();
    }
  }
}

// -- the task hello -----------------------------------------------------------

namespace {

constexpr const char* hello_magic = "syncfac-hello/1";

/// The text of a record: up to its first NUL.
std::string record_text(const std::vector<char>& rec) {
  auto end = std::find(rec.begin(), rec.end(), '\0');
  return std::string(rec.begin(), end);
}

/// Lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) {
      out.push_back(text.substr(start));
      break;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

} // namespace

void tls_session::write_record(const std::string& text) {
  std::vector<char> rec(hello_record, '\0');
  std::copy_n(text.begin(), std::min(text.size(), hello_record - 1),
              rec.begin());
  // Our output BIO takes everything: SSL_write cannot come back short.
  SSL_write(ssl_, rec.data(), static_cast<int>(rec.size()));
}

std::optional<bool> tls_session::read_record() {
  while (in_.size() < hello_record) {
    char buf[hello_record];
    auto want = static_cast<int>(hello_record - in_.size());
    auto ret = SSL_read(ssl_, buf, want);
    if (ret > 0) {
      in_.insert(in_.end(), buf, buf + ret);
      continue;
    }
    auto err = SSL_get_error(ssl_, ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
      return false;
    auto errs = take_ssl_errors();
    failure_ = "the peer closed the connection during the task hello"
               + (errs.empty() ? std::string{} : " (" + errs + ")");
    return std::nullopt;
  }
  return true;
}

tls_session::progress tls_session::handshake_failed() {
  // A node of a cluster says so on both sides; a bare link (no check)
  // reports through make's error or the lost connection alone.
  if (check_) {
    auto text = "the TLS handshake with " + check_->peer_address
                + " failed: " + failure_;
    check_->peers->refused(check_->peer_address, text);
    std::fprintf(stderr, "syncfac: TLS: %s\n", text.c_str());
  }
  return progress::failed;
}

tls_session::progress tls_session::hello_failed(std::string why) {
  failure_ = std::move(why);
  check_->peers->refused(check_->peer_address, failure_);
  std::fprintf(stderr, "syncfac: TLS: %s\n", failure_.c_str());
  return progress::failed;
}

tls_session::progress tls_session::continue_hello(native_socket fd) {
  const auto& check = *check_;
  const auto& where = check.peer_address;
  if (hello_ == hello_step::send) {
    write_record(std::string{hello_magic} + "\n" + check.identity->self.str()
                 + "\n" + check.own_node);
    hello_ = hello_step::read_hello;
  }
  if (hello_ == hello_step::read_hello) {
    auto got = read_record();
    if (!got)
      return hello_failed("the peer at " + where + ": " + failure_);
    if (!*got)
      return send_buffered(fd) ? progress::pending
                               : hello_failed("cannot send the hello to "
                                              + where);
    auto fields = lines_of(record_text(in_));
    in_.clear();
    std::string why;
    std::optional<task_id> claimed;
    if (fields.size() != 3 || fields[0] != hello_magic) {
      why = "it sent no syncfac task hello (an older syncfac, or no "
            "syncfac node at all?)";
    } else if (auto t = task_id::parse(fields[1]); !t) {
      why = "its hello names no task ('" + fields[1] + "')";
    } else {
      claimed = *t;
      X509* cert = SSL_get_peer_certificate(ssl_);
      why = peer_refusal(*check.identity, cert, *t, check.dialled);
      X509_free(cert);
    }
    if (!why.empty()) {
      write_record("refused: " + why);
      send_buffered(fd); // the refused side reads why, if it can
      auto text = "refused the peer at " + where
                  + (claimed ? " (claiming " + claimed->str() + ")" : "")
                  + ": " + why;
      return hello_failed(text);
    }
    peer_task_ = claimed;
    peer_node_ = fields[2];
    write_record("ok");
    hello_ = hello_step::read_verdict;
  }
  if (hello_ == hello_step::read_verdict) {
    auto got = read_record();
    if (!got)
      return hello_failed("the peer at " + where + " ("
                          + peer_task_->str() + "): " + failure_);
    if (!*got)
      return send_buffered(fd) ? progress::pending
                               : hello_failed("cannot send the verdict to "
                                              + where);
    auto verdict = record_text(in_);
    in_.clear();
    if (verdict != "ok") {
      auto text = peer_task_->str() + " at " + where + " refused this node ("
                  + check.identity->self.str() + "): "
                  + (verdict.rfind("refused: ", 0) == 0 ? verdict.substr(9)
                                                         : verdict);
      return hello_failed(text);
    }
    check.peers->add(peer_node_, *peer_task_);
    registered_ = true;
    hello_ = hello_step::done;
  }
  if (!send_buffered(fd))
    return hello_failed("cannot send to " + where);
  return progress::done;
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
