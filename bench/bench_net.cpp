// Network speed between two processes over loopback: a gradient push of a
// 1 MiB and a 16 MiB tensor answered with an ack, and a small request
// answered with a small reply (the size of a token request and grant),
// through CAF's middleman (plain and over TLS) against raw TCP sockets
// moving the same bytes with an ack per message, in the same run.
//
//   build/bin/bench_net [--rounds 5] [--seconds 1] [--sizes 1,16]
//                       [--tls_dir DIR] [--json FILE]
//                       [--paths raw,caf,tls,openssl]
//                       [--part_kib 1024]
//
// The receiver of each path is this program started again as a separate
// process (--serve raw|caf|tls); the sender is this process. Every push
// waits for its ack before the next, as a worker waits for the shard's
// push_ack. The CAF push is a real gradient_push (one dense variable of
// the given size) in the runtime's message, push_atom + gradient_push,
// answered with a push_ack; like the worker, the sender moves the push into
// the message instead of copying it, so a pre-built message is sent again
// each time. The receiver deserialises the whole tensor, as a shard does.
//
// The paths are measured in interleaved rounds (the machine is shared):
// each round measures every path for --seconds; the figures are medians
// over the rounds. Besides MB/s, the CPU seconds both processes spent per
// GB pushed: on a busy machine the wall time includes waiting for a core,
// the CPU time does not. --set key=value passes a CAF option to both
// processes of the CAF paths (e.g. --set middleman.workers=0); --paths
// caf (or raw,tls, ...) measures only those paths, e.g. to profile one.
// CAF+TLS is the runtime's transport (runtime/net/tls_transport.hpp);
// the path openssl (not measured by default) is CAF's own caf::openssl
// module with the same certificates, for comparison.
// --part_kib K splits each CAF push into parts of K KiB as a worker does
// with --push_part_kib K (split_push, messages/push_parts.hpp; 1024 is
// the runtime's default), all sent before their acks are awaited, and the
// receiver assembles them with the shard's push_assembler (which keeps
// the slices, as the shard does); 0 sends each push as one message. Both
// processes keep freed memory as the programs do (runtime/allocator.hpp).
// Raw TCP moves each push as one message with one ack either way.
// Without --tls_dir, a throw-away cluster certificate is
// made with scripts/make-cluster-certs.sh in a temp directory.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/allocator.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/net/tls_transport.hpp"
#include "actors/program_config.hpp"
#include "messages/push_parts.hpp"

using namespace syncfac;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

/// The receiver's interface: the shard's push and, for the round trip, a
/// token request (a worker_report) answered with a token_grant.
using sink_actor = caf::typed_actor<
  caf::replies_to<push_atom, gradient_push>::with<push_ack>,
  caf::replies_to<token_atom, worker_report>::with<token_grant>>;

[[noreturn]] void die(const std::string& what);

struct sink_state {
  std::map<std::string, tensor_shape> shapes;
  std::optional<push_assembler> assembler;
};

/// Parts are assembled as a shard assembles them (the slices kept).
sink_actor::behavior_type sink(sink_actor::stateful_pointer<sink_state> self) {
  auto* st = &self->state;
  st->assembler.emplace([st](const std::string& name) -> const tensor_shape* {
    auto& shape = st->shapes[name];
    if (shape.empty())
      shape = tensor_shape{std::stoll(name.substr(1))};
    return &shape;
  });
  return {
    [st](push_atom, gradient_push& p) {
      auto step = p.local_step;
      auto whole = st->assembler->add(std::move(p));
      if (!whole)
        die("push: " + render(whole.error()));
      return push_ack{true, step};
    },
    [](token_atom, const worker_report& r) {
      return token_grant{r.local_step + 1, false};
    },
  };
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_net: %s\n", what.c_str());
  std::exit(1);
}

// -- raw TCP ------------------------------------------------------------------

/// The raw protocol: an 8-byte little-endian length, then that many bytes;
/// the receiver answers every message with a 16-byte ack. The round trip
/// sends a small message of its own size and gets 16 bytes back.
constexpr size_t raw_ack_bytes = 16;

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/// Moves all `n` bytes at `p` with `io` (a send or a recv of some bytes),
/// again after EINTR; false when the socket failed or the peer closed.
template <class Byte, class Io>
bool transfer_all(Byte* p, size_t n, Io io) {
  while (n > 0) {
    auto k = io(p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  return transfer_all(p, n, [fd](const char* at, size_t len) {
    return ::send(fd, at, len, MSG_NOSIGNAL);
  });
}

bool read_all(int fd, char* p, size_t n) {
  return transfer_all(p, n, [fd](char* at, size_t len) {
    return ::recv(fd, at, len, 0);
  });
}

int serve_raw() {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
      || listen(lfd, 4))
    die(std::string{"raw listen: "} + std::strerror(errno));
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("PORT %u\n", static_cast<unsigned>(ntohs(addr.sin_port)));
  std::fflush(stdout);
  std::vector<char> buf;
  char ack[raw_ack_bytes] = {};
  for (;;) {
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0)
      return 0;
    set_nodelay(fd);
    uint64_t n = 0;
    while (read_all(fd, reinterpret_cast<char*>(&n), sizeof(n))) {
      if (buf.size() < n)
        buf.resize(n);
      if (!read_all(fd, buf.data(), n) || !write_all(fd, ack, sizeof(ack)))
        break;
    }
    close(fd);
  }
}

int connect_raw(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0
      || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    die(std::string{"raw connect: "} + std::strerror(errno));
  set_nodelay(fd);
  return fd;
}

/// One message of `bytes` and its ack. `payload` starts with room for the
/// 8-byte length: header and bytes leave in one send, as CAF sends its
/// header and payload from one buffer.
void raw_exchange(int fd, std::vector<char>& payload, size_t bytes) {
  uint64_t n = bytes;
  std::memcpy(payload.data(), &n, sizeof(n));
  char ack[raw_ack_bytes];
  if (!write_all(fd, payload.data(), sizeof(n) + bytes)
      || !read_all(fd, ack, sizeof(ack)))
    die("raw exchange failed");
}

// -- CAF ------------------------------------------------------------------------

/// Applies "key=value" settings: an integer value is set as a count,
/// true/false as a flag, anything else as an atom.
void apply_sets(program_config& cfg, const std::vector<std::string>& sets) {
  for (const auto& kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      die("--set needs key=value, not " + kv);
    auto key = kv.substr(0, eq);
    auto value = kv.substr(eq + 1);
    if (!value.empty()
        && value.find_first_not_of("0123456789") == std::string::npos)
      cfg.set(key, static_cast<size_t>(std::stoull(value)));
    else if (value == "true" || value == "false")
      cfg.set(key, value == "true");
    else
      cfg.set(key, caf::atom_from_string(value));
  }
}

/// How a CAF path reaches the other process.
enum class transport { plain, tls, caf_openssl };

void configure_transport(program_config& cfg, transport t,
                         const std::string& tls_dir) {
  if (t == transport::plain)
    return;
  auto files = net::load_tls_dir(tls_dir);
  if (!files)
    die(render(files.error()));
  if (auto err = net::apply_tls(cfg, *files))
    die(render(err));
  if (t == transport::caf_openssl)
    cfg.load<caf::openssl::manager>(); // reads the same openssl.* options
}

caf::expected<uint16_t> publish_sink(caf::actor_system& sys,
                                     const sink_actor& a, transport t) {
  switch (t) {
    case transport::tls:
      return net::tls_publish(a, 0, "127.0.0.1");
    case transport::caf_openssl:
      return caf::openssl::publish(a, 0, "127.0.0.1");
    default:
      return sys.middleman().publish(a, 0, "127.0.0.1");
  }
}

caf::expected<sink_actor> reach_sink(caf::actor_system& sys, uint16_t port,
                                     transport t) {
  switch (t) {
    case transport::tls:
      return net::tls_remote_actor<sink_actor>(sys, "127.0.0.1", port);
    case transport::caf_openssl:
      return caf::openssl::remote_actor<sink_actor>(sys, "127.0.0.1", port);
    default:
      return sys.middleman().remote_actor<sink_actor>("127.0.0.1", port);
  }
}

int serve_caf(transport t, const std::string& tls_dir,
              const std::vector<std::string>& sets) {
  program_config cfg;
  apply_sets(cfg, sets);
  configure_transport(cfg, t, tls_dir);
  caf::actor_system sys{cfg};
  auto a = sys.spawn(sink);
  auto port = publish_sink(sys, a, t);
  if (!port)
    die("publish: " + sys.render(port.error()));
  std::printf("PORT %u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  // Runs until the sender closes our stdin.
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  anon_send_exit(a, caf::exit_reason::user_shutdown);
  return 0;
}

// -- the receiver processes -----------------------------------------------------

struct receiver {
  pid_t pid = -1;
  int to_child = -1;
  int port = 0;

  receiver(const std::string& self_exe, const std::string& mode,
           const std::string& tls_dir, const std::vector<std::string>& sets) {
    int in[2];
    int out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
      die("pipe");
    pid = fork();
    if (pid < 0)
      die("fork");
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      std::vector<std::string> args{self_exe, "--serve", mode, "--tls_dir",
                                    tls_dir};
      for (const auto& kv : sets) {
        args.push_back("--set");
        args.push_back(kv);
      }
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(self_exe.c_str(), argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child = in[1];
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n')
      line += c;
    close(out[0]);
    if (line.rfind("PORT ", 0) != 0)
      die("receiver " + mode + " did not start: '" + line + "'");
    port = std::atoi(line.c_str() + 5);
  }

  ~receiver() {
    close(to_child);
    int status = 0;
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        return;
      usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }

  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
};

// -- measurements ---------------------------------------------------------------

struct options {
  /// CAF options for both processes ("middleman.workers=0").
  std::vector<std::string> sets;
  int rounds = 5;
  double seconds = 1.0;
  std::vector<int> sizes_mib{1, 16};
  std::string tls_dir;
  std::string json;
  /// Which paths to measure (0 raw, 1 CAF, 2 TLS, 3 caf::openssl); a subset is for
  /// profiling one path alone, the ratios need raw.
  std::vector<int> paths{0, 1, 2};
  /// Each CAF push as this many messages, all sent before the acks are
  /// awaited (a prototype of chunked pushes; the runtime sends one).
  int64_t part_kib = default_push_part_bytes / 1024;
};

/// Runs `f` (one exchange) for about `seconds` after two warm-up calls;
/// returns the mean seconds per exchange and, for round trips, their median.
struct run_stats {
  double mean_s = 0;
  double median_s = 0;
  size_t count = 0;
};

template <class F>
run_stats time_exchanges(F&& f, double seconds) {
  f();
  f();
  std::vector<double> samples;
  auto start = clock_type::now();
  double total = 0;
  do {
    auto t0 = clock_type::now();
    f();
    auto dt = std::chrono::duration<double>(clock_type::now() - t0).count();
    samples.push_back(dt);
    total = std::chrono::duration<double>(clock_type::now() - start).count();
  } while (total < seconds || samples.size() < 3);
  std::sort(samples.begin(), samples.end());
  return {total / static_cast<double>(samples.size()),
          samples[samples.size() / 2], samples.size()};
}

/// NaN for no values: a path left out with --paths.
double median(std::vector<double> xs) {
  if (xs.empty())
    return std::nan("");
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

/// CPU seconds of this process (all threads) plus those of process `pid`
/// (from /proc: clock ticks, 10 ms resolution).
double cpu_s(pid_t pid) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double self = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
                + 1e-6 * static_cast<double>(ru.ru_utime.tv_usec
                                             + ru.ru_stime.tv_usec);
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  std::getline(in, stat);
  // Fields after the ")" that closes the command name: state is field 3,
  // utime and stime are fields 14 and 15.
  auto pos = stat.rfind(')');
  double other = 0;
  if (pos != std::string::npos) {
    std::istringstream rest{stat.substr(pos + 2)};
    std::string field;
    unsigned long long ut = 0;
    unsigned long long st = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14)
        ut = std::stoull(field);
      if (i == 15)
        st = std::stoull(field);
    }
    other = static_cast<double>(ut + st)
            / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return self + other;
}

/// What one round measured for one path: MB/s and CPU seconds (both
/// processes) per GB moved, per size; the round trip in us.
struct path_round {
  std::vector<double> mb_s;
  std::vector<double> cpu_s_per_gb;
  double rtt_us = 0;
};

/// Throughput and CPU per GB of `st` (plus its two warm-up exchanges).
void record(path_round& out, size_t bytes, const run_stats& st, double cpu) {
  out.mb_s.push_back(static_cast<double>(bytes) / st.mean_s / 1e6);
  auto gb = static_cast<double>(bytes) * static_cast<double>(st.count + 2)
            / 1e9;
  out.cpu_s_per_gb.push_back(cpu / gb);
}

path_round measure_raw(const receiver& r, const options& opt) {
  path_round out;
  int fd = connect_raw(r.port);
  for (int mib : opt.sizes_mib) {
    size_t bytes = static_cast<size_t>(mib) << 20;
    std::vector<char> payload(sizeof(uint64_t) + bytes, 1);
    auto c0 = cpu_s(r.pid);
    auto st = time_exchanges([&] { raw_exchange(fd, payload, bytes); },
                             opt.seconds);
    record(out, bytes, st, cpu_s(r.pid) - c0);
  }
  // A token request: worker_report-sized, 16 bytes back.
  std::vector<char> small(sizeof(uint64_t) + 64, 1);
  auto st = time_exchanges([&] { raw_exchange(fd, small, 64); },
                           opt.seconds);
  out.rtt_us = st.median_s * 1e6;
  close(fd);
  return out;
}

/// Variable names carry their size, so the receiver's assembler knows
/// each variable's shape as a shard knows its own.
std::string variable_of(int64_t floats) {
  return "w" + std::to_string(floats);
}

/// The push of `bytes` as the runtime's worker sends it to a shard in
/// another process (parts of `part_bytes`; 0: whole), pre-built: the
/// sender moves its push into the message, so the same messages are sent
/// again each time.
std::vector<caf::message> push_messages(size_t bytes, int64_t part_bytes) {
  auto floats = static_cast<int64_t>(bytes / sizeof(float));
  gradient_push push;
  push.worker = 0;
  push.local_step = 7;
  push.dense = {{variable_of(floats), tensor{{floats}}}};
  std::vector<caf::message> msgs;
  for (auto& part : split_push(std::move(push), part_bytes))
    msgs.push_back(caf::make_message(push_atom::value, std::move(part)));
  return msgs;
}

path_round measure_caf(const receiver& r, transport t, const options& opt) {
  path_round out;
  program_config cfg;
  apply_sets(cfg, opt.sets);
  configure_transport(cfg, t, opt.tls_dir);
  caf::actor_system sys{cfg};
  auto port = static_cast<uint16_t>(r.port);
  auto remote = reach_sink(sys, port, t);
  if (!remote)
    die("remote_actor: " + sys.render(remote.error()));
  auto dest = caf::actor_cast<caf::actor>(*remote);
  caf::scoped_actor self{sys};
  for (int mib : opt.sizes_mib) {
    size_t bytes = static_cast<size_t>(mib) << 20;
    auto msgs = push_messages(bytes, opt.part_kib * 1024);
    using handle = decltype(self->request(dest, 60s, msgs[0]));
    std::vector<handle> pending;
    auto c0 = cpu_s(r.pid);
    auto st = time_exchanges(
      [&] {
        // All parts leave before the first ack is awaited, so that the
        // receiver loads one part while the next is on the wire.
        for (const auto& msg : msgs)
          pending.push_back(self->request(dest, 60s, msg));
        for (auto& h : pending)
          h.receive([](push_ack&) {},
                    [&](caf::error& err) { die("push: " + sys.render(err)); });
        pending.clear();
      },
      opt.seconds);
    record(out, bytes, st, cpu_s(r.pid) - c0);
  }
  worker_report report{0, 41, 0.5f, 100, 128, 0, {}};
  auto st = time_exchanges(
    [&] {
      self->request(*remote, 10s, token_atom::value, report)
        .receive([](token_grant&) {},
                 [&](caf::error& err) { die("token: " + sys.render(err)); });
    },
    opt.seconds);
  out.rtt_us = st.median_s * 1e6;
  return out;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> xs;
  std::string text = s;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto tok = text.substr(pos, comma - pos);
    if (!tok.empty())
      xs.push_back(std::atoi(tok.c_str()));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return xs;
}

/// "raw,caf,tls,openssl" (any subset, in any order) as path indices.
std::vector<int> parse_paths(const std::string& text) {
  std::vector<int> xs;
  std::istringstream in{text};
  std::string tok;
  while (std::getline(in, tok, ',')) {
    if (tok == "raw")
      xs.push_back(0);
    else if (tok == "caf")
      xs.push_back(1);
    else if (tok == "tls")
      xs.push_back(2);
    else if (tok == "openssl")
      xs.push_back(3);
    else
      die("unknown path " + tok + " (raw, caf, tls, openssl)");
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  if (xs.empty())
    die("--paths names no path");
  return xs;
}

std::string iso_now() {
  char buf[32];
  auto t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  // Both processes, as the programs do (example_main).
  keep_freed_memory();
  options opt;
  std::string serve;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 == argc)
      die("option " + arg + " needs a value");
    const char* v = argv[++i];
    if (arg == "--serve")
      serve = v;
    else if (arg == "--rounds")
      opt.rounds = std::max(1, std::atoi(v));
    else if (arg == "--seconds")
      opt.seconds = std::atof(v);
    else if (arg == "--sizes")
      opt.sizes_mib = parse_list(v);
    else if (arg == "--tls_dir")
      opt.tls_dir = v;
    else if (arg == "--json")
      opt.json = v;
    else if (arg == "--set")
      opt.sets.emplace_back(v);
    else if (arg == "--paths")
      opt.paths = parse_paths(v);
    else if (arg == "--part_kib")
      opt.part_kib = std::max(0, std::atoi(v));
    else
      die("unknown option " + arg);
  }
  if (serve == "raw")
    return serve_raw();
  if (serve == "caf")
    return serve_caf(transport::plain, opt.tls_dir, opt.sets);
  if (serve == "tls")
    return serve_caf(transport::tls, opt.tls_dir, opt.sets);
  if (serve == "openssl")
    return serve_caf(transport::caf_openssl, opt.tls_dir, opt.sets);
  if (!serve.empty())
    die("unknown --serve " + serve);

  std::signal(SIGPIPE, SIG_IGN);
  auto self_exe = fs::read_symlink("/proc/self/exe").string();
  std::string tmp_dir;
  if (opt.tls_dir.empty()) {
    char tmpl[] = "/tmp/bench_net-XXXXXX";
    if (mkdtemp(tmpl) == nullptr)
      die("mkdtemp");
    tmp_dir = tmpl;
    std::string cmd = std::string{SYNCFAC_SOURCE_DIR}
                      + "/scripts/make-cluster-certs.sh " + tmp_dir
                      + " node > /dev/null";
    if (std::system(cmd.c_str()) != 0)
      die("cannot make certificates: " + cmd);
    opt.tls_dir = tmp_dir + "/node";
  }

  const char* names[] = {"raw TCP", "CAF", "CAF+TLS", "caf::openssl"};
  const char* modes[] = {"raw", "caf", "tls", "openssl"};
  const transport transports[] = {transport::plain, transport::plain,
                                  transport::tls, transport::caf_openssl};
  constexpr size_t npaths = 4;
  // results[path][round]
  std::vector<std::vector<path_round>> results(npaths);
  for (int round = 0; round < opt.rounds; ++round) {
    for (int p : opt.paths) {
      receiver r{self_exe, modes[p], opt.tls_dir, opt.sets};
      results[static_cast<size_t>(p)].push_back(
        p == 0 ? measure_raw(r, opt)
               : measure_caf(r, transports[p], opt));
    }
    std::fprintf(stderr, "round %d/%d done\n", round + 1, opt.rounds);
  }
  if (!tmp_dir.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
  }

  // Medians over rounds.
  auto nsizes = opt.sizes_mib.size();
  std::vector<std::vector<double>> mb(npaths, std::vector<double>(nsizes));
  std::vector<std::vector<double>> cpu(npaths, std::vector<double>(nsizes));
  std::vector<double> rtt(npaths);
  for (size_t p = 0; p < npaths; ++p) {
    for (size_t s = 0; s < nsizes; ++s) {
      std::vector<double> xs;
      for (const auto& r : results[p])
        xs.push_back(r.mb_s[s]);
      mb[p][s] = median(xs);
      xs.clear();
      for (const auto& r : results[p])
        xs.push_back(r.cpu_s_per_gb[s]);
      cpu[p][s] = median(xs);
    }
    std::vector<double> xs;
    for (const auto& r : results[p])
      xs.push_back(r.rtt_us);
    rtt[p] = median(xs);
  }

  std::printf("gradient push + ack between two processes over loopback "
              "(MB/s, median of %d rounds of %.1f s)\n",
              opt.rounds, opt.seconds);
  if (opt.part_kib > 0)
    std::printf("each CAF push in parts of %lld KiB (split and assembled "
                "as the runtime does), raw TCP as one\n",
                static_cast<long long>(opt.part_kib));
  else
    std::printf("each CAF push as one message\n");
  std::printf("%-10s", "path");
  for (int mib : opt.sizes_mib)
    std::printf(" %10d MiB %8s", mib, "vs raw");
  std::printf(" %14s %8s\n", "small RTT us", "vs raw");
  for (size_t p = 0; p < npaths; ++p) {
    if (results[p].empty())
      continue;
    std::printf("%-10s", names[p]);
    for (size_t s = 0; s < nsizes; ++s)
      std::printf(" %14.0f %7.0f%%", mb[p][s], 100.0 * mb[p][s] / mb[0][s]);
    std::printf(" %14.1f %7.2fx\n", rtt[p], rtt[p] / rtt[0]);
  }
  std::printf("CPU seconds per GB pushed (sender + receiver process)\n");
  for (size_t p = 0; p < npaths; ++p) {
    if (results[p].empty())
      continue;
    std::printf("%-10s", names[p]);
    for (size_t s = 0; s < nsizes; ++s)
      std::printf(" %10d MiB %6.2f s %5.1fx", opt.sizes_mib[s], cpu[p][s],
                  cpu[p][s] / cpu[0][s]);
    std::printf("\n");
  }

  if (!opt.json.empty()) {
    std::ofstream out{opt.json};
    out << "{\n  \"benchmark\": \"bench_net\",\n  \"date\": \"" << iso_now()
        << "\",\n  \"rounds\": " << opt.rounds
        << ",\n  \"seconds_per_measurement\": " << opt.seconds
        << ",\n  \"caf_push_part_kib\": " << opt.part_kib
        << ",\n  \"caf_settings\": [";
    for (size_t i = 0; i < opt.sets.size(); ++i)
      out << (i ? ", " : "") << "\"" << opt.sets[i] << "\"";
    out << "],\n  \"paths\": [\n";
    bool first = true;
    for (size_t p = 0; p < npaths; ++p) {
      if (results[p].empty())
        continue;
      out << (first ? "" : ",\n");
      first = false;
      out << "    {\"path\": \"" << modes[p] << "\", \"push_mb_s\": {";
      for (size_t s = 0; s < nsizes; ++s)
        out << (s ? ", " : "") << "\"" << opt.sizes_mib[s]
            << "MiB\": " << mb[p][s];
      out << "}, \"push_vs_raw\": {";
      for (size_t s = 0; s < nsizes; ++s)
        out << (s ? ", " : "") << "\"" << opt.sizes_mib[s]
            << "MiB\": " << mb[p][s] / mb[0][s];
      out << "}, \"cpu_s_per_gb\": {";
      for (size_t s = 0; s < nsizes; ++s)
        out << (s ? ", " : "") << "\"" << opt.sizes_mib[s]
            << "MiB\": " << cpu[p][s];
      out << "}, \"small_rtt_us\": " << rtt[p] << ", \"rounds_mb_s\": [";
      for (size_t r = 0; r < results[p].size(); ++r) {
        out << (r ? ", " : "") << "[";
        for (size_t s = 0; s < nsizes; ++s)
          out << (s ? ", " : "") << results[p][r].mb_s[s];
        out << "]";
      }
      out << "]}";
    }
    out << "\n  ]\n}\n";
    if (!out)
      die("cannot write " + opt.json);
    std::fprintf(stderr, "wrote %s\n", opt.json.c_str());
  }
  return 0;
}
