#define BOOST_TEST_MODULE join_refusal
#include <boost/test/unit_test.hpp>

// A task that cannot join tells the chief why (actors/join_refusal.hpp),
// between real actor systems on loopback: a worker reaches a chief's node
// that starts listening only after it began (the next attempt comes on a
// timer), gives up at the connect timeout naming the chief and where it
// looked, and stops waiting at once when a stop signal arrives as a
// message; a PS shard answers the chief's hello with its refusal and says
// the chief knows.

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/join_refusal.hpp"
#include "actors/node.hpp"
#include "actors/node_connector.hpp"
#include "actors/program_config.hpp"
#include "tests/actors/loopback_nodes.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

using test::closed_port;

/// A cluster whose chief listens on `chief_port` and ps:0 on `ps_port`.
cluster_spec cluster_at(uint16_t chief_port, uint16_t ps_port) {
  return test::loopback_cluster(chief_port, ps_port, 3);
}

join_route route_of(const cluster_spec& cluster, task_id task,
                    std::chrono::milliseconds timeout) {
  join_route r;
  r.cluster = cluster;
  r.task = std::move(task);
  r.connect.timeout = timeout;
  r.connect.retry = 100ms;
  r.connect.request_timeout = 1000ms;
  return r;
}

/// The chief's side: a node of task chief:0 whose owner is `owner`.
node_actor chief_node(caf::actor_system& sys, const caf::actor& owner) {
  node_config nc;
  nc.task = {"chief", 0};
  nc.owner = owner;
  return sys.spawn(node, std::move(nc));
}

/// The chief's actor system (the peer's) with its node `n` (owned by
/// `owner`), whose port nothing listens on yet, and the refusing task's
/// system `own`.
struct chief_and_own : test::two_systems {
  caf::actor_system& chief_sys = peer;
  caf::scoped_actor owner{chief_sys};
  node_actor n = chief_node(chief_sys, caf::actor_cast<caf::actor>(owner));
  uint16_t port = closed_port(chief_sys, n);

  ~chief_and_own() {
    owner->send_exit(n, caf::exit_reason::user_shutdown);
  }
};

} // namespace

BOOST_FIXTURE_TEST_CASE(a_worker_tells_a_chief_that_listens_late,
                        chief_and_own) {
  auto cluster = cluster_at(port, 2);
  // The chief's node listens 1 s after the worker began to tell it, from
  // an actor of its system on a timer.
  auto publisher = chief_sys.spawn([n = n, port = port](
                                     caf::event_based_actor* self) {
    self->delayed_send(self, 1000ms, caf::ok_atom::value);
    return caf::behavior{[n, port, self](caf::ok_atom) {
      if (auto bound = publish_node(n, "127.0.0.1", port, false); !bound)
        BOOST_ERROR("cannot publish the chief's node: "
                    + render(bound.error()));
      self->quit();
    }};
  });
  std::ostringstream log;
  caf::scoped_actor self{own};
  refuse_to_join(own, self, route_of(cluster, {"worker", 0}, 20000ms),
                 {"chief", 0}, true, "no GPU 999", log);
  BOOST_TEST(test::contains(log.str(), "worker:0: chief:0 knows why"),
             log.str());
  // The chief's node handed the word to its owner.
  std::string task;
  std::string why;
  owner->receive(
    [&](refuse_atom, std::string& t, std::string& w) {
      task = std::move(t);
      why = std::move(w);
    },
    caf::after(5s) >> [] {});
  BOOST_TEST(task == "worker:0");
  BOOST_TEST(why == "no GPU 999");
  (void) publisher;
}

BOOST_FIXTURE_TEST_CASE(a_worker_gives_up_at_the_timeout_naming_the_chief,
                        chief_and_own) {
  std::ostringstream log;
  caf::scoped_actor self{own};
  auto started = clock_type::now();
  refuse_to_join(own, self, route_of(cluster_at(port, 2), {"worker", 0},
                                     800ms),
                 {"chief", 0}, true, "no GPU 999", log);
  auto took = clock_type::now() - started;
  BOOST_TEST(test::contains(log.str(), "worker:0: could not tell chief:0 at "
                                         "127.0.0.1:"
                                         + std::to_string(port)
                                         + " within 800 ms"),
             log.str());
  BOOST_TEST((took >= 800ms));
  BOOST_TEST((took < 10s));
}

BOOST_FIXTURE_TEST_CASE(a_stop_signal_ends_the_wait_to_tell_the_chief,
                        chief_and_own) {
  auto route = route_of(cluster_at(port, 2), {"worker", 0}, 20000ms);
  // The signal came already: the watcher hands it over at once.
  route.send_stop_to = [](const caf::actor& whom) {
    caf::anon_send(whom, preempt_atom::value, std::string{"SIGTERM"});
  };
  std::ostringstream log;
  caf::scoped_actor self{own};
  auto started = clock_type::now();
  refuse_to_join(own, self, route, {"chief", 0}, true, "no GPU 999", log);
  BOOST_TEST(test::contains(log.str(), "worker:0: a stop signal came; no "
                                         "longer waiting"),
             log.str());
  BOOST_TEST((clock_type::now() - started < 10s));
}

BOOST_FIXTURE_TEST_CASE(a_shard_answers_the_chiefs_hello_with_its_refusal,
                        chief_and_own) {
  auto cluster = cluster_at(2, port);
  std::ostringstream log;
  // The shard waits for the chief's hello on its own thread.
  std::thread shard([&] {
    caf::scoped_actor self{own};
    refuse_to_join(own, self, route_of(cluster, {"ps", 0}, 20000ms),
                   {"chief", 0}, false, "no GPU 999", log);
  });
  connect_options opts;
  opts.timeout = 15000ms;
  opts.retry = 100ms;
  auto c = spawn_peer_connector(
    chief_sys, cluster,
    make_hello(chief_sys, {"chief", 0}, caf::actor_cast<caf::actor>(n)), opts,
    nullptr);
  auto pending = owner->request(c, 30s, connect_atom::value,
                                std::string{"ps:0"});
  auto got = test::answer<node_info>(pending);
  auto text = test::failure(got, ec::invalid_config);
  BOOST_TEST(test::contains(text, "ps:0 cannot join the run: no GPU 999"),
             text);
  // The chief's node goes, as a chief that heard the refusal ends: the
  // shard stops lingering.
  owner->send_exit(c, caf::exit_reason::user_shutdown);
  owner->send_exit(n, caf::exit_reason::user_shutdown);
  shard.join();
  BOOST_TEST(test::contains(log.str(), "ps:0: chief:0 knows why"), log.str());
}
