#define BOOST_TEST_MODULE chief_supervisor
#include <boost/test/unit_test.hpp>

// The chief's node supervisor (actors/chief_supervisor.hpp) on CAF's test
// scheduler: nothing runs until the test says so and time moves only when
// the test advances the test clock, so every loss, probe, wait and timeout
// happens in one order, without sleeps. One case per loss kind the chief's
// node sees (a PS shard: rollback to the checkpoint; a covariance actor; an
// inverse actor; a worker) and per way of losing it: killed and back at its
// address (new actors), frozen and found by the probe, frozen and thawed
// (the same actors), and waits that run out naming whom they waited for.
//
// The supervisor's peers are stand-ins that answer its requests the way the
// real roles' interfaces do: a chief that holds its run request until the
// test ends the run, and fails it with ec::peer_lost when told a role is
// lost; shards, covariance and inverse actors that hand out and take back
// snapshots and answer (or, frozen, hold) status requests; a worker that
// records its start and rebinds; connectors answering what the test
// scripts. The supervisor with its real peers runs in the loopback fault
// tests (tests/examples/faults.cpp, fault_digests.cpp).

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/chief_supervisor.hpp"
#include "tests/actors/supervisor_fixture.hpp"
#include "tests/actors/supervisor_stand_ins.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace std::chrono_literals;
using namespace syncfac::testing;

namespace {

/// What reached the stand-in chief.
struct chief_log {
  int64_t step = 42;
  /// Run requests held until the run ends or a role is lost.
  std::vector<caf::response_promise> held;
  int run_requests = 0;
  std::vector<std::string> lost;
  /// Rollbacks: the step and the shards handed over.
  std::vector<int64_t> rollbacks;
  std::vector<caf::actor_addr> rollback_shard;
  /// The workers' resume points handed over with a rollback (the
  /// checkpoint's, for a worker that rejoins instead of being rebound).
  std::vector<resume_point> rollback_points;
  int64_t incarnation = 0;
  /// The workers that asked where they rejoin.
  std::vector<int32_t> rejoins;
  /// The K-FAC roles it was told of last.
  std::vector<caf::actor_addr> covariance;
  std::vector<caf::actor_addr> inverses;
};

caf::behavior stand_in_chief(caf::event_based_actor* self,
                             std::shared_ptr<chief_log> log) {
  return {
    [=](run_atom, const std::vector<covariance_actor>&)
      -> caf::result<sync_summary> {
      ++log->run_requests;
      log->held.push_back(self->make_response_promise());
      return caf::delegated<sync_summary>{};
    },
    [=](lost_atom, const std::string& task) {
      log->lost.push_back(task);
      for (auto& rp : log->held)
        rp.deliver(make_error(ec::peer_lost, task + " lost at global step "
                                               + std::to_string(log->step)));
      log->held.clear();
    },
    [=](status_atom) {
      chief_status cs;
      cs.global_step = log->step;
      return cs;
    },
    [=](rollback_atom, int64_t step, const std::vector<ps_actor>& ps,
        const std::vector<resume_point>& points) {
      log->rollbacks.push_back(step);
      log->rollback_points = points;
      log->rollback_shard.clear();
      for (const auto& s : ps)
        log->rollback_shard.push_back(s.address());
      log->step = step;
      return ++log->incarnation;
    },
    // A worker asks where it rejoins.
    [=](rejoin_atom, int32_t worker) {
      log->rejoins.push_back(worker);
      resume_point rp;
      rp.global_step = log->step;
      rp.incarnation = log->incarnation;
      return rp;
    },
    [=](rewire_atom, const std::vector<covariance_actor>& cov,
        const std::vector<inverse_actor>& inv) {
      log->covariance.clear();
      log->inverses.clear();
      for (const auto& c : cov)
        log->covariance.push_back(c.address());
      for (const auto& k : inv)
        log->inverses.push_back(k.address());
    },
    // The test ends the run.
    [=](caf::ok_atom) {
      sync_summary s;
      s.global_step = log->step;
      for (auto& rp : log->held)
        rp.deliver(s);
      log->held.clear();
    },
  };
}

/// What reached a stand-in role, and whether it is frozen (it holds
/// status requests until the test thaws it).
struct role_log {
  bool frozen = false;
  std::vector<caf::response_promise> held;
  /// Restores from a checkpoint: the snapshot's step (a shard) or newest
  /// folded step (a covariance actor).
  std::vector<int64_t> restores;
  /// The peers it was handed (a covariance actor's inverses, an inverse
  /// actor's shards).
  std::vector<std::vector<caf::actor_addr>> handed;
  /// A shard whose snapshot requests are held until the test releases
  /// them (a restore chain in flight).
  bool hold_snapshots = false;
  std::vector<caf::response_promise> held_snapshots;
};

/// Thaws a frozen role (in the role's context, from its message): its
/// held status requests are answered.
template <class Status>
void thaw(const std::shared_ptr<role_log>& log) {
  log->frozen = false;
  for (auto& rp : log->held)
    rp.deliver(Status{});
  log->held.clear();
}

template <class Status>
caf::result<Status> status_of(caf::event_based_actor* self,
                              const std::shared_ptr<role_log>& log) {
  if (!log->frozen)
    return Status{};
  log->held.push_back(self->make_response_promise());
  return caf::delegated<Status>{};
}

template <class Handles>
std::vector<caf::actor_addr> addresses(const Handles& hs) {
  std::vector<caf::actor_addr> out;
  for (const auto& h : hs)
    out.push_back(h.address());
  return out;
}

caf::behavior stand_in_shard(caf::event_based_actor* self,
                             std::shared_ptr<role_log> log) {
  return {
    [=](checkpoint_atom) -> caf::result<shard_snapshot> {
      if (!log->hold_snapshots)
        return shard_snapshot{};
      log->held_snapshots.push_back(self->make_response_promise());
      return caf::delegated<shard_snapshot>{};
    },
    [=](checkpoint_atom, caf::ok_atom) {
      for (auto& rp : log->held_snapshots)
        rp.deliver(shard_snapshot{});
      log->held_snapshots.clear();
    },
    [=](restore_atom, const shard_snapshot& snap) {
      log->restores.push_back(snap.global_step);
      return caf::ok_atom::value;
    },
    [=](pull_atom) { return shard_params{}; },
    [=](status_atom) { return status_of<shard_status>(self, log); },
    [=](caf::ok_atom) { thaw<shard_status>(log); },
  };
}

caf::behavior stand_in_covariance(caf::event_based_actor* self,
                                  std::shared_ptr<role_log> log) {
  return {
    [=](checkpoint_atom) { return covariance_snapshot{}; },
    [=](restore_atom, const covariance_snapshot& snap) {
      log->restores.push_back(snap.last_folded);
      return caf::ok_atom::value;
    },
    [=](rewire_atom, const std::vector<inverse_actor>& inv) {
      log->handed.push_back(addresses(inv));
    },
    [=](status_atom) { return status_of<covariance_status>(self, log); },
    [=](caf::ok_atom) { thaw<covariance_status>(log); },
  };
}

caf::behavior stand_in_inverse(caf::event_based_actor* self,
                               std::shared_ptr<role_log> log) {
  return {
    [=](rewire_atom, const std::vector<ps_actor>& ps) {
      log->handed.push_back(addresses(ps));
    },
    [=](status_atom) { return status_of<inverse_status>(self, log); },
    [=](caf::ok_atom) { thaw<inverse_status>(log); },
  };
}

/// What reached the stand-in worker.
struct worker_log {
  int starts = 0;
  /// Rebinds: the step, the shard and covariance actors handed over.
  std::vector<int64_t> rebinds;
  std::vector<caf::actor_addr> shard;
  std::vector<caf::actor_addr> covariance;
};

caf::behavior stand_in_worker(caf::event_based_actor*,
                              std::shared_ptr<worker_log> log) {
  return {
    [=](run_atom) { ++log->starts; },
    [=](run_atom, const resume_point&) { ++log->starts; },
    [=](run_atom, const resume_point& rp, const chief_actor&,
        const std::vector<ps_actor>& ps,
        const std::vector<covariance_actor>& cov) {
      log->rebinds.push_back(rp.global_step);
      log->shard = addresses(ps);
      log->covariance = addresses(cov);
    },
  };
}

/// A worker task's node, which connects to the chief itself: it answers
/// the chief's hello with its roles.
caf::behavior stand_in_worker_node(caf::event_based_actor*,
                                   std::shared_ptr<node_info> info) {
  return {
    [=](hello_atom, const node_hello&) { return *info; },
  };
}

struct fixture : supervisor_fixture<chief_supervisor_actor, chief_run_end> {
  std::shared_ptr<chief_log> chief_l = std::make_shared<chief_log>();
  /// The newest checkpoint the run's directory holds (none: nullptr).
  std::shared_ptr<restored_run> newest = [] {
    auto r = std::make_shared<restored_run>();
    r->global_step = 30;
    r->path = "ckpt-30";
    return r;
  }();
  bool writes_checkpoints = true;

  // The supervisor asks `newest` for the checkpoint after a loss, and the
  // shutdown's losses may come before its own end: ended while it stands.
  ~fixture() override {
    shut_down();
  }

  caf::actor chief = spawn(stand_in_chief, chief_l);

  /// One task of the cluster with one role, and what reached the role.
  struct role_task {
    task_stand_in task;
    std::shared_ptr<role_log> log = std::make_shared<role_log>();
  };

  template <class F>
  role_task make_role_task(const std::string& name, F behaviour) {
    role_task t;
    t.task.task = name;
    t.task.node = spawn(stand_in);
    t.task.roles.emplace_back(name, spawn(behaviour, t.log));
    return t;
  }

  role_task ps = make_role_task("ps:0", stand_in_shard);
  role_task cov = make_role_task("covariance:0", stand_in_covariance);
  role_task inv = make_role_task("inverse:0", stand_in_inverse);

  /// The worker task (it connects to the chief): its node and worker.
  struct worker_task {
    caf::actor node;
    caf::actor worker;
    std::shared_ptr<worker_log> log = std::make_shared<worker_log>();
  };

  worker_task make_worker_task() {
    worker_task w;
    w.worker = spawn(stand_in_worker, w.log);
    auto info = std::make_shared<node_info>();
    w.node = spawn(stand_in_worker_node, info);
    *info = info_of("worker:0", w.node, {{"worker:0", w.worker}});
    return w;
  }

  worker_task worker = make_worker_task();

  chief_supervisor_config config() {
    chief_supervisor_config sc;
    sc.me = "chief:0";
    sc.addresses = {{"chief:0", "127.0.0.1:4000"},
                    {"ps:0", "127.0.0.1:4001"},
                    {"covariance:0", "127.0.0.1:4002"},
                    {"inverse:0", "127.0.0.1:4003"},
                    {"worker:0", "127.0.0.1:4010"}};
    sc.placement.shards = {{"ps:0", "ps:0"}};
    sc.placement.workers = {{"worker:0", "worker:0"}};
    sc.placement.covariance = {{"covariance:0", "covariance:0"}};
    sc.placement.inverses = {{"inverse:0", "inverse:0"}};
    sc.passive = {"worker:0"};
    sc.hello = std::make_shared<node_hello>();
    sc.max_wait = 10s;
    sc.request_timeout = 2s;
    sc.probe_timeout = 4s;
    sc.connect_attempt = 3s;
    sc.hello_retry = 200ms;
    sc.connector = scripted_connectors();
    sc.log = log_into_lines();
    return sc;
  }

  chief_run wiring() {
    chief_run run;
    run.chief = caf::actor_cast<chief_actor>(chief);
    run.nodes = {{"ps:0", ps.task.info()},
                 {"covariance:0", cov.task.info()},
                 {"inverse:0", inv.task.info()}};
    run.awaited = {"worker:0"};
    run.await_wait = 30s;
    auto ckpt = &newest;
    run.newest_checkpoint = [ckpt]()
      -> caf::expected<std::shared_ptr<const restored_run>> { return *ckpt; };
    run.writes_checkpoints = writes_checkpoints;
    run.run_timeout = 1h;
    return run;
  }

  /// Spawns the supervisor and hands it the run, as the chief's driver
  /// does; the answer lands in `end`. The worker task says hello unless
  /// `hello` is false.
  void supervise(bool hello = true) {
    auto s = spawn_chief_supervisor(sys, config());
    BOOST_REQUIRE(s);
    sup = *s;
    if (hello)
      say_hello("worker:0", worker.node);
    hand_run(wiring(), 24h);
  }

  /// A restarted task: a new node and a new role actor, back at the old
  /// one's address (its connector's next attempt answers them).
  template <class F>
  role_task restarted(const role_task& was, F behaviour) {
    auto back = make_role_task(was.task.task, behaviour);
    answer_connect(back.task.task, back.task.info());
    return back;
  }

  /// The role of `was` is killed; its task restarts at its address.
  template <class F>
  role_task killed_and_restarted(const role_task& was, F behaviour) {
    auto back = restarted(was, behaviour);
    kill(was.task.role());
    return back;
  }

  /// The frozen task of `t` thaws: its role answers again.
  void thaw_role(const role_task& t) {
    self->send(t.task.role(), caf::ok_atom::value);
    sched.run();
  }

  void end_the_run() {
    self->send(chief, caf::ok_atom::value);
    sched.run();
  }

  /// The run ended without an error.
  void require_finished() {
    require_an_end();
    BOOST_REQUIRE_MESSAGE(!(*end)->error, render((*end)->error));
  }

  /// The run ended with an error of `code` whose text holds `part`.
  void require_failed(ec code, const std::string& part) {
    require_an_end();
    const auto& err = (*end)->error;
    BOOST_TEST(err.category() == error_category);
    BOOST_TEST(err.code() == static_cast<uint8_t>(code));
    BOOST_TEST_MESSAGE(render(err));
    BOOST_TEST(render(err).find(part) != std::string::npos, render(err));
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(chief_supervisor_suite, fixture)

// --- connecting and the start ----------------------------------------------

BOOST_AUTO_TEST_CASE(the_run_starts_once_the_awaited_worker_said_hello) {
  supervise(false);
  BOOST_TEST(chief_l->run_requests == 0);
  BOOST_TEST(worker.log->starts == 0);
  say_hello("worker:0", worker.node);
  require_running();
  BOOST_TEST(chief_l->run_requests == 1);
  BOOST_TEST(worker.log->starts == 1);
  // The chief learnt its K-FAC roles before the run.
  BOOST_TEST(chief_l->covariance.size() == 1u);
  BOOST_TEST(chief_l->inverses.size() == 1u);
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->summary.global_step == 42);
  BOOST_TEST((*end)->shards_lost == 0);
}

BOOST_AUTO_TEST_CASE(an_awaited_task_that_never_says_hello_ends_naming_it) {
  supervise(false);
  advance(29s);
  require_running();
  advance(1s);
  require_failed(ec::timeout, "worker:0 at 127.0.0.1:4010");
  BOOST_TEST(chief_l->run_requests == 0);
}

BOOST_AUTO_TEST_CASE(a_refusal_before_the_run_ends_it_at_once_naming_it) {
  // The node refused worker:0 (another --kfac_precision, say) before the
  // run was handed over: the run ends with that text as it comes, not
  // after the connect timeout.
  auto s = spawn_chief_supervisor(sys, config());
  BOOST_REQUIRE(s);
  sup = *s;
  send_sup(caf::make_message(hello_atom::value, std::string{"worker:0"},
                             std::string{"optimizer.kfac.precision: "
                                         "'bf16' here, 'fp32' at the chief"}));
  hand_run(wiring(), 24h);
  require_failed(ec::invalid_config,
                 "refused worker:0 at connect: optimizer.kfac.precision");
  BOOST_TEST(chief_l->run_requests == 0);
}

BOOST_AUTO_TEST_CASE(a_task_refused_then_configured_right_is_not_held_against) {
  // The refused worker was restarted with the right flags and said hello:
  // the run starts.
  auto s = spawn_chief_supervisor(sys, config());
  BOOST_REQUIRE(s);
  sup = *s;
  send_sup(caf::make_message(hello_atom::value, std::string{"worker:0"},
                             std::string{"batch_size: 64 here, 32 at the "
                                         "chief"}));
  say_hello("worker:0", worker.node);
  hand_run(wiring(), 24h);
  require_running();
  BOOST_TEST(chief_l->run_requests == 1);
  end_the_run();
  require_finished();
}

BOOST_AUTO_TEST_CASE(a_task_that_cannot_join_before_the_run_ends_it_at_handover) {
  // ps:0 (a task the chief connects to, not one it awaits) said it cannot
  // join before the run was handed over: the handover ends the run with
  // its words, whichever task it is.
  auto s = spawn_chief_supervisor(sys, config());
  BOOST_REQUIRE(s);
  sup = *s;
  send_sup(caf::make_message(refuse_atom::value, std::string{"ps:0"},
                             std::string{"cannot publish this node"}));
  say_hello("worker:0", worker.node);
  hand_run(wiring(), 24h);
  require_failed(ec::invalid_config,
                 "ps:0 cannot join the run: cannot publish this node");
  BOOST_TEST(chief_l->run_requests == 0);
}

BOOST_AUTO_TEST_CASE(an_awaited_worker_that_cannot_join_ends_the_run_at_once) {
  // While the chief awaits worker:0, it says it cannot join (its shard
  // is smaller than a batch): the run ends now, not at the connect
  // timeout.
  supervise(false);
  send_sup(caf::make_message(refuse_atom::value, std::string{"worker:0"},
                             std::string{"fewer than one batch of 300"}));
  require_failed(ec::invalid_config,
                 "worker:0 cannot join the run: fewer than one batch of 300");
  BOOST_TEST(chief_l->run_requests == 0);
}

BOOST_AUTO_TEST_CASE(a_task_that_cannot_join_while_the_run_runs_is_logged) {
  // A restarted worker that cannot join while the run goes on is a task
  // that did not come back (the chief's own account of lost workers): the
  // run goes on.
  supervise();
  require_running();
  send_sup(caf::make_message(refuse_atom::value, std::string{"worker:0"},
                             std::string{"its device cannot be made"}));
  require_running();
  BOOST_TEST(logged("worker:0 cannot join the run: its device cannot be "
                    "made"));
  end_the_run();
  require_finished();
}

// --- a PS shard --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_killed_ps_shard_back_rolls_the_run_back_to_the_checkpoint) {
  supervise();
  auto back = killed_and_restarted(ps, stand_in_shard);
  require_running();
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"ps:0"});
  // Restored from the checkpoint, the chief rolled back to its step with
  // the new shard, the worker rebound there, the run request out again.
  BOOST_TEST(back.log->restores == std::vector<int64_t>{30});
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{30});
  BOOST_TEST((chief_l->rollback_shard
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  // Before it, each worker's resume point in the checkpoint: a worker that
  // rejoins instead of being rebound starts there.
  BOOST_REQUIRE_EQUAL(chief_l->rollback_points.size(), 1u);
  BOOST_TEST(chief_l->rollback_points[0].global_step == 30);
  BOOST_TEST(worker.log->rebinds == std::vector<int64_t>{30});
  BOOST_TEST((worker.log->shard
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  // The covariance actors go back to the checkpoint with the shards.
  BOOST_TEST(cov.log->restores.size() == 1u);
  BOOST_TEST(chief_l->run_requests == 2);
  BOOST_TEST(logged("the run rolls back to global step 30 (ckpt-30), 12 "
                    "step(s) to do again"),
             all_lines());
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->shards_lost == 1);
  BOOST_TEST((*end)->kfac_roles_lost == 0);
  BOOST_TEST((*end)->rolled_back_steps == 12);
  BOOST_TEST(((*end)->roles.shards.at(0).address()
              == back.task.role().address()));
}

BOOST_AUTO_TEST_CASE(a_lost_ps_shard_without_checkpoints_ends_naming_the_flag) {
  writes_checkpoints = false;
  supervise();
  kill(ps.task.role());
  require_failed(ec::peer_lost, "--checkpoint_dir");
  BOOST_TEST(chief_l->rollbacks.empty());
}

BOOST_AUTO_TEST_CASE(a_lost_ps_shard_before_the_first_checkpoint_ends_the_run) {
  newest.reset();
  supervise();
  kill(ps.task.role());
  require_failed(ec::peer_lost, "before the run's first checkpoint");
}

BOOST_AUTO_TEST_CASE(a_ps_shard_never_back_ends_the_run_naming_it) {
  supervise();
  kill(ps.task.role());
  pass(9s);
  require_running();
  // Asked again after each attempt (3 s each) ran out.
  BOOST_TEST(connects->asked["ps:0"] >= 3);
  pass(1s);
  require_failed(ec::timeout, "ps:0 at 127.0.0.1:4001 (hosting ps:0)");
  BOOST_TEST(render((*end)->error).find("--max_wait_ms") != std::string::npos);
  BOOST_TEST(chief_l->rollbacks.empty());
}

BOOST_AUTO_TEST_CASE(a_role_lost_during_a_shards_restore_restarts_the_restore) {
  // ps:0 is back and its restore is in flight (its snapshot held) when the
  // covariance task goes away too. The recovery begins again with both;
  // the chain in flight, once its snapshot comes, reaches nothing: one
  // restore of the shard, one rollback, one run request more.
  supervise();
  auto back = restarted(ps, stand_in_shard);
  back.log->hold_snapshots = true;
  kill(ps.task.role());
  BOOST_REQUIRE_EQUAL(back.log->held_snapshots.size(), 1u);
  BOOST_TEST(chief_l->rollbacks.empty());
  auto cov_back = killed_and_restarted(cov, stand_in_covariance);
  BOOST_TEST(logged("chief: covariance:0 lost too"), all_lines());
  // The new attempt's restore asked the shard again.
  BOOST_REQUIRE_EQUAL(back.log->held_snapshots.size(), 2u);
  BOOST_TEST(chief_l->rollbacks.empty());
  back.log->hold_snapshots = false;
  self->send(back.task.role(), checkpoint_atom::value, caf::ok_atom::value);
  sched.run();
  require_running();
  BOOST_TEST(back.log->restores == std::vector<int64_t>{30});
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{30});
  BOOST_TEST(chief_l->run_requests == 2);
  BOOST_TEST(cov_back.log->restores.size() == 1u);
  BOOST_TEST((chief_l->covariance
             == std::vector<caf::actor_addr>{cov_back.task.role().address()}));
  BOOST_TEST(worker.log->rebinds == std::vector<int64_t>{30});
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->shards_lost == 1);
  BOOST_TEST((*end)->kfac_roles_lost == 1);
  BOOST_TEST((*end)->rolled_back_steps == 12);
}

// --- a covariance actor --------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_killed_covariance_task_back_takes_the_checkpoints_factors) {
  supervise();
  auto back = killed_and_restarted(cov, stand_in_covariance);
  require_running();
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"covariance:0"});
  // No rollback: the run goes on from the chief's step; only the new
  // covariance actor takes the checkpoint's factors.
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{42});
  BOOST_TEST(back.log->restores.size() == 1u);
  BOOST_TEST(ps.log->restores.empty());
  BOOST_TEST(back.log->handed.size() == 1u); // its inverse actors
  BOOST_TEST((chief_l->covariance
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  BOOST_TEST(worker.log->rebinds == std::vector<int64_t>{42});
  BOOST_TEST((worker.log->covariance
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  BOOST_TEST(logged("covariance:0 is back; the run goes on from there "
                    "(factors of a new covariance actor from ckpt-30)"),
             all_lines());
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->kfac_roles_lost == 1);
  BOOST_TEST((*end)->shards_lost == 0);
  BOOST_TEST((*end)->rolled_back_steps == 0);
}

// --- an inverse actor ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_killed_inverse_task_back_is_handed_to_the_covariance_actors) {
  supervise();
  auto back = killed_and_restarted(inv, stand_in_inverse);
  require_running();
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"inverse:0"});
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{42});
  BOOST_REQUIRE(!cov.log->handed.empty());
  BOOST_TEST((cov.log->handed.back()
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  BOOST_TEST(back.log->handed.size() == 1u); // the shards it ships to
  BOOST_TEST((chief_l->inverses
             == std::vector<caf::actor_addr>{back.task.role().address()}));
  BOOST_TEST(cov.log->restores.empty()); // the covariance actor kept its own
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->kfac_roles_lost == 1);
}

// --- frozen K-FAC roles, found by the probe ------------------------------------

BOOST_AUTO_TEST_CASE(a_frozen_covariance_task_is_found_by_the_probe_and_thawed) {
  supervise();
  cov.log->frozen = true;
  // Probed every 2 s: the probe at 2 s is the first it leaves unanswered,
  // and its 4 s run out at 6 s.
  pass(5s);
  BOOST_TEST(chief_l->lost.empty());
  pass(1s);
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"covariance:0"});
  BOOST_TEST(logged("no answer to a liveness probe within 4000 ms"),
             all_lines());
  require_running();
  // Still frozen: its connector's attempts are held.
  pass(5s);
  BOOST_TEST(chief_l->rollbacks.empty());
  // It thaws: the same actors answer again.
  thaw_role(cov);
  answer_connect("covariance:0", cov.task.info());
  pass(3s); // the held connect attempt runs out; the next one answers
  require_running();
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{42});
  BOOST_TEST(cov.log->restores.empty()); // its state kept
  BOOST_TEST(logged("(the same actors: the task was frozen and thawed, its "
                    "state kept)"),
             all_lines());
  BOOST_TEST(worker.log->rebinds == std::vector<int64_t>{42});
  BOOST_TEST(chief_l->run_requests == 2);
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->kfac_roles_lost == 1);
  BOOST_TEST((*end)->rolled_back_steps == 0);
}

BOOST_AUTO_TEST_CASE(a_frozen_inverse_task_is_found_by_the_probe) {
  supervise();
  inv.log->frozen = true;
  pass(6s);
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"inverse:0"});
  require_running();
}

BOOST_AUTO_TEST_CASE(a_role_frozen_beyond_max_wait_ends_the_run_naming_it) {
  supervise();
  cov.log->frozen = true;
  pass(6s);
  // Lost when its probe ran out (6 s): the wait for it ends at 16 s.
  BOOST_TEST(chief_l->lost == std::vector<std::string>{"covariance:0"});
  pass(9s);
  require_running();
  pass(1s);
  require_failed(ec::timeout,
                 "covariance:0 at 127.0.0.1:4002 (hosting covariance:0)");
}

BOOST_AUTO_TEST_CASE(a_role_silent_once_the_first_is_back_is_waited_for_too) {
  supervise();
  // Whoever froze may have lost others whose loss never came: the inverse
  // task froze too, its link up, no down message.
  inv.log->frozen = true;
  auto back = killed_and_restarted(ps, stand_in_shard);
  BOOST_TEST(chief_l->rollbacks.empty());
  pass(4s); // the probe of every role once the shard was back
  BOOST_TEST(logged("inverse:0 does not answer either; waiting for it too"),
             all_lines());
  BOOST_TEST(chief_l->rollbacks.empty());
  thaw_role(inv);
  answer_connect("inverse:0", inv.task.info());
  pass(3s);
  require_running();
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{30});
  end_the_run();
  require_finished();
  BOOST_TEST((*end)->shards_lost == 1);
  BOOST_TEST((*end)->kfac_roles_lost == 1);
}

// --- a worker ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_worker_back_at_its_address_is_rebound_by_the_next_rollback) {
  supervise();
  BOOST_TEST(worker.log->starts == 1);
  // The worker task restarted (its own supervisor rejoins the run): its
  // new node says hello, and the chief's supervisor learns its worker.
  auto again = make_worker_task();
  say_hello("worker:0", again.node);
  auto back = killed_and_restarted(ps, stand_in_shard);
  require_running();
  BOOST_TEST(again.log->rebinds == std::vector<int64_t>{30});
  BOOST_TEST(worker.log->rebinds.empty()); // the old one is gone
  end_the_run();
  require_finished();
  BOOST_TEST(((*end)->roles.workers.at(0).address()
              == again.worker.address()));
}

BOOST_AUTO_TEST_CASE(a_worker_reached_again_after_the_rollback_is_left_to_its_node) {
  // A frozen chief: the worker's node lost its link with the chief's and
  // connected again on its own, but its roles came only after the
  // rollback's rebind, which went to the proxy of the broken link. Here
  // another actor of the same node stands for the new proxy. The worker's
  // own node asks the chief where it rejoins, and a chief still paused
  // holds that ask until its steps go on (tests/actors/supervisor.cpp,
  // tests/actors/sync_replicas.cpp): the chief's supervisor rebinds
  // nothing itself.
  supervise();
  auto back = killed_and_restarted(ps, stand_in_shard);
  require_running();
  BOOST_TEST(worker.log->rebinds == std::vector<int64_t>{30});
  auto proxy = make_worker_task();
  say_hello("worker:0", proxy.node);
  require_running();
  BOOST_TEST(chief_l->rejoins.empty());
  BOOST_TEST(proxy.log->rebinds.empty());
  end_the_run();
  require_finished();
  BOOST_TEST(((*end)->roles.workers.at(0).address()
              == proxy.worker.address()));
}

BOOST_AUTO_TEST_CASE(a_worker_reached_again_while_restoring_gets_the_rollbacks_rebind) {
  // The worker's roles come while the supervisor probes the roles before
  // the restore (here the shard back holds its status answer): the
  // rollback's rebind goes to the worker as reached now.
  supervise();
  auto back = restarted(ps, stand_in_shard);
  back.log->frozen = true;
  kill(ps.task.role());
  BOOST_TEST(chief_l->rollbacks.empty()); // the probe waits on the shard
  auto proxy = make_worker_task();
  say_hello("worker:0", proxy.node);
  thaw_role(back);
  require_running();
  BOOST_TEST(chief_l->rollbacks == std::vector<int64_t>{30});
  BOOST_TEST(proxy.log->rebinds == std::vector<int64_t>{30});
  BOOST_TEST(worker.log->rebinds.empty());
  BOOST_TEST(chief_l->rejoins.empty()); // nothing left to rebind later
  end_the_run();
  require_finished();
}

BOOST_AUTO_TEST_CASE(a_worker_met_again_without_a_recovery_is_left_to_its_node) {
  // No recovery rebound it: a new worker of the node (a restart) rejoins
  // through its own node's supervisor, not the chief's.
  supervise();
  auto again = make_worker_task();
  say_hello("worker:0", again.node);
  require_running();
  BOOST_TEST(chief_l->rejoins.empty());
  BOOST_TEST(again.log->rebinds.empty());
  end_the_run();
  require_finished();
}

BOOST_AUTO_TEST_CASE(bad_configurations_are_refused_naming_the_field) {
  auto sc = config();
  sc.max_wait = 0s;
  auto s = spawn_chief_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("max_wait") != std::string::npos);
  sc = config();
  sc.hello.reset();
  s = spawn_chief_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("hello") != std::string::npos);
  // The probe of the K-FAC roles moved here from the chief: a negative
  // timeout is refused by name.
  sc = config();
  sc.probe_timeout = -1ms;
  s = spawn_chief_supervisor(sys, sc);
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("probe_timeout") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
