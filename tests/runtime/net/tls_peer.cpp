// The two roles of the TLS tests as a real process (test_runtime_net_tls
// drives them):
//
//   tls_peer serve [--tls_dir DIR]
//     spawns a PS shard (one variable w = [1, 2, 3, 4], SGD with rate 0.5),
//     publishes it on 127.0.0.1 (over TLS with --tls_dir), prints
//     "PORT <n>" and then answers commands on stdin: "status" prints
//     "STATUS step=<s> accepted=<a> stale=<t> refused=<r>", end of input or
//     "quit" stops.
//
//   tls_peer client --port N [--tls_dir DIR | --tls_anon] [--timeout S]
//     connects (--tls_dir: with that certificate, through the runtime's
//     TLS transport; --tls_anon: TLS without any certificate, through
//     CAF's own caf::openssl, as a foreign client would; neither: plain
//     TCP), pushes the gradient [1, 1, 1, 1]
//     for step 0, asks the shard to apply it and pulls the parameters:
//     prints "CONNECTED", "PUSHED accepted=<0|1>", "PULLED step=<s>
//     w=<v0>,<v1>,...".
//
// Exit codes: 0 done; 2 bad usage; 3 TLS directory refused; 4 connect
// failed; 5 a request failed; 6 the watchdog (--timeout, default 20 s)
// fired.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/ps_shard.hpp"
#include "messages/atoms.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/net/tls_transport.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

struct options {
  std::string role;
  std::string tls_dir;
  bool tls_anon = false;
  int port = 0;
  int timeout_s = 20;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "tls_peer: %s\nusage: tls_peer serve [--tls_dir DIR]"
                       "\n       tls_peer client --port N [--tls_dir DIR | "
                       "--tls_anon] [--timeout S]\n",
               why);
  std::exit(2);
}

options parse(int argc, char** argv) {
  if (argc < 2)
    usage("no role");
  options opt;
  opt.role = argv[1];
  if (opt.role != "serve" && opt.role != "client")
    usage("unknown role");
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--tls_anon") {
      opt.tls_anon = true;
      continue;
    }
    if (i + 1 == argc)
      usage("option without value");
    if (arg == "--tls_dir")
      opt.tls_dir = argv[++i];
    else if (arg == "--port")
      opt.port = std::atoi(argv[++i]);
    else if (arg == "--timeout")
      opt.timeout_s = std::atoi(argv[++i]);
    else
      usage("unknown option");
  }
  if (opt.role == "client" && opt.port <= 0)
    usage("client needs --port");
  return opt;
}

/// The configuration of either role; exits 3 when the TLS directory is
/// refused (CAF never sees it then).
void configure(program_config& cfg, const options& opt) {
  if (!opt.tls_dir.empty()) {
    auto files = net::load_tls_dir(opt.tls_dir);
    if (!files) {
      std::printf("TLS REFUSED: %s\n", render(files.error()).c_str());
      std::exit(3);
    }
    if (auto err = net::apply_tls(cfg, *files)) {
      std::printf("TLS REFUSED: %s\n", render(err).c_str());
      std::exit(3);
    }
  } else if (opt.tls_anon) {
    cfg.load<caf::openssl::manager>();
  }
}

int serve(const options& opt) {
  program_config cfg;
  configure(cfg, opt);
  caf::actor_system sys{cfg};
  ps_shard_config shard;
  shard.variables = {{"w", tensor{{4}, {1, 2, 3, 4}}}};
  shard.optimizer.kind = optimizer_kind::sgd;
  shard.optimizer.learning_rate = 0.5f;
  auto ps = spawn_ps_shard(sys, shard);
  if (!ps) {
    std::printf("SPAWN FAILED: %s\n", render(ps.error()).c_str());
    return 5;
  }
  auto port = !opt.tls_dir.empty()
                ? net::tls_publish(*ps, 0, "127.0.0.1")
              : opt.tls_anon ? caf::openssl::publish(*ps, 0, "127.0.0.1")
                             : sys.middleman().publish(*ps, 0, "127.0.0.1");
  if (!port) {
    std::printf("PUBLISH FAILED: %s\n", sys.render(port.error()).c_str());
    return 5;
  }
  std::printf("PORT %u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  caf::scoped_actor self{sys};
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line != "status")
      continue;
    self->request(*ps, 10s, status_atom::value)
      .receive(
        [&](const shard_status& st) {
          std::printf("STATUS step=%lld accepted=%lld stale=%lld "
                      "refused=%lld\n",
                      static_cast<long long>(st.global_step),
                      static_cast<long long>(st.accepted_pushes),
                      static_cast<long long>(st.stale_pushes),
                      static_cast<long long>(st.refused_pushes));
        },
        [&](caf::error& err) {
          std::printf("STATUS FAILED: %s\n", sys.render(err).c_str());
        });
    std::fflush(stdout);
  }
  self->send_exit(*ps, caf::exit_reason::user_shutdown);
  return 0;
}

int client(const options& opt) {
  // CAF's connect may wait for a handshake that never comes: the watchdog
  // turns that into an exit code the test can tell apart.
  std::thread{[s = opt.timeout_s] {
    std::this_thread::sleep_for(std::chrono::seconds{s});
    std::printf("TIMEOUT after %d s\n", s);
    std::fflush(stdout);
    _exit(6);
  }}.detach();
  program_config cfg;
  configure(cfg, opt);
  caf::actor_system sys{cfg};
  auto port = static_cast<uint16_t>(opt.port);
  auto ps = !opt.tls_dir.empty()
              ? net::tls_remote_actor<ps_actor>(sys, "127.0.0.1", port)
            : opt.tls_anon
              ? caf::openssl::remote_actor<ps_actor>(sys, "127.0.0.1", port)
              : sys.middleman().remote_actor<ps_actor>("127.0.0.1", port);
  if (!ps) {
    std::printf("CONNECT FAILED: %s\n", sys.render(ps.error()).c_str());
    std::fflush(stdout);
    _exit(4); // skip the middleman's orderly shutdown of a failed peer
  }
  std::printf("CONNECTED\n");
  std::fflush(stdout);
  caf::scoped_actor self{sys};
  int rc = 0;
  auto failed = [&](const char* what) {
    return [&rc, &sys, what](caf::error& err) {
      std::printf("%s FAILED: %s\n", what, sys.render(err).c_str());
      rc = 5;
    };
  };
  gradient_push push;
  push.worker = 0;
  push.local_step = 0;
  push.dense = {{"w", tensor{{4}, {1, 1, 1, 1}}}};
  self->request(*ps, 10s, push_atom::value, push)
    .receive(
      [&](const push_ack& ack) {
        std::printf("PUSHED accepted=%d\n", ack.accepted ? 1 : 0);
      },
      failed("PUSH"));
  if (rc == 0)
    self->request(*ps, 10s, apply_atom::value, int64_t{0}, int64_t{1})
      .receive([&](const applied& a) {
        std::printf("APPLIED step=%lld\n",
                    static_cast<long long>(a.global_step));
      },
      failed("APPLY"));
  if (rc == 0)
    self->request(*ps, 10s, pull_atom::value)
      .receive(
        [&](const shard_params& p) {
          std::printf("PULLED step=%lld",
                      static_cast<long long>(p.global_step));
          for (const auto& v : p.values) {
            std::printf(" %s=", v.name.c_str());
            for (int64_t i = 0; i < v.value.size(); ++i)
              std::printf("%s%g", i > 0 ? "," : "",
                          static_cast<double>(v.value[i]));
          }
          std::printf("\n");
        },
        failed("PULL"));
  std::fflush(stdout);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
  return opt.role == "serve" ? serve(opt) : client(opt);
}
