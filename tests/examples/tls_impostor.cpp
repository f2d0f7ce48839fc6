// A node that lies about itself, for tests/examples/tls_roles.cpp: it
// speaks the cluster's TLS with whatever certificate it is given, claims a
// task of its choosing in the task hello and another one, if asked, in the
// cluster's own hello, and skips every start-up check a real node makes on
// its files (an attacker's program would).
//
//   tls_impostor --cluster FILE --cert DIR --claim TASK --dial TASK
//                [--hello_as TASK] [--timeout_ms N]
//
// connects to the node the cluster file puts at --dial and says hello as
// --hello_as (default: --claim). Prints one line and exits with:
//   0  "ACCEPTED as TASK"   (the node took the hello: the test fails)
//   10 "CONNECT REFUSED: why" (the task hello or the TLS handshake failed)
//   11 "HELLO REFUSED: why"   (the node actor refused the hello)
//   2  bad usage

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node.hpp"
#include "actors/program_config.hpp"
#include "runtime/base/error.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls_transport.hpp"

using namespace syncfac;

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "tls_impostor: %s\nusage: tls_impostor --cluster FILE --cert "
               "DIR --claim TASK --dial TASK [--hello_as TASK] "
               "[--timeout_ms N]\n",
               why.c_str());
  std::exit(2);
}

task_id task_arg(const std::string& text) {
  auto t = task_id::parse(text);
  if (!t)
    usage("bad task '" + text + "'");
  return *t;
}

} // namespace

int main(int argc, char** argv) {
  std::string cluster_file;
  std::string cert;
  std::string claim;
  std::string dial;
  std::string hello_as;
  long timeout_ms = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 == argc)
      usage("option without value: " + arg);
    std::string value = argv[++i];
    if (arg == "--cluster")
      cluster_file = value;
    else if (arg == "--cert")
      cert = value;
    else if (arg == "--claim")
      claim = value;
    else if (arg == "--dial")
      dial = value;
    else if (arg == "--hello_as")
      hello_as = value;
    else if (arg == "--timeout_ms")
      timeout_ms = std::atol(value.c_str());
    else
      usage("unknown option " + arg);
  }
  if (cluster_file.empty() || cert.empty() || claim.empty() || dial.empty())
    usage("--cluster, --cert, --claim and --dial are needed");
  auto cluster = cluster_spec::load(cluster_file);
  if (!cluster)
    usage(render(cluster.error()));
  auto claimed = task_arg(claim);
  auto dialled = task_arg(dial);
  auto hello_task = hello_as.empty() ? claimed : task_arg(hello_as);
  if (!cluster->contains(dialled))
    usage(dial + " is not in the cluster file");
  program_config cfg;
  // The files as they are: no load_tls_dir, which would refuse an expired
  // certificate or one of another task before any peer saw it.
  cfg.openssl_cafile = cert + "/ca.pem";
  cfg.openssl_certificate = cert + "/node.pem";
  cfg.openssl_key = cert + "/node.key";
  net::record_tls_identity(cfg, claimed, *cluster);
  caf::actor_system sys{cfg};
  auto mm = net::tls_middleman(sys);
  if (!mm) {
    std::printf("CONNECT REFUSED: %s\n", render(mm.error()).c_str());
    std::fflush(stdout);
    std::_Exit(10);
  }
  caf::scoped_actor self{sys};
  const auto& addr = cluster->address(dialled);
  caf::detail::type_list<node_actor> ifs;
  auto timeout = std::chrono::milliseconds{timeout_ms};
  auto ptr = net::remote_actor_via(self, *mm, addr.host, addr.port,
                                   sys.message_types(ifs), timeout);
  if (!ptr) {
    auto why = net::tls_refusal(sys, addr.host, addr.port);
    std::printf("CONNECT REFUSED: %s\n",
                why.empty() ? render(ptr.error()).c_str() : why.c_str());
    std::fflush(stdout);
    std::_Exit(10);
  }
  auto peer = caf::actor_cast<node_actor>(std::move(*ptr));
  auto hello = make_hello(sys, hello_task, caf::actor{});
  int rc = 0;
  self->request(peer, timeout, hello_atom::value, hello)
    .receive(
      [&](const node_info&) {
        std::printf("ACCEPTED as %s\n", hello_task.str().c_str());
      },
      [&](caf::error& err) {
        std::printf("HELLO REFUSED: %s\n", render(err).c_str());
        rc = 11;
      });
  std::fflush(stdout);
  std::_Exit(rc);
}
