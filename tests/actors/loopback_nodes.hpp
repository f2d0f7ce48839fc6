#pragma once

// What the suites of nodes on loopback share (join_refusal,
// node_connector, supervisor): two actor systems, a node of ps:0, a
// cluster whose tasks listen on 127.0.0.1, and a port on which nothing
// listens now.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>

#include "actors/node.hpp"
#include "actors/program_config.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "tests/helpers.hpp"

namespace syncfac::test {

/// Two actor systems in one process, as on two nodes: a peer's and this
/// node's own.
struct two_systems {
  program_config peer_cfg;
  caf::actor_system peer{peer_cfg};
  program_config own_cfg;
  caf::actor_system own{own_cfg};
};

/// A node of task ps:0 in `sys` hosting `role` as its ps:0.
inline node_actor ps_node(caf::actor_system& sys, const caf::actor& role) {
  node_config nc;
  nc.task = {"ps", 0};
  nc.roles = std::make_shared<const std::map<std::string, caf::actor>>(
    std::map<std::string, caf::actor>{{"ps:0", role}});
  return sys.spawn(node, std::move(nc));
}

/// A cluster of chief:0, ps:0 and worker:0 on 127.0.0.1 at these ports.
inline cluster_spec loopback_cluster(uint16_t chief_port, uint16_t ps_port,
                                     uint16_t worker_port) {
  auto spec = cluster_spec::parse(
    R"({"cluster": {"chief": ["127.0.0.1:)" + std::to_string(chief_port)
      + R"("], "ps": ["127.0.0.1:)" + std::to_string(ps_port)
      + R"("], "worker": ["127.0.0.1:)" + std::to_string(worker_port)
      + R"("]}})",
    "test cluster");
  BOOST_REQUIRE_MESSAGE(spec, why(spec));
  return *spec;
}

/// A port nothing listens on now: bound once by `n`, then closed.
inline uint16_t closed_port(caf::actor_system& sys, const node_actor& n) {
  auto bound = publish_node(n, "127.0.0.1", 0, false);
  BOOST_REQUIRE_MESSAGE(bound, why(bound));
  BOOST_REQUIRE(sys.middleman().unpublish(n, bound->port));
  return bound->port;
}

} // namespace syncfac::test
