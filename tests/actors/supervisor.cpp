#define BOOST_TEST_MODULE supervisor
#include <boost/test/unit_test.hpp>

// The node supervisor (actors/supervisor.hpp) on CAF's test scheduler:
// nothing runs until the test says so and time moves only when the test
// advances the test clock, so every loss, every wait and every timeout
// happens in one order, without sleeps. One case per loss kind a node
// sees (its own worker; the chief; a PS shard; a covariance and an inverse
// actor's hosts) and per way of losing it: killed (never back), frozen
// beyond max_wait, frozen and thawed (the same actors answer again), and
// back at the same address (a restarted task: new actors).
//
// The supervisor's peers are stand-ins that answer its requests the way
// the real roles' interfaces do (a chief's resume point, held while its
// steps are paused until they go on, a worker taking a rebind, a connector answering a peer's
// node information or failing). The real connector runs on loopback in the
// last case, between two actor systems; the supervisor with its real peers
// runs in the loopback fault tests (tests/examples/faults.cpp).

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/response_promise.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node_connector.hpp"
#include "actors/supervisor.hpp"
#include "actors/program_config.hpp"
#include "tests/actors/loopback_nodes.hpp"
#include "tests/actors/supervisor_fixture.hpp"
#include "tests/actors/supervisor_stand_ins.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace std::chrono_literals;
using namespace syncfac::testing;

namespace {

/// What the stand-in chief answers.
struct chief_script {
  /// Whether its run is under way (a resume point for a rebind).
  bool running = true;
  int64_t step = 40;
  /// Its steps are paused for another lost task: rejoins are held until
  /// they go on (caf::ok_atom).
  bool paused = false;
  std::vector<caf::response_promise> held;
  int asked = 0;
  /// The workers it was asked to rebind, in order.
  std::vector<int32_t> asked_for;
  /// The preemptions passed on to it (why).
  std::vector<std::string> preemptions;
};

caf::behavior stand_in_chief(caf::event_based_actor* self,
                             std::shared_ptr<chief_script> s) {
  auto here = [=] {
    resume_point rp;
    rp.global_step = s->step;
    return rp;
  };
  return {
    [=](rejoin_atom, int32_t worker) -> caf::result<resume_point> {
      ++s->asked;
      s->asked_for.push_back(worker);
      if (s->paused) {
        s->held.push_back(self->make_response_promise());
        return caf::delegated<resume_point>{};
      }
      if (!s->running)
        return make_error(ec::unavailable, "chief: not running yet");
      return here();
    },
    // The test: the steps go on (from s->step).
    [=](caf::ok_atom) {
      s->paused = false;
      for (auto& rp : s->held)
        rp.deliver(here());
      s->held.clear();
    },
    [=](preempt_atom, const std::string& why) {
      s->preemptions.push_back(why);
    },
    [=](status_atom) {
      chief_status cs;
      cs.global_step = s->step;
      cs.tokens_granted = s->running ? 3 : 0;
      return cs;
    },
  };
}

/// The chief's node as a task it connected to sees it: it answers a hello
/// with the chief's node information, or (`answers` false: the chief's
/// process is frozen) holds it unanswered.
caf::behavior stand_in_chief_node(caf::event_based_actor* self,
                                  node_info info, bool answers,
                                  std::shared_ptr<int> hellos) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [=](hello_atom, const node_hello&) -> caf::result<node_info> {
      ++*hellos;
      if (answers)
        return info;
      held->push_back(self->make_response_promise());
      return caf::delegated<node_info>{};
    },
  };
}

/// What reached the stand-in worker.
struct worker_log {
  struct rebind {
    int64_t step = 0;
    caf::actor_addr chief;
    std::vector<caf::actor_addr> shards;
    std::vector<caf::actor_addr> covariance;
  };
  std::vector<rebind> rebinds;
  std::vector<int64_t> rejoins;
  int starts = 0;
};

caf::behavior stand_in_worker(caf::event_based_actor*,
                              std::shared_ptr<worker_log> log) {
  return {
    [=](run_atom, const resume_point& rp, const chief_actor& c,
        const std::vector<ps_actor>& ps,
        const std::vector<covariance_actor>& cov) {
      worker_log::rebind r;
      r.step = rp.global_step;
      r.chief = c.address();
      for (auto& s : ps)
        r.shards.push_back(s.address());
      for (auto& k : cov)
        r.covariance.push_back(k.address());
      log->rebinds.push_back(r);
    },
    [=](run_atom, const resume_point& rp) {
      log->rejoins.push_back(rp.global_step);
    },
    [=](run_atom) { ++log->starts; },
  };
}

/// What reached the stand-in member role of a program's node.
struct member_log {
  std::vector<std::string> lost;
  std::vector<std::string> back;
  /// The actor of the role named as its task, per peer back.
  std::vector<caf::actor_addr> back_roles;
  std::vector<std::string> ends;
  /// The end of the run, answered once the test says the work is done.
  std::vector<caf::response_promise> held;
};

/// A member role (member_role_actor); an ok_atom from the test stands
/// for its final work being done.
caf::behavior stand_in_member(caf::event_based_actor* self,
                              std::shared_ptr<member_log> log) {
  return {
    [=](lost_atom, const std::string& task, const std::string&) {
      log->lost.push_back(task);
    },
    [=](connect_atom, const std::string& task, const node_info& info) {
      log->back.push_back(task);
      auto role = role_of<caf::actor>(info, task);
      log->back_roles.push_back(role ? role->address() : caf::actor_addr{});
    },
    [=](shutdown_atom, const std::string& reason) {
      log->ends.push_back(reason);
      log->held.push_back(self->make_response_promise());
      return log->held.back();
    },
    [=](caf::ok_atom) {
      for (auto& rp : log->held)
        rp.deliver(caf::ok_atom::value);
    },
  };
}

struct fixture : supervisor_fixture<supervisor_actor, node_end> {
  std::shared_ptr<chief_script> chief_s = std::make_shared<chief_script>();
  std::shared_ptr<worker_log> wlog = std::make_shared<worker_log>();
  caf::actor worker;

  /// A task with one role of each name, all stand-ins, except the chief's.
  task_stand_in make_task(const std::string& task,
                          std::vector<std::string> role_names) {
    task_stand_in t;
    t.task = task;
    t.node = spawn(stand_in);
    for (auto& r : role_names)
      t.roles.emplace_back(r, r == "chief" ? spawn(stand_in_chief, chief_s)
                                           : spawn(stand_in));
    return t;
  }

  task_stand_in chief = make_task("chief:0", {"chief"});
  task_stand_in ps = make_task("ps:0", {"ps:0"});
  task_stand_in cov = make_task("covariance:0", {"covariance:0"});
  task_stand_in inv = make_task("inverse:0", {"inverse:0"});

  supervisor_config worker_config() {
    supervisor_config sc;
    sc.me = "worker:1";
    sc.chief = "chief:0";
    sc.chief_address = "127.0.0.1:5000";
    sc.reconnects_to_chief = true;
    sc.peers = {"covariance:0", "ps:0"};
    sc.gradient_workers = {1};
    sc.shard_roles = {{"ps:0", "ps:0"}};
    sc.covariance_roles = {{"covariance:0", "covariance:0"}};
    sc.max_wait = 10s;
    sc.request_timeout = 2s;
    sc.failure_grace = 5s;
    sc.connector = scripted_connectors();
    sc.log = log_into_lines();
    return sc;
  }

  /// A PS shard's node: it waits for the chief's hello, connects to no one.
  supervisor_config shard_config() {
    auto sc = worker_config();
    sc.me = "ps:0";
    sc.reconnects_to_chief = false;
    sc.peers = {};
    sc.gradient_workers.clear();
    sc.shard_roles.clear();
    sc.covariance_roles.clear();
    return sc;
  }

  /// A covariance task's node: connected to the inverse task.
  supervisor_config covariance_config() {
    auto sc = shard_config();
    sc.me = "covariance:0";
    sc.peers = {"inverse:0"};
    return sc;
  }

  /// Spawns the supervisor and hands it the wiring, as the node program
  /// does; the answer lands in `end`.
  void supervise(supervisor_config sc, node_wiring w) {
    auto s = spawn_supervisor(sys, std::move(sc));
    BOOST_REQUIRE(s);
    sup = *s;
    hand_run(std::move(w), 1h);
  }

  node_wiring worker_wiring() {
    worker = spawn(stand_in_worker, wlog);
    node_wiring w;
    w.nodes = {{"chief:0", chief.info()},
               {"ps:0", ps.info()},
               {"covariance:0", cov.info()}};
    w.hosted = {{"worker:1", worker}};
    w.workers = {caf::actor_cast<worker_actor>(worker)};
    return w;
  }

  void start_worker_node() {
    chief_s->running = false; // the chief's driver starts this worker
    supervise(worker_config(), worker_wiring());
    chief_s->running = true;
  }

  /// What a frozen task that thawed answers: the same roles, through a new
  /// node proxy (the old connection was dropped).
  node_info thawed(const task_stand_in& t) {
    auto info = t.info();
    info.role_actors[0] = spawn(stand_in);
    return info;
  }

  void thaw(const std::string& task, const node_info& info) {
    self->send(connectors.at(task), caf::ok_atom::value, info);
    sched.run();
  }

  /// A program's node (actors/cluster_member.hpp): it connects to the
  /// chief itself, watches ps:0 and tells its member role.
  std::shared_ptr<member_log> mlog = std::make_shared<member_log>();
  caf::actor member;

  void start_member_node() {
    auto sc = worker_config();
    sc.me = "evaluator:0";
    sc.peers = {"ps:0"};
    sc.gradient_workers.clear();
    sc.shard_roles.clear();
    sc.covariance_roles.clear();
    sc.member_finish = 30s;
    member = spawn(stand_in_member, mlog);
    node_wiring w;
    w.nodes = {{"chief:0", chief.info()}, {"ps:0", ps.info()}};
    w.hosted = {{"evaluator:0's member role", member}};
    w.member = caf::actor_cast<member_role_actor>(member);
    supervise(std::move(sc), std::move(w));
  }

  /// The chief's word, as the chief asks it (it waits for the answer);
  /// whether the answer came lands in `answered`.
  std::shared_ptr<bool> chief_asks_end() {
    auto answered = std::make_shared<bool>(false);
    auto target = caf::actor_cast<caf::actor>(sup);
    spawn([answered, target](caf::event_based_actor* chief) -> caf::behavior {
      chief->request(target, std::chrono::seconds{3600},
                     shutdown_atom::value, std::string{"training finished"})
        .then([answered](caf::ok_atom) { *answered = true; });
      return {[](int32_t) {}};
    });
    sched.run();
    return answered;
  }

  void chief_ends_run() {
    send_sup(caf::make_message(shutdown_atom::value,
                               std::string{"training finished"}));
  }

  void require_ended(int32_t code) {
    require_an_end();
    BOOST_TEST((*end)->exit_code == code);
  }
};

bool has_code(const caf::error& err, ec code) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(code);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(supervisor_suite, fixture)

// --- connecting, and the end of the run ----------------------------------

BOOST_AUTO_TEST_CASE(the_chiefs_word_ends_the_node_with_success) {
  start_worker_node();
  require_running();
  BOOST_TEST(wlog->rejoins.empty()); // the chief was not running yet
  chief_ends_run();
  require_ended(exit_codes::success);
  BOOST_TEST((*end)->reason == "training finished");
  BOOST_TEST(logged("worker:1: the chief ended the run: training finished"));
}

BOOST_AUTO_TEST_CASE(a_word_before_the_wiring_is_answered_once_wired) {
  auto s = spawn_supervisor(sys, shard_config());
  BOOST_REQUIRE(s);
  sup = *s;
  send_sup(caf::make_message(shutdown_atom::value, std::string{"over"}));
  BOOST_TEST(!end->has_value());
  hand_run(node_wiring{}, 1h);
  require_ended(exit_codes::success);
  BOOST_TEST((*end)->reason == "over");
}

BOOST_AUTO_TEST_CASE(preempted_tells_the_chief_and_ends_with_its_word) {
  start_worker_node();
  send_sup(caf::make_message(preempt_atom::value, std::string{"SIGTERM"}));
  // The chief ends the run after the step in flight; until its word the
  // node keeps its worker, so that the step can finish.
  BOOST_TEST(chief_s->preemptions == std::vector<std::string>{
                                       "worker:1: SIGTERM"});
  require_running();
  BOOST_TEST(logged("preempted (SIGTERM); told the chief"));
  // The worker stops with the chief at the end: no failure.
  kill(worker);
  require_running();
  send_sup(caf::make_message(shutdown_atom::value,
                             std::string{"preempted (worker:1: SIGTERM)"}));
  require_ended(exit_codes::preempted);
  BOOST_TEST(exit_codes::preempted == 143);
}

BOOST_AUTO_TEST_CASE(the_chiefs_preempted_end_gives_every_node_the_code) {
  // Another node was preempted: the chief's word says so.
  start_worker_node();
  send_sup(caf::make_message(shutdown_atom::value,
                             std::string{"preempted (ps:0: SIGINT)"}));
  require_ended(exit_codes::preempted);
}

BOOST_AUTO_TEST_CASE(preempted_without_the_chiefs_word_ends_after_the_wait) {
  start_worker_node();
  send_sup(caf::make_message(preempt_atom::value, std::string{"SIGTERM"}));
  advance(59s);
  require_running();
  advance(1s); // preempt_wait's default
  require_ended(exit_codes::preempted);
  BOOST_TEST(logged("no word from the chief (chief:0 at 127.0.0.1:5000) "
                    "within 60000 ms after the preemption"));
}

/// A shard's node the chief connected to: it knows the chief's node only
/// from its hello (`answers`: whether that node answers one).
void start_shard_node_with_chiefs_hello(fixture& fx, bool answers,
                                        std::shared_ptr<int> hellos) {
  auto sc = fx.shard_config();
  sc.hello = std::make_shared<node_hello>();
  node_wiring w;
  w.hosted = {{"ps:0", fx.ps.role()}};
  fx.supervise(sc, w);
  auto node = fx.spawn(stand_in_chief_node, fx.chief.info(), answers, hellos);
  fx.say_hello("chief:0", node);
  fx.require_running();
}

BOOST_AUTO_TEST_CASE(a_preempted_shard_asks_the_chiefs_node_for_the_chief) {
  // A PS shard (or a K-FAC role's host) does not connect to the chief: it
  // asks the chief's node for its roles, tells the chief, and keeps its
  // shard until the chief's word, so that the step in flight finishes.
  auto hellos = std::make_shared<int>(0);
  start_shard_node_with_chiefs_hello(*this, true, hellos);
  send_sup(caf::make_message(preempt_atom::value, std::string{"SIGTERM"}));
  BOOST_TEST(*hellos == 1);
  BOOST_TEST(chief_s->preemptions == std::vector<std::string>{
                                       "ps:0: SIGTERM"});
  BOOST_TEST(logged("ps:0: preempted (SIGTERM); told the chief"));
  require_running();
  send_sup(caf::make_message(shutdown_atom::value,
                             std::string{"preempted (ps:0: SIGTERM)"}));
  require_ended(exit_codes::preempted);
}

BOOST_AUTO_TEST_CASE(a_preempted_shard_that_cannot_reach_the_chief_ends) {
  // The chief's process frozen: its node holds the hello; after the
  // request timeout the node says so and ends, preempted.
  auto hellos = std::make_shared<int>(0);
  start_shard_node_with_chiefs_hello(*this, false, hellos);
  send_sup(caf::make_message(preempt_atom::value, std::string{"SIGTERM"}));
  BOOST_TEST(*hellos == 1);
  advance(1s);
  require_running();
  advance(1s); // request_timeout
  require_ended(exit_codes::preempted);
  BOOST_TEST(chief_s->preemptions.empty());
  BOOST_TEST(logged("ps:0: preempted (SIGTERM); cannot reach the chief "
                    "(chief:0 at 127.0.0.1:5000: "));
  BOOST_TEST(logged("the node ends without waiting for it"));
}

BOOST_AUTO_TEST_CASE(preempted_with_the_chief_gone_ends_at_once) {
  start_worker_node();
  kill(chief.node);
  send_sup(caf::make_message(preempt_atom::value, std::string{"SIGTERM"}));
  require_ended(exit_codes::preempted);
  BOOST_TEST(chief_s->preemptions.empty());
  BOOST_TEST(logged("preempted (SIGTERM); the node ends without waiting"));
}

BOOST_AUTO_TEST_CASE(a_refused_peer_ends_the_node_naming_it) {
  start_worker_node();
  send_sup(caf::make_message(hello_atom::value, std::string{"chief:0"},
                             std::string{"differs in run.seed: 1 vs 2"}));
  require_ended(exit_codes::failure);
  BOOST_TEST(has_code((*end)->error, ec::invalid_config));
  BOOST_TEST((*end)->reason.find("refused chief:0 at connect: differs in "
                                 "run.seed")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_configurations_are_refused_naming_the_field) {
  auto sc = worker_config();
  sc.max_wait = 0ms;
  auto s = spawn_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("max_wait 0 ms") != std::string::npos);
  sc = worker_config();
  sc.connector = nullptr;
  s = spawn_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("no connector") != std::string::npos);
  sc = worker_config();
  sc.peers.push_back("chief:0");
  s = spawn_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("peer chief:0") != std::string::npos);
}

// --- worker: the node's own role ------------------------------------------

BOOST_AUTO_TEST_CASE(worker_killed_ends_the_node_after_the_grace) {
  start_worker_node();
  kill(worker);
  require_running(); // the chief's word may still come
  advance(4s);
  require_running();
  advance(1s);
  require_ended(exit_codes::failure);
  BOOST_TEST(has_code((*end)->error, ec::peer_down));
  BOOST_TEST((*end)->reason.find("worker:1 stopped") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(worker_stopped_with_the_chief_at_the_end_is_no_failure) {
  start_worker_node();
  kill(worker);
  advance(2s);
  chief_ends_run();
  require_ended(exit_codes::success);
  BOOST_TEST(logged("worker:1 stopped"));
}

BOOST_AUTO_TEST_CASE(worker_back_at_its_address_rejoins_the_run_under_way) {
  // A restarted worker task: the chief's run is under way, and the chief
  // says where to resume.
  chief_s->step = 55;
  supervise(worker_config(), worker_wiring());
  require_running();
  BOOST_TEST(wlog->rejoins == std::vector<int64_t>{55});
  BOOST_TEST(logged("rejoining at global step 55"));
  BOOST_TEST(wlog->rebinds.empty());
}

BOOST_AUTO_TEST_CASE(a_statistics_worker_back_starts_at_the_chiefs_step) {
  auto sc = worker_config();
  sc.gradient_workers.clear();
  sc.stats_worker = true;
  supervise(sc, worker_wiring());
  BOOST_TEST(wlog->starts == 1);
  BOOST_TEST(logged("the statistics worker starts at global step 40"));
}

// --- the chief ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(chief_killed_and_never_back_ends_naming_its_address) {
  start_worker_node();
  answer_connect("chief:0", std::nullopt,
                 make_error(ec::timeout, "peers not reachable after 10 s"));
  kill(chief.node);
  BOOST_TEST(logged("the chief's node went down"));
  // The failed attempt is followed by the next at once.
  BOOST_TEST(connects->asked["chief:0"] == 2);
  require_running(); // until max_wait has passed
  advance(9s);
  require_running();
  advance(1s);
  require_ended(exit_codes::failure);
  BOOST_TEST(has_code((*end)->error, ec::timeout));
  BOOST_TEST((*end)->reason.find("no word from the chief (chief:0 at "
                                 "127.0.0.1:5000) for 10 s (--max_wait)")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(chief_frozen_beyond_max_wait_ends_the_node) {
  start_worker_node();
  kill(chief.node); // the connection timeout turned the freeze into a down
  BOOST_TEST(connects->asked["chief:0"] == 1);
  advance(10s); // the connect request and the wait both run out
  require_ended(exit_codes::failure);
  BOOST_TEST(has_code((*end)->error, ec::timeout));
  BOOST_TEST(wlog->rebinds.empty());
}

BOOST_AUTO_TEST_CASE(chief_frozen_and_thawed_rebinds_the_worker_to_it) {
  start_worker_node();
  auto same = thawed(chief);
  kill(chief.node);
  advance(3s);
  thaw("chief:0", same);
  require_running();
  BOOST_TEST(logged("connected again to chief:0"));
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].chief == chief.role().address()));
  BOOST_TEST((wlog->rebinds[0].shards
              == std::vector<caf::actor_addr>{ps.role().address()}));
  BOOST_TEST(wlog->rebinds[0].step == 40);
  // The old wait is over: max_wait passing changes nothing now.
  advance(10s);
  require_running();
  BOOST_TEST(wlog->rebinds.size() == 1u);
  chief_ends_run();
  require_ended(exit_codes::success);
}

BOOST_AUTO_TEST_CASE(chief_back_at_its_address_rebinds_once_its_steps_go_on) {
  start_worker_node();
  auto restarted = make_task("chief:0", {"chief"});
  chief_s->paused = true; // it waits for another lost task first
  answer_connect("chief:0", restarted.info());
  auto asked = chief_s->asked; // the rejoin at start asked once
  kill(chief.node);
  BOOST_TEST(chief_s->asked == asked + 1);
  BOOST_REQUIRE(chief_s->held.size() == 1u);
  // Asked once and held: no second ask and no rebind while it waits.
  pass(9s);
  require_running();
  BOOST_TEST(chief_s->asked == asked + 1);
  BOOST_TEST(wlog->rebinds.empty());
  // The steps go on at step 37: the held answer rebinds the worker there.
  chief_s->step = 37;
  self->send(restarted.role(), caf::ok_atom::value);
  sched.run();
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].chief == restarted.role().address()));
  BOOST_TEST(wlog->rebinds[0].step == 37);
  BOOST_TEST(logged("rejoining at global step 37"));
  // The new chief's node is watched: losing it is seen too.
  kill(restarted.node);
  BOOST_TEST(connects->asked["chief:0"] == 2);
  advance(10s);
  require_ended(exit_codes::failure);
}

BOOST_AUTO_TEST_CASE(a_task_with_several_workers_rebinds_each_in_turn) {
  // --workers_per_task 2: worker:1 hosts workers 2 and 3. The chief back
  // after a freeze rebinds both, the second once the first is rebound; a
  // paused chief holds the first's ask, and the second waits for it.
  auto sc = worker_config();
  sc.gradient_workers = {2, 3};
  auto w = worker_wiring();
  auto second_log = std::make_shared<worker_log>();
  auto second = spawn(stand_in_worker, second_log);
  w.hosted = {{"worker:2", worker}, {"worker:3", second}};
  w.workers.push_back(caf::actor_cast<worker_actor>(second));
  chief_s->running = false; // the chief's driver starts these workers
  supervise(sc, std::move(w));
  chief_s->running = true;
  BOOST_TEST((chief_s->asked_for == std::vector<int32_t>{2, 3}));
  auto same = thawed(chief);
  kill(chief.node);
  advance(3s);
  chief_s->paused = true;
  thaw("chief:0", same);
  require_running();
  BOOST_REQUIRE(chief_s->held.size() == 1u);
  pass(5s);
  BOOST_TEST(wlog->rebinds.empty());
  BOOST_TEST(second_log->rebinds.empty());
  // The steps go on: the held ask is answered, then the second is asked.
  self->send(chief.role(), caf::ok_atom::value);
  sched.run();
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_REQUIRE(second_log->rebinds.size() == 1u);
  BOOST_TEST((second_log->rebinds[0].chief == chief.role().address()));
  BOOST_TEST(second_log->rebinds[0].step == 40);
  // Asked for 2 and 3 at the start, then for 2 (held) and 3, once each.
  BOOST_TEST((chief_s->asked_for == std::vector<int32_t>{2, 3, 2, 3}));
  BOOST_TEST(logged("rejoining at global step 40 (worker:3)"));
  chief_ends_run();
  require_ended(exit_codes::success);
}

BOOST_AUTO_TEST_CASE(a_rejoin_held_beyond_max_wait_is_given_up_naming_it) {
  start_worker_node();
  auto restarted = make_task("chief:0", {"chief"});
  chief_s->paused = true;
  answer_connect("chief:0", restarted.info());
  kill(chief.node);
  BOOST_REQUIRE(chief_s->held.size() == 1u);
  pass(9s);
  BOOST_TEST(!logged("cannot rebind the worker"));
  advance(1s); // max_wait
  BOOST_TEST(logged("cannot rebind the worker: "));
  BOOST_TEST(logged("the chief did not say where worker 1 rejoins within "
                    "10000 ms (--max_wait_ms)"));
  BOOST_TEST(wlog->rebinds.empty());
  require_running();
  // An answer after the wait reaches nothing.
  self->send(restarted.role(), caf::ok_atom::value);
  sched.run();
  BOOST_TEST(wlog->rebinds.empty());
}

BOOST_AUTO_TEST_CASE(chief_back_says_hello_before_the_connector_answers) {
  // Seen on a busy machine: the restarted chief's node asks this node for
  // its roles (a hello) before this node's own connection to it is up.
  start_worker_node();
  auto restarted = make_task("chief:0", {"chief"});
  kill(chief.node);
  send_sup(caf::make_message(hello_atom::value, std::string{"chief:0"},
                             restarted.node));
  BOOST_TEST(wlog->rebinds.empty());
  BOOST_TEST(!logged("cannot rebind"));
  thaw("chief:0", restarted.info());
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].chief == restarted.role().address()));
  advance(10s); // the wait for the chief ended with the connector's answer
  require_running();
}

BOOST_AUTO_TEST_CASE(a_shards_node_waits_for_the_restarted_chiefs_hello) {
  node_wiring w;
  w.nodes = {{"chief:0", chief.info()}};
  w.hosted = {{"ps:0", ps.role()}};
  supervise(shard_config(), w);
  kill(chief.node);
  BOOST_TEST(connects->asked.empty()); // it does not connect to the chief
  advance(6s);
  auto restarted = make_task("chief:0", {"chief"});
  send_sup(caf::make_message(hello_atom::value, std::string{"chief:0"},
                             restarted.node));
  advance(10s); // the wait for the chief is over
  require_running();
  chief_ends_run();
  require_ended(exit_codes::success);
}

BOOST_AUTO_TEST_CASE(a_shards_node_without_the_chiefs_hello_gives_up) {
  supervise(shard_config(), node_wiring{});
  advance(10s);
  require_ended(exit_codes::failure);
  BOOST_TEST((*end)->reason.find("no word from the chief") != std::string::npos);
}

// --- a PS shard ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(shard_killed_and_never_back_is_not_the_nodes_failure) {
  start_worker_node();
  answer_connect("ps:0", std::nullopt,
                 make_error(ec::timeout, "peers not reachable"));
  kill(ps.node);
  BOOST_TEST(logged("ps:0 went down"));
  BOOST_TEST(!logged("could not connect again to ps:0"));
  // The chief decides what a lost shard means (it rolls back or ends).
  advance(20s);
  BOOST_TEST(logged("could not connect again to ps:0"));
  require_running();
  chief_ends_run();
  require_ended(exit_codes::success);
}

BOOST_AUTO_TEST_CASE(shard_frozen_beyond_max_wait_is_given_up_and_logged) {
  start_worker_node();
  kill(ps.node);
  BOOST_TEST(connects->asked["ps:0"] == 1);
  advance(10s);
  require_running();
  BOOST_TEST(logged("could not connect again to ps:0 within 10000 ms"));
}

BOOST_AUTO_TEST_CASE(shard_frozen_and_thawed_is_watched_again) {
  start_worker_node();
  auto same = ps.info();
  auto proxy = spawn(stand_in);
  same.role_actors[0] = proxy;
  kill(ps.node);
  thaw("ps:0", same);
  BOOST_TEST(logged("connected again to ps:0"));
  kill(proxy);
  BOOST_TEST(connects->asked["ps:0"] == 2);
}

BOOST_AUTO_TEST_CASE(shard_back_at_its_address_goes_into_the_next_rebind) {
  start_worker_node();
  auto restarted = make_task("ps:0", {"ps:0"});
  answer_connect("ps:0", restarted.info());
  kill(ps.node);
  BOOST_TEST(logged("connected again to ps:0"));
  // The chief rolls back and, after its own loss, the worker is rebound
  // with the shard's new actor.
  answer_connect("chief:0", thawed(chief));
  kill(chief.node);
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].shards
              == std::vector<caf::actor_addr>{restarted.role().address()}));
}

// --- covariance and inverse hosts ---------------------------------------

BOOST_AUTO_TEST_CASE(covariance_killed_and_never_back_leaves_it_out) {
  start_worker_node();
  answer_connect("covariance:0", std::nullopt,
                 make_error(ec::timeout, "peers not reachable"));
  kill(cov.node);
  BOOST_TEST(logged("covariance:0 went down"));
  // A rebind then keeps the worker's own covariance actors (none given).
  answer_connect("chief:0", thawed(chief));
  kill(chief.node);
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST(wlog->rebinds[0].covariance.empty());
  require_running();
}

BOOST_AUTO_TEST_CASE(covariance_frozen_beyond_max_wait_is_given_up) {
  start_worker_node();
  kill(cov.node);
  advance(10s);
  require_running();
  BOOST_TEST(logged("could not connect again to covariance:0 within"));
}

BOOST_AUTO_TEST_CASE(covariance_frozen_and_thawed_keeps_its_actor) {
  start_worker_node();
  auto same = cov.info();
  same.role_actors[0] = spawn(stand_in);
  kill(cov.node);
  thaw("covariance:0", same);
  answer_connect("chief:0", thawed(chief));
  kill(chief.node);
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].covariance
              == std::vector<caf::actor_addr>{cov.role().address()}));
}

BOOST_AUTO_TEST_CASE(covariance_back_at_its_address_goes_into_the_rebind) {
  start_worker_node();
  auto restarted = make_task("covariance:0", {"covariance:0"});
  answer_connect("covariance:0", restarted.info());
  kill(cov.node);
  answer_connect("chief:0", thawed(chief));
  kill(chief.node);
  BOOST_REQUIRE(wlog->rebinds.size() == 1u);
  BOOST_TEST((wlog->rebinds[0].covariance
              == std::vector<caf::actor_addr>{restarted.role().address()}));
}

BOOST_AUTO_TEST_CASE(inverse_killed_and_never_back_is_logged) {
  node_wiring w;
  w.nodes = {{"chief:0", chief.info()}, {"inverse:0", inv.info()}};
  w.hosted = {{"covariance:0", cov.role()}};
  supervise(covariance_config(), w);
  answer_connect("inverse:0", std::nullopt,
                 make_error(ec::timeout, "peers not reachable"));
  kill(inv.node);
  BOOST_TEST(logged("covariance:0: inverse:0 went down"));
  advance(10s);
  BOOST_TEST(logged("could not connect again to inverse:0"));
  require_running();
}

BOOST_AUTO_TEST_CASE(inverse_frozen_beyond_max_wait_is_given_up) {
  node_wiring w;
  w.nodes = {{"chief:0", chief.info()}, {"inverse:0", inv.info()}};
  supervise(covariance_config(), w);
  kill(inv.node);
  advance(9s); // one attempt ran out (5 s); the next one is under way
  BOOST_TEST(connects->asked["inverse:0"] == 2);
  BOOST_TEST(!logged("could not connect again to inverse:0"));
  advance(5s); // it runs out too, after max_wait: given up
  BOOST_TEST(connects->asked["inverse:0"] == 2);
  BOOST_TEST(logged("could not connect again to inverse:0 within 10000 ms"));
  require_running();
}

BOOST_AUTO_TEST_CASE(inverse_frozen_and_thawed_is_watched_again) {
  node_wiring w;
  w.nodes = {{"chief:0", chief.info()}, {"inverse:0", inv.info()}};
  supervise(covariance_config(), w);
  auto same = inv.info();
  auto proxy = spawn(stand_in);
  same.role_actors[0] = proxy;
  kill(inv.node);
  thaw("inverse:0", same);
  BOOST_TEST(logged("connected again to inverse:0"));
  kill(proxy);
  BOOST_TEST(connects->asked["inverse:0"] == 2);
}

BOOST_AUTO_TEST_CASE(inverse_back_at_its_address_is_watched_as_the_new_one) {
  node_wiring w;
  w.nodes = {{"chief:0", chief.info()}, {"inverse:0", inv.info()}};
  supervise(covariance_config(), w);
  auto restarted = make_task("inverse:0", {"inverse:0"});
  answer_connect("inverse:0", restarted.info());
  kill(inv.node);
  BOOST_TEST(logged("connected again to inverse:0"));
  // The old node's down message, had it come late, means nothing now; the
  // new node's does.
  kill(restarted.node);
  BOOST_TEST(connects->asked["inverse:0"] == 2);
  chief_ends_run();
  require_ended(exit_codes::success);
}

// --- a program's member role (actors/cluster_member.hpp) ----------------

BOOST_AUTO_TEST_CASE(a_member_role_hears_a_peer_lost_and_back_with_new_roles) {
  start_member_node();
  kill(ps.node);
  BOOST_TEST(mlog->lost == std::vector<std::string>{"ps:0"});
  BOOST_TEST(mlog->back.empty());
  auto restarted = make_task("ps:0", {"ps:0"});
  thaw("ps:0", restarted.info());
  BOOST_TEST(mlog->back == std::vector<std::string>{"ps:0"});
  BOOST_REQUIRE(mlog->back_roles.size() == 1u);
  BOOST_TEST((mlog->back_roles[0] == restarted.role().address()));
  // The chief too: the member connects to it again itself.
  answer_connect("chief:0", thawed(chief));
  kill(chief.node);
  BOOST_TEST((mlog->lost == std::vector<std::string>{"ps:0", "chief:0"}));
  BOOST_TEST((mlog->back == std::vector<std::string>{"ps:0", "chief:0"}));
  require_running();
}

BOOST_AUTO_TEST_CASE(the_chief_hears_the_end_once_the_member_role_finished) {
  start_member_node();
  auto answered = chief_asks_end();
  BOOST_TEST(mlog->ends == std::vector<std::string>{"training finished"});
  // The member role is still at its final work: the chief waits.
  BOOST_TEST(!*answered);
  require_running();
  BOOST_REQUIRE(mlog->held.size() == 1u);
  self->send(member, caf::ok_atom::value);
  sched.run();
  BOOST_TEST(*answered);
  require_ended(exit_codes::success);
  BOOST_TEST((*end)->reason == "training finished");
}

BOOST_AUTO_TEST_CASE(a_member_role_silent_at_the_end_fails_the_node) {
  start_member_node();
  auto answered = chief_asks_end();
  advance(29s);
  require_running();
  advance(1s);
  // The chief goes on; this node failed, saying why.
  BOOST_TEST(*answered);
  require_ended(exit_codes::failure);
  BOOST_TEST((*end)->reason.find("the member role did not answer the end "
                                 "of the run within 30000 ms")
               != std::string::npos,
             (*end)->reason);
}

BOOST_AUTO_TEST_SUITE_END()

// --- the real connector, on loopback ---------------------------------------

BOOST_AUTO_TEST_CASE(the_real_connector_finds_a_task_again_at_its_address) {
  program_config peer_cfg;
  caf::actor_system peer{peer_cfg};
  program_config own_cfg;
  caf::actor_system own{own_cfg};
  caf::scoped_actor self{own};
  auto role = peer.spawn(stand_in);
  // ps:0's node in its own actor system (another process's, as far as
  // the middleman knows).
  auto n = test::ps_node(peer, role);
  auto bound = publish_node(n, "127.0.0.1", 0, false);
  BOOST_REQUIRE(bound);
  auto port = bound->port;
  auto spec = test::loopback_cluster(1, port, 2);
  auto my_node = own.spawn(stand_in);
  connect_options opts;
  opts.timeout = 1000ms;
  opts.request_timeout = 2000ms;
  auto c = spawn_node_connector(own, spec,
                                make_hello(own, {"worker", 0}, my_node), opts);
  auto ask = [&] {
    caf::expected<node_info> got{caf::error{}};
    self->request(c, 20s, connect_atom::value, std::string{"ps:0"})
      .receive([&](node_info& x) { got = std::move(x); },
               [&](caf::error& err) { got = std::move(err); });
    return got;
  };
  auto first = ask();
  BOOST_REQUIRE_MESSAGE(first, test::why(first));
  auto r = role_of<caf::actor>(*first, "ps:0");
  BOOST_REQUIRE(r);
  BOOST_TEST((r->address() == role.address()));
  // Killed: nothing answers at the address; the attempt ends in its
  // timeout, naming the task and the address.
  BOOST_REQUIRE(peer.middleman().unpublish(n, port));
  self->send_exit(n, caf::exit_reason::kill);
  auto gone = ask();
  BOOST_REQUIRE(!gone);
  BOOST_TEST(has_code(gone.error(), ec::timeout));
  BOOST_TEST(render(gone.error()).find("ps:0 at 127.0.0.1:"
                                       + std::to_string(port))
             != std::string::npos);
  // Back at the same address: the new node's roles.
  auto role2 = peer.spawn(stand_in);
  auto n2 = test::ps_node(peer, role2);
  auto again = publish_node(n2, "127.0.0.1", port, false);
  BOOST_REQUIRE(again);
  auto back = ask();
  BOOST_REQUIRE_MESSAGE(back, test::why(back));
  auto r2 = role_of<caf::actor>(*back, "ps:0");
  BOOST_REQUIRE(r2);
  BOOST_TEST((r2->address() == role2.address()));
  for (auto a : {caf::actor_cast<caf::actor>(c), my_node})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  caf::scoped_actor peer_self{peer};
  for (auto a : {role, role2, caf::actor_cast<caf::actor>(n2)})
    peer_self->send_exit(a, caf::exit_reason::user_shutdown);
}
