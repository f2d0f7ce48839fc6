#define BOOST_TEST_MODULE node_connector
#include <boost/test/unit_test.hpp>

// The connector (actors/node_connector.hpp) between two real actor
// systems on loopback: a peer that starts listening only after the
// connector began is reached on a later attempt (a timer message, no
// sleep in the connector); a peer that never listens ends the wait at the
// deadline with an error naming the task, its address and the last error;
// a peer that refuses the hello ends it at once; connect_options::abandon
// ends it with its own error; the blocking connect_nodes says while it
// waits whom it waits for. The pure bookkeeping (actors/
// connect_progress.hpp) is checked without actors first.

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/connect_progress.hpp"
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

caf::behavior stand_in(caf::event_based_actor*) {
  return {[](int32_t x) { return x; }};
}

using test::closed_port;
using test::ps_node;

/// A cluster whose ps:0 listens on `port` (chief and worker elsewhere).
cluster_spec cluster_with_ps_at(uint16_t port) {
  return test::loopback_cluster(1, port, 2);
}

/// Two actor systems: the peer's (hosting ps:0) and this node's.
struct two_nodes : test::two_systems {
  caf::scoped_actor self{own};
  caf::actor role = peer.spawn(stand_in);
  node_actor n = ps_node(peer, role);
  caf::actor my_node = own.spawn(stand_in);

  node_hello hello() {
    return make_hello(own, {"worker", 0}, my_node);
  }

  /// This node's connector to the cluster whose ps:0 listens on `port`.
  peer_connector_actor connector_to_ps_at(uint16_t port,
                                          const connect_options& opts) {
    return spawn_peer_connector(own, cluster_with_ps_at(port), hello(), opts,
                                nullptr);
  }

  ~two_nodes() {
    self->send_exit(my_node, caf::exit_reason::user_shutdown);
    caf::scoped_actor peer_self{peer};
    peer_self->send_exit(n, caf::exit_reason::user_shutdown);
    peer_self->send_exit(role, caf::exit_reason::user_shutdown);
  }
};

/// Options that give up after `timeout`, attempting every 100 ms.
connect_options retrying_until(std::chrono::milliseconds timeout) {
  connect_options opts;
  opts.timeout = timeout;
  opts.retry = 100ms;
  return opts;
}

/// The connector's answer for ps:0.
caf::expected<std::vector<node_info>>
ask_for_ps(caf::scoped_actor& self, const peer_connector_actor& c,
           std::chrono::milliseconds bound = 30000ms) {
  auto pending = self->request(c, bound, connect_atom::value,
                               std::vector<std::string>{"ps:0"});
  return test::answer<std::vector<node_info>>(pending);
}

} // namespace

BOOST_AUTO_TEST_CASE(progress_names_the_missing_peers_and_their_last_errors) {
  auto cluster = cluster_with_ps_at(7001);
  connect_progress p;
  p.peers = {{"ps", 0}, {"worker", 0}};
  BOOST_TEST(!p.done());
  p.failed({"ps", 0}, "connection refused");
  node_info w;
  w.job = "worker";
  p.reached["worker:0"] = w;
  BOOST_REQUIRE_EQUAL(p.missing().size(), 1u);
  BOOST_TEST(p.missing().front().str() == "ps:0");
  auto err = p.timed_out(cluster, 3s);
  auto text = test::failure(err, ec::timeout);
  BOOST_TEST(test::contains(text, "peers not reachable after 3 s: ps:0 at "
                                  "127.0.0.1:7001 (connection refused)"),
             text);
  BOOST_TEST(p.waiting_line("chief:0", cluster, 5s)
               == "chief:0: waiting for ps:0 at 127.0.0.1:7001 (connection "
                  "refused) since 5 s");
  node_info ps;
  ps.job = "ps";
  p.reached["ps:0"] = ps;
  BOOST_TEST(p.done());
  auto answers = p.answers();
  BOOST_REQUIRE_EQUAL(answers.size(), 2u);
  BOOST_TEST(answers[0].job == "ps");
  BOOST_TEST(answers[1].job == "worker");
}

BOOST_AUTO_TEST_CASE(a_peer_that_listens_late_is_reached_on_a_later_attempt) {
  two_nodes t;
  auto port = closed_port(t.peer, t.n);
  auto opts = retrying_until(20000ms);
  opts.request_timeout = 2000ms;
  auto c = t.connector_to_ps_at(port, opts);
  auto started = clock_type::now();
  auto pending = t.self->request(c, 30000ms, connect_atom::value,
                                 std::vector<std::string>{"ps:0"});
  // The peer starts listening 1.5 s later: the attempts until then were
  // refused, and a later one finds it.
  {
    caf::scoped_actor waiter{t.own};
    waiter->receive(caf::after(1500ms) >> [] {});
  }
  auto bound = publish_node(t.n, "127.0.0.1", port, false);
  BOOST_REQUIRE_MESSAGE(bound, test::why(bound));
  auto got = test::answer<std::vector<node_info>>(pending);
  auto took = clock_type::now() - started;
  BOOST_REQUIRE_MESSAGE(got, test::why(got));
  BOOST_REQUIRE_EQUAL(got->size(), 1u);
  auto r = role_of<caf::actor>(got->front(), "ps:0");
  BOOST_REQUIRE_MESSAGE(r, test::why(r));
  BOOST_TEST((r->address() == t.role.address()));
  BOOST_TEST((took >= 1500ms));
  t.self->send_exit(c, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_peer_that_never_listens_ends_the_wait_naming_it) {
  two_nodes t;
  auto port = closed_port(t.peer, t.n);
  auto opts = retrying_until(1000ms);
  opts.request_timeout = 1000ms;
  auto c = t.connector_to_ps_at(port, opts);
  auto started = clock_type::now();
  auto got = ask_for_ps(t.self, c);
  auto took = clock_type::now() - started;
  auto text = test::failure(got, ec::timeout);
  BOOST_TEST(test::contains(text, "peers not reachable after"), text);
  BOOST_TEST(test::contains(text, "ps:0 at 127.0.0.1:" + std::to_string(port)
                                    + " ("),
             text);
  // At its deadline, not at the request's own bound.
  BOOST_TEST((took >= 1000ms));
  BOOST_TEST((took < 10000ms));
  t.self->send_exit(c, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_refused_hello_ends_the_wait_at_once) {
  two_nodes t;
  // ps:0 cannot join: its node answers every hello with the refusal.
  auto refusing = t.peer.spawn(refusing_node, task_id{"ps", 0},
                               task_id{"chief", 0},
                               std::string{"no GPU 999"}, caf::actor{});
  auto bound = publish_node(refusing, "127.0.0.1", 0, false);
  BOOST_REQUIRE_MESSAGE(bound, test::why(bound));
  connect_options opts;
  opts.timeout = 20000ms;
  auto c = t.connector_to_ps_at(bound->port, opts);
  auto started = clock_type::now();
  auto got = ask_for_ps(t.self, c);
  auto text = test::failure(got, ec::invalid_config);
  BOOST_TEST(test::contains(text, "ps:0 cannot join the run: no GPU 999"),
             text);
  BOOST_TEST((clock_type::now() - started < 10000ms));
  t.self->send_exit(c, caf::exit_reason::user_shutdown);
  caf::scoped_actor peer_self{t.peer};
  peer_self->send_exit(refusing, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(abandon_ends_the_wait_with_its_error) {
  two_nodes t;
  auto port = closed_port(t.peer, t.n);
  auto opts = retrying_until(20000ms);
  auto asked = std::make_shared<int>(0);
  opts.abandon = [asked]() -> caf::error {
    if (++*asked < 3)
      return caf::none;
    return make_error(ec::invalid_config, "worker:1 cannot join the run");
  };
  auto c = t.connector_to_ps_at(port, opts);
  auto got = ask_for_ps(t.self, c);
  auto text = test::failure(got, ec::invalid_config);
  BOOST_TEST(test::contains(text, "worker:1 cannot join the run"), text);
  t.self->send_exit(c, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(connect_nodes_says_whom_it_waits_for_and_reaches_it) {
  two_nodes t;
  auto port = closed_port(t.peer, t.n);
  auto opts = retrying_until(20000ms);
  opts.report_every = 300ms;
  std::ostringstream log;
  // The peer listens after the connector reported once; a helper actor
  // of the peer's system publishes it then, on a timer.
  auto n = t.n;
  auto publisher = t.peer.spawn([n, port](caf::event_based_actor* self) {
    self->delayed_send(self, 1200ms, caf::ok_atom::value);
    return caf::behavior{[n, port, self](caf::ok_atom) {
      auto bound = publish_node(n, "127.0.0.1", port, false);
      if (!bound)
        BOOST_ERROR("cannot publish ps:0 again: " + render(bound.error()));
      self->quit();
    }};
  });
  auto got = connect_nodes(t.own, t.self, cluster_with_ps_at(port),
                           {{"ps", 0}}, t.hello(), opts, log);
  BOOST_REQUIRE_MESSAGE(got, test::why(got));
  BOOST_TEST(got->count("ps:0") == 1u);
  BOOST_TEST(test::contains(log.str(), "worker:0: waiting for ps:0 at "
                                         "127.0.0.1:"
                                         + std::to_string(port)),
             log.str());
  (void) publisher;
}
