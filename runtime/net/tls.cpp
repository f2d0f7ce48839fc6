#include "runtime/net/tls.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "runtime/base/error.hpp"
#include "runtime/net/tls_session.hpp"

namespace syncfac::net {

std::string take_ssl_errors() {
  std::string result;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (result.find(buf) != std::string::npos)
      continue; // OpenSSL repeats itself across its layers
    if (!result.empty())
      result += "; ";
    result += buf;
  }
  return result;
}

namespace {

namespace fs = std::filesystem;

/// An OpenSSL object's deleter for std::unique_ptr: its type's own free
/// function.
template <auto Free>
struct openssl_free {
  template <class T>
  void operator()(T* p) const noexcept {
    Free(p);
  }
};

/// sk_X509_free is a macro in OpenSSL 3, so no template argument.
struct stack_free {
  void operator()(STACK_OF(X509) * p) const noexcept {
    sk_X509_free(p); // the certificates are owned elsewhere
  }
};

using bio_ptr = std::unique_ptr<BIO, openssl_free<BIO_free>>;
using x509_ptr = std::unique_ptr<X509, openssl_free<X509_free>>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, openssl_free<EVP_PKEY_free>>;

caf::error fail(const std::string& path, const std::string& problem) {
  return make_error(ec::invalid_config, "TLS: " + path + ": " + problem);
}

std::string with_ssl_errors(std::string problem) {
  auto errs = take_ssl_errors();
  if (!errs.empty())
    problem += " (OpenSSL: " + errs + ")";
  return problem;
}

/// The whole file; an error that says whether it is missing, not a regular
/// file, unreadable or empty.
caf::expected<std::string> read_whole(const std::string& path) {
  std::error_code err;
  auto st = fs::status(path, err);
  if (!fs::exists(st))
    return fail(path, "does not exist");
  if (!fs::is_regular_file(st))
    return fail(path, "is not a regular file");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return fail(path, std::string{"cannot be read: "} + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    return fail(path, "read error");
  auto text = ss.str();
  if (text.empty())
    return fail(path, "is empty");
  return text;
}

bio_ptr memory_bio(const std::string& text) {
  return bio_ptr{BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))};
}

std::string subject_of(X509* cert) {
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

std::string time_text(const ASN1_TIME* t) {
  bio_ptr out{BIO_new(BIO_s_mem())};
  if (!out || ASN1_TIME_print(out.get(), t) != 1)
    return "?";
  char* data = nullptr;
  auto n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

/// Every certificate of a PEM file, in order; an error when it holds none
/// or a block that does not parse.
caf::expected<std::vector<x509_ptr>> read_certificates(const std::string& path) {
  auto text = read_whole(path);
  if (!text)
    return text.error();
  ERR_clear_error();
  auto bio = memory_bio(*text);
  std::vector<x509_ptr> certs;
  while (auto* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    certs.emplace_back(cert);
  // Reading stops with "no start line" at the end of the file; any other
  // error is a block that did not parse.
  auto last = ERR_peek_last_error();
  bool clean_end = ERR_GET_LIB(last) == ERR_LIB_PEM
                   && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (certs.empty())
    return fail(path, with_ssl_errors("holds no PEM certificate"));
  if (last != 0 && !clean_end)
    return fail(path, with_ssl_errors("certificate "
                                      + std::to_string(certs.size() + 1)
                                      + " does not parse"));
  ERR_clear_error();
  return certs;
}

struct passphrase_call {
  const std::string* passphrase = nullptr;
  bool asked = false;
};

int passphrase_cb(char* buf, int size, int, void* user) {
  auto* call = static_cast<passphrase_call*>(user);
  call->asked = true;
  const auto& p = *call->passphrase;
  if (p.empty() || size <= 0)
    return -1;
  auto n = std::min(p.size(), static_cast<size_t>(size));
  std::memcpy(buf, p.data(), n);
  return static_cast<int>(n);
}

/// The private key of a PEM file, decrypted with `passphrase` if needed.
caf::expected<pkey_ptr> read_key(const std::string& path,
                                 const std::string& passphrase) {
  auto text = read_whole(path);
  if (!text)
    return text.error();
  ERR_clear_error();
  auto bio = memory_bio(*text);
  passphrase_call call{&passphrase};
  pkey_ptr key{PEM_read_bio_PrivateKey(bio.get(), nullptr, passphrase_cb,
                                       &call)};
  if (key) {
    ERR_clear_error();
    return key;
  }
  bool encrypted = call.asked
                   || text->find("ENCRYPTED") != std::string::npos;
  if (encrypted && passphrase.empty()) {
    ERR_clear_error(); // only says that no passphrase came
    return fail(path, "the key is encrypted but there is no passphrase.txt "
                      "next to it");
  }
  if (encrypted)
    return fail(path, with_ssl_errors("the key does not decrypt: wrong "
                                      "passphrase in passphrase.txt, or a "
                                      "corrupt key"));
  return fail(path, with_ssl_errors("holds no PEM private key"));
}

/// Not expired and already valid.
caf::error check_dates(const std::string& path, X509* cert,
                       const std::string& what) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0)
    return fail(path, what + " (" + subject_of(cert)
                        + ") is not valid yet: notBefore "
                        + time_text(X509_get0_notBefore(cert)));
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
    return fail(path, what + " (" + subject_of(cert) + ") has expired: "
                        + "notAfter " + time_text(X509_get0_notAfter(cert)));
  return caf::none;
}

/// A secret (the key, its passphrase) must be the owner's alone: refused,
/// as ssh refuses a private key, when its group or others may read or write
/// it (docs/tls.md, "Files nobody else may read").
caf::error check_private(const std::string& path, const char* what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return caf::none; // reading it names the problem
  auto shared = st.st_mode & 077;
  if (shared == 0)
    return caf::none;
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
  return fail(path, std::string{what} + " is open to "
                      + ((st.st_mode & 070) != 0 ? "its group" : "")
                      + ((st.st_mode & 070) != 0 && (st.st_mode & 07) != 0
                           ? " and "
                           : "")
                      + ((st.st_mode & 07) != 0 ? "other users" : "")
                      + " (mode " + mode + "): chmod 600 " + path
                      + " (a secret must be its owner's alone, as ssh "
                        "requires of a private key)");
}

caf::expected<std::string> read_passphrase(const std::string& path) {
  if (auto err = check_private(path, "the key's passphrase file"))
    return err;
  auto text = read_whole(path);
  if (!text)
    return text.error();
  auto line = text->substr(0, text->find('\n'));
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  if (line.empty())
    return fail(path, "the first line (the key's passphrase) is empty");
  return line;
}

/// Every check of load_tls_dir on files whose paths are known.
caf::error check_files(const tls_files& files) {
  for (const auto* p : {&files.cafile, &files.certificate, &files.key})
    if (p->empty())
      return make_error(ec::invalid_config,
                        "TLS: half-configured: the CA file, certificate "
                        "and key must all be given");
  // The CA.
  auto ca = read_certificates(files.cafile);
  if (!ca)
    return ca.error();
  for (auto& c : *ca) {
    if (X509_check_ca(c.get()) < 1)
      return fail(files.cafile, "certificate (" + subject_of(c.get())
                                  + ") is not a CA certificate");
    if (auto err = check_dates(files.cafile, c.get(), "CA certificate"))
      return err;
  }
  // The node's certificate (and any intermediates after it).
  auto chain = read_certificates(files.certificate);
  if (!chain)
    return chain.error();
  X509* leaf = chain->front().get();
  if (auto err = check_dates(files.certificate, leaf, "certificate"))
    return err;
  // The key.
  if (auto err = check_private(files.key, "the private key"))
    return err;
  auto key = read_key(files.key, files.passphrase);
  if (!key)
    return key.error();
  ERR_clear_error();
  if (X509_check_private_key(leaf, key->get()) != 1)
    return fail(files.key,
                with_ssl_errors("does not belong to the certificate in "
                                + files.certificate + " ("
                                + subject_of(leaf) + ")"));
  // Signed by the CA.
  std::unique_ptr<X509_STORE, openssl_free<X509_STORE_free>> store{
    X509_STORE_new()};
  std::unique_ptr<X509_STORE_CTX, openssl_free<X509_STORE_CTX_free>> vctx{
    X509_STORE_CTX_new()};
  std::unique_ptr<STACK_OF(X509), stack_free> untrusted{sk_X509_new_null()};
  if (!store || !vctx || !untrusted)
    return make_error(ec::internal, "TLS: out of memory");
  for (auto& c : *ca)
    if (X509_STORE_add_cert(store.get(), c.get()) != 1)
      return fail(files.cafile, with_ssl_errors("cannot be used as a trust "
                                                "anchor"));
  for (size_t i = 1; i < chain->size(); ++i)
    sk_X509_push(untrusted.get(), (*chain)[i].get());
  if (X509_STORE_CTX_init(vctx.get(), store.get(), leaf, untrusted.get())
      != 1)
    return make_error(ec::internal, with_ssl_errors("TLS: cannot verify"));
  if (X509_verify_cert(vctx.get()) != 1) {
    auto code = X509_STORE_CTX_get_error(vctx.get());
    std::string problem = "certificate (" + subject_of(leaf)
                          + ") does not verify against " + files.cafile
                          + ": " + X509_verify_cert_error_string(code);
    if (code == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
        || code == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
        || code == X509_V_ERR_CERT_SIGNATURE_FAILURE
        || code == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT)
      problem += " (it is not signed by this cluster's CA)";
    ERR_clear_error();
    return fail(files.certificate, problem);
  }
  // Every node both accepts and opens connections.
  if (X509_check_purpose(leaf, X509_PURPOSE_SSL_SERVER, 0) != 1)
    return fail(files.certificate,
                "certificate cannot authenticate a TLS server (its key "
                "usage or extended key usage lacks serverAuth)");
  if (X509_check_purpose(leaf, X509_PURPOSE_SSL_CLIENT, 0) != 1)
    return fail(files.certificate,
                "certificate cannot authenticate a TLS client (its key "
                "usage or extended key usage lacks clientAuth)");
  ERR_clear_error();
  // Last, the context the transport will build from them.
  auto ctx = make_ssl_context(files);
  return ctx ? caf::none : ctx.error();
}

} // namespace

caf::expected<tls_files> load_tls_dir(const std::string& dir) {
  if (dir.empty())
    return make_error(ec::invalid_config, "TLS: the TLS directory is empty");
  std::error_code err;
  auto st = fs::status(dir, err);
  if (!fs::exists(st))
    return fail(dir, "TLS directory does not exist");
  if (!fs::is_directory(st))
    return fail(dir, "is not a directory");
  return load_tls_files(dir, "node.pem", "node.key", "passphrase.txt");
}

caf::expected<tls_files> load_tls_files(const std::string& dir,
                                        const std::string& certificate,
                                        const std::string& key,
                                        const std::string& passphrase) {
  std::error_code err;
  auto abs = fs::absolute(dir, err);
  if (err)
    return fail(dir, "cannot make the path absolute: " + err.message());
  abs = abs.lexically_normal();
  tls_files files;
  files.cafile = (abs / "ca.pem").string();
  files.certificate = (abs / certificate).string();
  files.key = (abs / key).string();
  auto pass_path = (abs / passphrase).string();
  if (fs::exists(pass_path, err)) {
    auto pass = read_passphrase(pass_path);
    if (!pass)
      return pass.error();
    files.passphrase = std::move(*pass);
  }
  if (auto check = check_files(files))
    return check;
  return files;
}

caf::expected<ssl_context_ptr> make_ssl_context(const tls_files& files) {
  ERR_clear_error();
  ssl_context_ptr ctx{SSL_CTX_new(TLS_method()), SSL_CTX_free};
  if (!ctx)
    return make_error(ec::internal,
                      with_ssl_errors("TLS: cannot create an SSL context"));
  auto* raw = ctx.get();
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(raw, files.certificate.c_str()) != 1)
    return fail(files.certificate,
                with_ssl_errors("OpenSSL refuses the certificate chain"));
  passphrase_call call{&files.passphrase};
  SSL_CTX_set_default_passwd_cb(raw, passphrase_cb);
  SSL_CTX_set_default_passwd_cb_userdata(raw, &call);
  auto key_loaded = SSL_CTX_use_PrivateKey_file(raw, files.key.c_str(),
                                                SSL_FILETYPE_PEM);
  // The callback's data lives on this stack: no later call may use it.
  SSL_CTX_set_default_passwd_cb(raw, nullptr);
  SSL_CTX_set_default_passwd_cb_userdata(raw, nullptr);
  if (key_loaded != 1)
    return fail(files.key, with_ssl_errors("OpenSSL refuses the private key"));
  if (SSL_CTX_check_private_key(raw) != 1)
    return fail(files.key,
                with_ssl_errors("does not belong to " + files.certificate));
  if (SSL_CTX_load_verify_locations(raw, files.cafile.c_str(), nullptr) != 1)
    return fail(files.cafile,
                with_ssl_errors("OpenSSL refuses the CA certificates"));
  SSL_CTX_set_verify(raw, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  if (SSL_CTX_set_cipher_list(raw, "HIGH:!aNULL:!MD5") != 1)
    return make_error(ec::internal,
                      with_ssl_errors("TLS: cannot set the cipher list"));
  // TLS 1.3 (what two nodes negotiate): AES-128-GCM first. It is ~10 %
  // cheaper per byte than OpenSSL's default first choice, AES-256-GCM,
  // and encryption is most of what TLS costs a gradient push.
  if (SSL_CTX_set_ciphersuites(raw, "TLS_AES_128_GCM_SHA256:"
                                    "TLS_AES_256_GCM_SHA384:"
                                    "TLS_CHACHA20_POLY1305_SHA256")
      != 1)
    return make_error(ec::internal,
                      with_ssl_errors("TLS: cannot set the TLS 1.3 suites"));
  // Nodes reconnect with a full handshake: tickets would only cost a
  // message after every handshake.
  SSL_CTX_set_num_tickets(raw, 0);
  SSL_CTX_set_options(raw, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  ERR_clear_error();
  return ctx;
}

caf::error apply_tls(caf::actor_system_config& cfg, const tls_files& files) {
  if (auto err = check_files(files))
    return err;
  cfg.openssl_certificate = files.certificate;
  cfg.openssl_key = files.key;
  cfg.openssl_passphrase = files.passphrase;
  cfg.openssl_cafile = files.cafile;
  cfg.openssl_capath.clear();
  cfg.set("openssl.certificate", files.certificate);
  cfg.set("openssl.key", files.key);
  cfg.set("openssl.passphrase", files.passphrase);
  cfg.set("openssl.cafile", files.cafile);
  return caf::none;
}

} // namespace syncfac::net
