#define BOOST_TEST_MODULE runtime_net_tls
#include <boost/test/unit_test.hpp>

// TLS with mutual authentication: load_tls_dir on directories made by
// scripts/make-cluster-certs.sh (and broken on purpose), apply_tls, real
// processes (tls_peer) around a PS shard published over TLS, and large
// messages through the transport between two actor systems.

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <openssl/ssl.h>

#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/net/tls_session.hpp"
#include "runtime/net/tls_transport.hpp"
#include "actors/program_config.hpp"
#include "tests/examples/process.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::test;
namespace fs = std::filesystem;

namespace {

const std::string script = SYNCFAC_SOURCE_DIR "/scripts/make-cluster-certs.sh";
const std::string peer = SYNCFAC_BINARY_DIR "/tests/tls_peer";

std::string quote(const std::string& s) {
  std::string r = "'";
  for (char c : s)
    r += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return r + "'";
}

/// Runs a shell command line; fails the test unless it exits 0.
std::string sh(const std::string& cmd) {
  auto res = test::run_program("bash -c " + quote(cmd));
  BOOST_REQUIRE_MESSAGE(res.exit_code == 0,
                        "command failed (" << res.exit_code << "): " << cmd
                                           << "\n" << res.output);
  return res.output;
}

/// OUT/ca.pem, OUT/ca.key and OUT/NODE/... for each node.
void make_certs(const std::string& out, const std::string& nodes,
                const std::string& options = "") {
  sh(quote(script) + " " + options + " " + quote(out) + " " + nodes);
}

/// Replaces node a's certificate in `dir` (node.pem) with one of its key
/// signed by the cluster's CA through the request `csr`, valid for `days`
/// (negative: expired already), for the extendedKeyUsage `usage`.
void reissue(const std::string& dir, const std::string& csr,
             const std::string& days, const std::string& usage) {
  sh("cd " + quote(dir) + " && openssl req -new -key node.key -subj /CN=a "
     "-out " + csr + " && openssl x509 -req -in " + csr + " -CA ../ca.pem "
     "-CAkey ../ca.key -CAcreateserial -CAserial ../ca.srl -days " + days
     + " -extfile <(printf 'extendedKeyUsage=" + usage + "\\n') "
     "-out node.pem");
}

/// The error of a directory that must be refused; checks its code and that
/// its text names every needle.
std::string refused(const std::string& dir,
                    std::vector<std::string> needles) {
  auto files = net::load_tls_dir(dir);
  BOOST_REQUIRE_MESSAGE(!files, "expected " << dir << " to be refused");
  auto text = render(files.error());
  BOOST_TEST_MESSAGE("refused: " << text);
  BOOST_TEST(files.error().category() == error_category, text);
  BOOST_TEST(static_cast<int>(files.error().code())
               == static_cast<int>(ec::invalid_config),
             text);
  for (const auto& n : needles)
    BOOST_TEST(contains(text, n), "'" << n << "' not in: " << text);
  return text;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::trunc};
  out << text;
}

void copy_over(const std::string& from, const std::string& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

/// One cluster (CA + nodes "a" and "b") in a temp dir.
struct cluster {
  test::temp_dir tmp;
  std::string dir(const std::string& node) const {
    return tmp.file(node);
  }
  explicit cluster(const std::string& options = "") {
    make_certs(tmp.path(), "a b", options);
  }
};

// -- a child process with stdin and stdout pipes ---------------------------

struct child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
  std::string buffered;
  std::string transcript;

  explicit child(const std::vector<std::string>& args) {
    int in[2];
    int out[2];
    BOOST_REQUIRE(pipe(in) == 0 && pipe(out) == 0);
    pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child = in[1];
    from_child = out[0];
  }

  /// The next line of output, or nothing within `timeout`.
  std::optional<std::string> read_line(std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = buffered.find('\n');
      if (nl != std::string::npos) {
        auto line = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        transcript += line + "\n";
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
      if (left <= 0)
        return std::nullopt;
      pollfd p{from_child, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0)
        continue;
      char buf[4096];
      auto n = ::read(from_child, buf, sizeof(buf));
      if (n <= 0)
        return std::nullopt;
      buffered.append(buf, static_cast<size_t>(n));
    }
  }

  /// The next line that starts with `prefix` (others are skipped).
  std::string expect_line(const std::string& prefix) {
    for (;;) {
      auto line = read_line(std::chrono::seconds{30});
      BOOST_REQUIRE_MESSAGE(line, "no line '" << prefix << "...' from the "
                                              "server; it wrote:\n"
                                              << transcript);
      if (line->rfind(prefix, 0) == 0)
        return *line;
    }
  }

  void send(const std::string& line) {
    auto text = line + "\n";
    BOOST_REQUIRE(::write(to_child, text.data(), text.size())
                  == static_cast<ssize_t>(text.size()));
  }

  /// Closes stdin and waits for the exit code (kills after 20 s).
  int finish() {
    if (to_child >= 0) {
      close(to_child);
      to_child = -1;
    }
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status)
                                 : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    pid = -1;
    return -1;
  }

  ~child() {
    if (to_child >= 0)
      close(to_child);
    if (pid > 0) {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
    }
    close(from_child);
  }

  child(const child&) = delete;
  child& operator=(const child&) = delete;
};

/// A server process publishing its PS shard; its port.
struct server {
  child proc;
  int port = 0;
  explicit server(std::vector<std::string> args) : proc(std::move(args)) {
    auto line = proc.expect_line("PORT ");
    port = std::stoi(line.substr(5));
    BOOST_REQUIRE(port > 0);
  }
  std::string status() {
    proc.send("status");
    return proc.expect_line("STATUS");
  }
};

test::process_result run_client(int port, const std::string& tls_options) {
  return test::run_program(peer + " client --port " + std::to_string(port)
                           + " --timeout 20 " + tls_options);
}

} // namespace

// -- the script -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(script_makes_a_ca_and_node_directories) {
  test::temp_dir tmp;
  auto out = tmp.file("certs");
  make_certs(out, "chief worker0 10.0.0.2");
  for (auto f : {"ca.pem", "ca.key", "chief/ca.pem", "chief/node.pem",
                 "chief/node.key", "worker0/node.pem", "10.0.0.2/node.pem"})
    BOOST_TEST(fs::exists(out + "/" + f), f);
  BOOST_TEST(!fs::exists(out + "/chief/passphrase.txt"));
  auto text = sh("openssl x509 -in " + out + "/chief/node.pem -noout -text");
  BOOST_TEST(contains(text, "DNS:localhost"));
  BOOST_TEST(contains(text, "IP Address:127.0.0.1"));
  BOOST_TEST(contains(text, "DNS:chief"));
  BOOST_TEST(contains(text, "TLS Web Client Authentication"));
  BOOST_TEST(contains(sh("openssl x509 -in " + out
                         + "/10.0.0.2/node.pem -noout -text"),
                      "IP Address:10.0.0.2"));
  // Re-running keeps what is valid and adds what is new.
  auto before = test::read_file(out + "/chief/node.pem");
  auto log = sh(quote(script) + " " + out + " chief ps0");
  BOOST_TEST(contains(log, "kept"), log);
  BOOST_TEST(test::read_file(out + "/chief/node.pem") == before);
  BOOST_TEST(fs::exists(out + "/ps0/node.pem"));
  // The default node, and clear refusals.
  make_certs(tmp.file("one"), "");
  BOOST_TEST(fs::exists(tmp.file("one/node/node.pem")));
  auto bad = test::run_program(quote(script) + " " + out + " ../escape");
  BOOST_TEST(bad.exit_code != 0);
  BOOST_TEST(contains(bad.output, "bad node name"), bad.output);
  auto nopass = test::run_program(quote(script) + " --passphrase abc "
                                  + tmp.file("p"));
  BOOST_TEST(nopass.exit_code != 0);
  BOOST_TEST(contains(nopass.output, "at least 4"), nopass.output);
}

// -- load_tls_dir -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(accepts_a_good_directory) {
  cluster c;
  auto files = net::load_tls_dir(c.dir("a"));
  BOOST_REQUIRE_MESSAGE(files, test::why(files));
  BOOST_TEST(files->cafile == c.dir("a") + "/ca.pem");
  BOOST_TEST(files->certificate == c.dir("a") + "/node.pem");
  BOOST_TEST(files->key == c.dir("a") + "/node.key");
  BOOST_TEST(files->passphrase.empty());
  BOOST_TEST(fs::path{files->key}.is_absolute());
}

BOOST_AUTO_TEST_CASE(accepts_an_encrypted_key_with_its_passphrase) {
  cluster c{"--passphrase 's3cret pass'"};
  auto files = net::load_tls_dir(c.dir("b"));
  BOOST_REQUIRE_MESSAGE(files, test::why(files));
  BOOST_TEST(files->passphrase == "s3cret pass");
}

// -- the SSL context ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(two_nodes_agree_on_tls13_with_aes128_gcm) {
  cluster c;
  auto client_files = net::load_tls_dir(c.dir("a"));
  auto server_files = net::load_tls_dir(c.dir("b"));
  BOOST_REQUIRE(client_files && server_files);
  auto client_ctx = net::make_ssl_context(*client_files);
  auto server_ctx = net::make_ssl_context(*server_files);
  BOOST_REQUIRE_MESSAGE(client_ctx, test::why(client_ctx));
  BOOST_REQUIRE_MESSAGE(server_ctx, test::why(server_ctx));
  int fds[2];
  BOOST_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  std::unique_ptr<SSL, decltype(&SSL_free)> client{SSL_new(client_ctx->get()),
                                                   SSL_free};
  std::unique_ptr<SSL, decltype(&SSL_free)> server{SSL_new(server_ctx->get()),
                                                   SSL_free};
  SSL_set_fd(client.get(), fds[0]);
  SSL_set_fd(server.get(), fds[1]);
  int accepted = 0;
  std::thread acceptor{[&] { accepted = SSL_accept(server.get()); }};
  auto connected = SSL_connect(client.get());
  if (connected != 1) // a failed client must not leave the acceptor waiting
    shutdown(fds[0], SHUT_RDWR);
  acceptor.join();
  close(fds[0]);
  close(fds[1]);
  BOOST_REQUIRE(connected == 1);
  BOOST_REQUIRE(accepted == 1);
  BOOST_TEST(SSL_version(client.get()) == TLS1_3_VERSION);
  BOOST_TEST(std::string{SSL_get_cipher_name(client.get())}
             == "TLS_AES_128_GCM_SHA256");
  BOOST_TEST(std::string{SSL_get_cipher_name(server.get())}
             == "TLS_AES_128_GCM_SHA256");
}

BOOST_AUTO_TEST_CASE(refuses_a_missing_directory_or_file) {
  cluster c;
  refused(c.dir("nowhere"), {"nowhere", "does not exist"});
  refused(c.dir("a") + "/node.pem", {"is not a directory"});
  fs::remove(c.dir("a") + "/node.key");
  refused(c.dir("a"), {"a/node.key", "does not exist"});
  fs::remove(c.dir("b") + "/ca.pem");
  refused(c.dir("b"), {"b/ca.pem", "does not exist"});
}

BOOST_AUTO_TEST_CASE(refuses_an_unreadable_or_empty_file) {
  cluster c;
  write(c.dir("a") + "/node.pem", "");
  refused(c.dir("a"), {"node.pem", "is empty"});
  if (geteuid() != 0) { // root reads anything
    fs::permissions(c.dir("b") + "/node.key", fs::perms::none);
    refused(c.dir("b"), {"node.key", "cannot be read"});
  }
}

BOOST_AUTO_TEST_CASE(refuses_a_key_others_may_read) {
  // As ssh refuses a private key: group or other bits on the key or its
  // passphrase file are refused, naming the file, the mode and the fix.
  cluster c{"--passphrase s3cret-pass"};
  const auto key = c.dir("a") + "/node.key";
  BOOST_TEST(static_cast<bool>(net::load_tls_dir(c.dir("a"))));
  BOOST_TEST(((fs::status(key).permissions() & fs::perms::mask)
              == (fs::perms::owner_read | fs::perms::owner_write)));
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write
                         | fs::perms::group_read);
  refused(c.dir("a"), {"a/node.key", "its group", "0640", "chmod 600"});
  fs::permissions(key, fs::perms::owner_read | fs::perms::others_read);
  refused(c.dir("a"), {"a/node.key", "other users", "0404"});
  fs::permissions(key, fs::perms::owner_read);
  BOOST_TEST(static_cast<bool>(net::load_tls_dir(c.dir("a"))));
  const auto pass = c.dir("b") + "/passphrase.txt";
  fs::permissions(pass, fs::perms::owner_read | fs::perms::owner_write
                          | fs::perms::group_read | fs::perms::others_read);
  refused(c.dir("b"), {"b/passphrase.txt", "its group and other users",
                       "0644"});
}

BOOST_AUTO_TEST_CASE(refuses_garbage_pem) {
  cluster c;
  write(c.dir("a") + "/node.pem", "this is not a certificate\n");
  refused(c.dir("a"), {"a/node.pem", "holds no PEM certificate"});
  write(c.dir("b") + "/node.key", "-----BEGIN PRIVATE KEY-----\nbm9wZQ==\n"
                                  "-----END PRIVATE KEY-----\n");
  refused(c.dir("b"), {"b/node.key", "holds no PEM private key"});
  cluster d;
  // A certificate whose body is cut in half.
  auto pem = test::read_file(d.dir("a") + "/ca.pem");
  write(d.dir("a") + "/ca.pem", pem.substr(0, pem.size() / 2)
                                  + "\n-----END CERTIFICATE-----\n");
  refused(d.dir("a"), {"a/ca.pem"});
}

BOOST_AUTO_TEST_CASE(refuses_the_key_of_another_certificate) {
  cluster c;
  copy_over(c.dir("b") + "/node.key", c.dir("a") + "/node.key");
  refused(c.dir("a"), {"a/node.key", "does not belong to the certificate",
                       "CN=a"});
}

BOOST_AUTO_TEST_CASE(refuses_a_certificate_of_another_ca) {
  cluster c;
  cluster other;
  copy_over(other.dir("a") + "/node.pem", c.dir("a") + "/node.pem");
  copy_over(other.dir("a") + "/node.key", c.dir("a") + "/node.key");
  refused(c.dir("a"), {"a/node.pem", "does not verify against",
                       "not signed by this cluster's CA"});
  // A node certificate in place of the CA's.
  copy_over(c.dir("b") + "/node.pem", c.dir("b") + "/ca.pem");
  refused(c.dir("b"), {"b/ca.pem", "is not a CA certificate"});
}

BOOST_AUTO_TEST_CASE(refuses_a_wrong_or_missing_passphrase) {
  cluster c{"--passphrase right-one"};
  write(c.dir("a") + "/passphrase.txt", "wrong-one\n");
  refused(c.dir("a"), {"a/node.key", "does not decrypt", "wrong passphrase"});
  fs::remove(c.dir("b") + "/passphrase.txt");
  refused(c.dir("b"), {"b/node.key", "encrypted", "no passphrase.txt"});
  write(c.dir("b") + "/passphrase.txt", "\n");
  fs::permissions(c.dir("b") + "/passphrase.txt",
                  fs::perms::owner_read | fs::perms::owner_write);
  refused(c.dir("b"), {"b/passphrase.txt", "empty"});
}

BOOST_AUTO_TEST_CASE(refuses_an_expired_certificate) {
  cluster c;
  // openssl x509 -req takes a negative -days: notAfter one day before
  // notBefore (now), i.e. expired.
  auto a = c.dir("a");
  reissue(a, "old.csr", "-1", "serverAuth,clientAuth");
  refused(a, {"a/node.pem", "has expired", "notAfter"});
}

BOOST_AUTO_TEST_CASE(refuses_a_certificate_only_for_servers) {
  cluster c;
  auto a = c.dir("a");
  reissue(a, "srv.csr", "30", "serverAuth");
  refused(a, {"a/node.pem", "lacks clientAuth"});
}

// -- apply_tls ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(apply_tls_sets_the_openssl_options) {
  cluster c{"--passphrase abcd1234"};
  auto files = net::load_tls_dir(c.dir("a"));
  BOOST_REQUIRE_MESSAGE(files, test::why(files));
  program_config cfg;
  auto modules = cfg.module_factories.size();
  BOOST_REQUIRE(!net::apply_tls(cfg, *files));
  BOOST_TEST(cfg.openssl_certificate == files->certificate);
  BOOST_TEST(cfg.openssl_key == files->key);
  BOOST_TEST(cfg.openssl_cafile == files->cafile);
  BOOST_TEST(cfg.openssl_passphrase == "abcd1234");
  BOOST_TEST(caf::get_or(cfg, "openssl.certificate", std::string{})
             == files->certificate);
  BOOST_TEST(caf::get_or(cfg, "openssl.cafile", std::string{})
             == files->cafile);
  // No module: the runtime's own transport reads these options.
  BOOST_TEST(cfg.module_factories.size() == modules);
  // Parsing a command line afterwards keeps them.
  char prog[] = "prog";
  char* argv[] = {prog, nullptr};
  BOOST_REQUIRE(!cfg.parse_cli(1, argv));
  BOOST_TEST(cfg.openssl_certificate == files->certificate);
  BOOST_TEST(cfg.openssl_key == files->key);
  BOOST_TEST(cfg.openssl_passphrase == "abcd1234");
}

BOOST_AUTO_TEST_CASE(apply_tls_refuses_half_configured_files) {
  cluster c;
  auto files = net::load_tls_dir(c.dir("a"));
  BOOST_REQUIRE_MESSAGE(files, test::why(files));
  auto check = [&](net::tls_files f, const std::string& needle) {
    program_config cfg;
    auto modules = cfg.module_factories.size();
    auto err = net::apply_tls(cfg, f);
    BOOST_REQUIRE_MESSAGE(err, "expected a refusal: " << needle);
    BOOST_TEST(contains(render(err), needle), render(err));
    BOOST_TEST(cfg.openssl_certificate.empty());
    BOOST_TEST(cfg.module_factories.size() == modules);
  };
  auto f = *files;
  f.key.clear();
  check(f, "half-configured");
  f = *files;
  f.cafile.clear();
  check(f, "half-configured");
  f = *files;
  f.key = c.dir("b") + "/node.key";
  check(f, "does not belong");
  f = *files;
  f.passphrase = "not needed"; // a plain key ignores a passphrase
  program_config cfg;
  BOOST_TEST(!net::apply_tls(cfg, f));
}

// -- real processes -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(only_ca_signed_peers_reach_a_shard_over_tls) {
  // The cluster's keys are encrypted: the passphrase reaches CAF too.
  test::temp_dir tmp;
  make_certs(tmp.file("cluster"), "server client", "--passphrase cluster-pw");
  make_certs(tmp.file("rogue"), "client");
  server srv{{peer, "serve", "--tls_dir", tmp.file("cluster/server")}};
  BOOST_TEST_MESSAGE("server on port " << srv.port);

  // A certificate of another CA: refused at the handshake.
  auto rogue = run_client(srv.port, "--tls_dir " + tmp.file("rogue/client"));
  BOOST_TEST_MESSAGE("other CA: " << rogue.output);
  BOOST_TEST(rogue.exit_code == 4, rogue.output);
  BOOST_TEST(contains(rogue.output, "CONNECT FAILED"), rogue.output);
  BOOST_TEST(!contains(rogue.output, "CONNECTED"), rogue.output);
  BOOST_TEST(!contains(rogue.output, "PUSHED"), rogue.output);

  // TLS without a certificate (anonymous cipher): refused.
  auto anon = run_client(srv.port, "--tls_anon");
  BOOST_TEST_MESSAGE("TLS without certificate: " << anon.output);
  BOOST_TEST(anon.exit_code == 4, anon.output);
  BOOST_TEST(contains(anon.output, "CONNECT FAILED"), anon.output);
  BOOST_TEST(!contains(anon.output, "CONNECTED"), anon.output);

  // Plain TCP against the TLS port: the server drops the connection.
  auto plain = run_client(srv.port, "");
  BOOST_TEST_MESSAGE("plain TCP: " << plain.output);
  BOOST_TEST(plain.exit_code == 4, plain.output);
  BOOST_TEST(contains(plain.output, "CONNECT FAILED"), plain.output);
  BOOST_TEST(!contains(plain.output, "CONNECTED"), plain.output);

  // The shard saw nothing of the rogues, and still serves.
  BOOST_TEST(srv.status() == "STATUS step=0 accepted=0 stale=0 refused=0");

  // A client of the cluster pushes, has the push applied, and pulls.
  auto good = run_client(srv.port, "--tls_dir " + tmp.file("cluster/client"));
  BOOST_TEST_MESSAGE("cluster client: " << good.output);
  BOOST_TEST(good.exit_code == 0, good.output);
  BOOST_TEST(contains(good.output, "CONNECTED"), good.output);
  BOOST_TEST(contains(good.output, "PUSHED accepted=1"), good.output);
  BOOST_TEST(contains(good.output, "PULLED step=1 w=0.5,1.5,2.5,3.5"),
             good.output);
  BOOST_TEST(srv.status() == "STATUS step=1 accepted=1 stale=0 refused=0");
  BOOST_TEST(srv.proc.finish() == 0, srv.proc.transcript);
}

BOOST_AUTO_TEST_CASE(a_plain_server_refuses_a_tls_client) {
  test::temp_dir tmp;
  make_certs(tmp.file("cluster"), "client");
  server srv{{peer, "serve"}};
  auto tls = run_client(srv.port, "--tls_dir " + tmp.file("cluster/client"));
  BOOST_TEST_MESSAGE("TLS client, plain server: " << tls.output);
  BOOST_TEST(tls.exit_code == 4, tls.output);
  BOOST_TEST(contains(tls.output, "CONNECT FAILED"), tls.output);
  BOOST_TEST(!contains(tls.output, "CONNECTED"), tls.output);
  BOOST_TEST(srv.status() == "STATUS step=0 accepted=0 stale=0 refused=0");
  BOOST_TEST(srv.proc.finish() == 0, srv.proc.transcript);
}

BOOST_AUTO_TEST_CASE(half_configured_tls_stops_before_caf) {
  test::temp_dir tmp;
  make_certs(tmp.file("cluster"), "server", "--passphrase cluster-pw");
  fs::remove(tmp.file("cluster/server/passphrase.txt"));
  // CAF itself would ask for the passphrase on the terminal (and hang).
  auto res = test::run_program(peer + " serve --tls_dir "
                               + tmp.file("cluster/server") + " < /dev/null");
  BOOST_TEST(res.exit_code == 3, res.output);
  BOOST_TEST(contains(res.output, "TLS REFUSED"), res.output);
  BOOST_TEST(contains(res.output, "no passphrase.txt"), res.output);
  BOOST_TEST(!contains(res.output, "PORT"), res.output);
}

// -- the transport ------------------------------------------------------------

namespace {

/// A system configured with DIR's TLS files (apply_tls).
struct tls_system {
  program_config cfg;
  std::optional<caf::actor_system> sys;
  explicit tls_system(const std::string& dir) {
    auto files = net::load_tls_dir(dir);
    BOOST_REQUIRE_MESSAGE(files, test::why(files));
    BOOST_REQUIRE(!net::apply_tls(cfg, *files));
    sys.emplace(cfg);
  }
};

caf::behavior echo() {
  return {[](const tensor& x) { return x; }};
}

/// Distinct values at every position, so that a shifted, truncated or
/// repeated piece of the stream shows.
tensor numbered(int64_t n, float offset) {
  tensor t{{n}};
  for (int64_t i = 0; i < n; ++i)
    t[i] = offset + static_cast<float>(i % 1000003);
  return t;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_transport_needs_apply_tls) {
  program_config cfg;
  caf::actor_system sys{cfg};
  auto mm = net::tls_middleman(sys);
  BOOST_REQUIRE(!mm);
  BOOST_TEST(contains(render(mm.error()), "apply_tls"), render(mm.error()));
  auto port = net::tls_publish(sys.spawn(echo), 0, "127.0.0.1");
  BOOST_REQUIRE(!port);
  BOOST_TEST(contains(render(port.error()), "no TLS files"),
             render(port.error()));
}

// Messages far larger than one write chunk and the sockets' buffers, many
// in flight at once both ways, so that sends stop half way and resume:
// every value must arrive once, in place, over TLS between two systems.
BOOST_AUTO_TEST_CASE(large_messages_cross_the_tls_transport_intact) {
  cluster c;
  std::vector<int64_t> sizes{1, 65537, 4 << 20, (4 << 20) + 3, 1 << 18};
  {
    tls_system server{c.dir("a")};
    tls_system client{c.dir("b")};
    auto echoer = server.sys->spawn(echo);
    auto port = net::tls_publish(echoer, 0, "127.0.0.1");
    BOOST_REQUIRE_MESSAGE(port, test::why(port));
    auto remote = net::tls_remote_actor<caf::actor>(*client.sys, "127.0.0.1",
                                                   *port);
    BOOST_REQUIRE_MESSAGE(remote, test::why(remote));
    caf::scoped_actor self{*client.sys};
    for (size_t i = 0; i < sizes.size(); ++i)
      self->send(*remote, numbered(sizes[i], static_cast<float>(i)));
    // Echoes come back in order: one connection, one actor.
    for (size_t i = 0; i < sizes.size(); ++i) {
      bool received = false;
      self->receive(
        [&](const tensor& back) {
          received = true;
          BOOST_TEST(back == numbered(sizes[i], static_cast<float>(i)),
                     "message " << i << " of " << sizes[i] << " floats");
        },
        caf::after(std::chrono::seconds{60}) >>
          [&] { BOOST_FAIL("no echo of message " << i << " within 60 s"); });
      BOOST_TEST(received);
    }
    caf::anon_send_exit(echoer, caf::exit_reason::user_shutdown);
  }
  // Both systems shut down (the TLS middleman ends with CAF's): reaching
  // here is the check, the suite's timeout the failure.
}
