// A cluster member whose actor system registered a message type that the
// library's nodes do not know ("rogue::probe"). It tries to join the
// cluster file given as its argument as evaluator:0 and connect to ps:0
// (and the chief, which is not running);
// the handshake must refuse it with an error naming the type. Exits 1 with
// that error (0 would mean it was let in).

#include <cstdlib>
#include <iostream>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/cluster_member.hpp"
#include "runtime/base/error.hpp"
#include "runtime/inspect.hpp"
#include "actors/program_config.hpp"

namespace rogue {

struct probe {
  int32_t value = 0;
};

SYNCFAC_INSPECT(probe, x.value)

} // namespace rogue

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: test_rogue_member CLUSTER_FILE" << std::endl;
    return 2;
  }
  syncfac::program_config cfg;
  cfg.add_message_type<rogue::probe>("rogue::probe");
  auto cluster = syncfac::resolve_cluster(argv[1], "evaluator", 0);
  if (!cluster) {
    std::cerr << syncfac::render(cluster.error()) << std::endl;
    return 2;
  }
  caf::actor_system sys{cfg};
  syncfac::member_config mc;
  mc.cluster = *cluster;
  mc.task = *cluster->task;
  mc.peers = {{"ps", 0}};
  mc.connect.timeout = std::chrono::milliseconds{60000};
  auto member = syncfac::cluster_member::make(sys, mc, std::cout);
  if (!member) {
    std::cerr << syncfac::render(member.error()) << std::endl;
    return 2;
  }
  // The chief is not running: ps:0's refusal ends the connecting at once.
  if (auto err = (*member)->connect()) {
    std::cerr << "rogue_member: " << syncfac::render(err) << std::endl;
    return 1;
  }
  std::cerr << "rogue_member: ps:0 let a node with rogue::probe in"
            << std::endl;
  return 0;
}
