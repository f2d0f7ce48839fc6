#define BOOST_TEST_MODULE worker_states
#include <boost/test/unit_test.hpp>

// The worker's states (actors/worker.cpp) on CAF's test scheduler: nothing
// runs until the test says so and time moves only when the test advances
// the test clock, so a loss, a rebind and an answer of the binding before
// it happen in one order, without sleeps. The PS shard is a real one; the
// chief is a stand-in that holds each token request until the test grants
// it (or, frozen, lets the worker's request time out), and the device one
// that returns a constant gradient of the shard's one variable.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "tests/helpers.hpp"
#include "tests/test_scheduler.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

/// What reached a stand-in chief: the local_step of each token request
/// and the stale pushes its report named.
struct chief_log {
  std::vector<int64_t> token_requests;
  std::vector<int32_t> stale_reported;
};

/// Holds every token request until the test grants them (ok_atom, grant);
/// a request never granted times out at the worker (a frozen chief).
caf::behavior stand_in_chief(caf::event_based_actor* self,
                             std::shared_ptr<chief_log> log) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [=](token_atom, const worker_report& rep) -> caf::result<token_grant> {
      log->token_requests.push_back(rep.local_step);
      log->stale_reported.push_back(rep.stale_shards);
      held->push_back(self->make_response_promise());
      return caf::delegated<token_grant>{};
    },
    [=](caf::ok_atom, const token_grant& grant) {
      for (auto& rp : *held)
        rp.deliver(grant);
      held->clear();
    },
  };
}

/// The model is the shard's one variable; its gradient is always 0.5. It
/// counts the K-FAC statistics it computes (the statistics role's steps).
caf::behavior stand_in_device(caf::event_based_actor*,
                              std::shared_ptr<int> stats_computed) {
  return {
    [](load_model_atom, const model_spec&, uint64_t) {
      return model_info{"v0", 1, {{"v0", tensor{tensor_shape{}}}}};
    },
    [](grads_atom, const parameter_set&, const batch& b) {
      step_result res;
      res.loss = 1.0f;
      res.count = static_cast<int64_t>(b.labels.size());
      res.gradients = {{"v0", tensor{tensor_shape{}, {0.5f}}}};
      return res;
    },
    [=](stats_atom, const parameter_set&, const batch& b,
        const stats_request&) {
      ++*stats_computed;
      stats_update u;
      u.examples = static_cast<int64_t>(b.labels.size());
      u.layers.push_back(layer_stats{"dense", {}, {}, {}, {}});
      return u;
    },
  };
}

/// The requests a stand-in shard holds unanswered, and how many pushes came.
struct held_requests {
  int pushes = 0;
  std::vector<caf::response_promise> promises;
};

/// A shard slow to answer pushes: it answers a plain pull at once with its
/// one variable at step 0 and holds every push and every waiting pull.
caf::behavior shard_holding_pushes(caf::event_based_actor* self,
                                   std::shared_ptr<held_requests> held) {
  auto hold = [=] { held->promises.push_back(self->make_response_promise()); };
  return {
    [](pull_atom) {
      shard_params sp;
      sp.values = {{"v0", tensor{tensor_shape{}, {0.0f}}}};
      return sp;
    },
    [=](pull_atom, int64_t, int64_t) -> caf::result<shard_params> {
      hold();
      return caf::delegated<shard_params>{};
    },
    [](pull_atom, cancel_atom) {},
    [=](push_atom, const gradient_push&) -> caf::result<push_ack> {
      ++held->pushes;
      hold();
      return caf::delegated<push_ack>{};
    },
  };
}

/// A covariance actor that takes every statistics update.
caf::behavior stand_in_covariance(caf::event_based_actor*) {
  return {
    [](stats_atom, const stats_update&) { return stats_ack{true, 1}; },
  };
}

constexpr auto peer_wait = 5s;
constexpr auto token_timeout = 1s;
constexpr auto poll = 10ms;

struct fixture : test::deterministic_system {
  std::shared_ptr<chief_log> log_a = std::make_shared<chief_log>();
  std::shared_ptr<chief_log> log_b = std::make_shared<chief_log>();
  caf::actor chief_a = sys.spawn(stand_in_chief, log_a);
  caf::actor chief_b = sys.spawn(stand_in_chief, log_b);
  std::shared_ptr<int> stats_computed = std::make_shared<int>(0);
  caf::actor device = sys.spawn(stand_in_device, stats_computed);
  caf::actor covariance = sys.spawn(stand_in_covariance);
  ps_actor shard;
  worker_actor worker;
  /// Actors a case spawned besides these, ended with them (a failed
  /// requirement must not leave one to hold up the system's shutdown).
  std::vector<caf::actor> spawned;

  fixture() {
    ps_shard_config pc;
    pc.index = 0;
    pc.optimizer.kind = optimizer_kind::sgd;
    pc.variables = {{"v0", tensor{tensor_shape{}, {0.0f}}}};
    auto s = spawn_ps_shard(sys, pc);
    BOOST_REQUIRE_MESSAGE(s, test::why(s));
    shard = *s;
    worker = spawn(worker_role::gradients);
  }

  /// A worker with chief A, the shard (or `shards`), the device (and, for
  /// the statistics role, the covariance actor), initialised unless
  /// `initialise` is false (its first pull not yet answered).
  worker_actor spawn(worker_role role, bool initialise = true,
                     std::vector<ps_actor> shards = {}) {
    worker_config wc;
    wc.index = 0;
    wc.role = role;
    wc.batch_size = 4;
    wc.data = std::make_shared<const dataset>(make_fake_dataset(64, 1));
    wc.device = caf::actor_cast<device_actor>(device);
    wc.shards = shards.empty() ? std::vector<ps_actor>{shard} : shards;
    wc.chief = caf::actor_cast<chief_actor>(chief_a);
    wc.peer_wait = peer_wait;
    wc.token_timeout = token_timeout;
    wc.request_timeout = 10s;
    if (role == worker_role::statistics) {
      wc.stats = stats_request{};
      wc.covariance = {caf::actor_cast<covariance_actor>(covariance)};
      wc.covariance_of = {{"dense", 0}};
      wc.poll_interval = poll;
    }
    auto w = spawn_worker(sys, wc);
    BOOST_REQUIRE_MESSAGE(w, test::why(w));
    spawned.push_back(caf::actor_cast<caf::actor>(*w));
    if (initialise)
      sched.run();
    return *w;
  }

  ~fixture() {
    for (auto& a : {chief_a, chief_b, caf::actor_cast<caf::actor>(shard),
                    device, covariance})
      self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : spawned)
      self->send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
  }

  worker_status status() {
    std::optional<worker_status> out;
    auto pending = self->request(worker, caf::infinite, status_atom::value);
    sched.run();
    // The answer is in the mailbox by now; a blocking actor only takes a
    // response through its request's handle.
    pending.receive([&](worker_status& ws) { out = ws; },
                    [&](caf::error& err) {
                      BOOST_FAIL("status request failed: " << render(err));
                    });
    return *out;
  }

  /// The answers to the test's step, run and rebind requests so far.
  std::vector<caf::expected<worker_status>> answers() {
    std::vector<caf::expected<worker_status>> out;
    bool more = true;
    while (more)
      self->receive([&](worker_status& ws) { out.emplace_back(ws); },
                    [&](caf::error& err) { out.emplace_back(err); },
                    caf::after(0s) >> [&] { more = false; });
    return out;
  }

  void grant(const caf::actor& chief, int64_t step, bool stop = false) {
    self->send(chief, caf::ok_atom::value, token_grant{step, stop});
    sched.run();
  }

  void rebind(const caf::actor& chief, int64_t step, int64_t incarnation) {
    rebind(worker, chief, step, incarnation);
  }

  void rebind(const worker_actor& w, const caf::actor& chief, int64_t step,
              int64_t incarnation) {
    resume_point rp;
    rp.global_step = step;
    rp.incarnation = incarnation;
    self->send(w, run_atom::value, rp,
               caf::actor_cast<chief_actor>(chief), std::vector<ps_actor>{shard},
               std::vector<covariance_actor>{});
    sched.run();
  }

  /// Starts a run with chief A and rebinds it to B at `step` while its
  /// first token request waits at A: the run's answer (how far the
  /// abandoned run went).
  worker_status run_then_rebind(int64_t step) {
    self->send(worker, run_atom::value);
    sched.run();
    BOOST_REQUIRE_EQUAL(log_a->token_requests.size(), 1u);
    rebind(chief_b, step, 1);
    auto first = answers();
    BOOST_REQUIRE_EQUAL(first.size(), 1u);
    BOOST_REQUIRE(first[0]);
    BOOST_REQUIRE_EQUAL(log_b->token_requests.size(), 1u);
    BOOST_CHECK_EQUAL(log_b->token_requests[0], step);
    return *first[0];
  }

  /// Moves the test clock on and runs what that set off.
  void advance(caf::timespan d) {
    sched.advance_time(d);
    sched.run();
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(worker_states_tests, fixture)

BOOST_AUTO_TEST_CASE(a_token_of_an_old_binding_after_a_rebind_changes_nothing) {
  // Rebound while its token request waits at chief A: the run's caller
  // hears how far the abandoned run went, and the worker steps with B.
  auto first = run_then_rebind(7);
  BOOST_CHECK_EQUAL(first.rebinds, 1);
  BOOST_CHECK_EQUAL(first.steps, 0);
  // Chief A answers the abandoned request at last, with a stop token: it
  // belongs to the ended binding and stops nothing.
  grant(chief_a, 0, true);
  auto after_old = status();
  BOOST_CHECK_EQUAL(after_old.steps, 0);
  BOOST_CHECK_EQUAL(after_old.local_step, 7);
  BOOST_CHECK(answers().empty());
  // B's token ends the step, and the loop goes on: the next request is B's.
  grant(chief_b, 7);
  BOOST_CHECK_EQUAL(status().steps, 1);
  BOOST_CHECK_EQUAL(log_b->token_requests.size(), 2u);
  BOOST_CHECK_EQUAL(log_a->token_requests.size(), 1u);
  // B stops it; the rebind's caller hears so.
  grant(chief_b, 8, true);
  auto last = answers();
  BOOST_REQUIRE_EQUAL(last.size(), 1u);
  BOOST_REQUIRE(last[0]);
  BOOST_CHECK_EQUAL(last[0]->steps, 2);
  BOOST_CHECK_EQUAL(last[0]->local_step, 7);
}

BOOST_AUTO_TEST_CASE(an_anonymous_rejoin_while_initialising_begins_the_loop) {
  // A node supervisor's rejoin comes without a sender (anon_send), and a
  // worker just spawned may not have its first pull yet: its loop begins
  // once the pull is done, though no one waits for the run's answer.
  auto fresh = spawn(worker_role::gradients, false);
  resume_point rp;
  rp.global_step = 3;
  caf::anon_send(fresh, run_atom::value, rp);
  sched.run();
  BOOST_REQUIRE_EQUAL(log_a->token_requests.size(), 1u);
  BOOST_CHECK_EQUAL(log_a->token_requests[0], 3);
  // A second run while that one is in force is refused, not a second
  // loop.
  self->send(fresh, run_atom::value, rp);
  sched.run();
  auto second = answers();
  BOOST_REQUIRE_EQUAL(second.size(), 1u);
  BOOST_CHECK(!second[0]);
  BOOST_CHECK_EQUAL(log_a->token_requests.size(), 1u);
}

BOOST_AUTO_TEST_CASE(the_token_request_does_not_wait_for_the_push_s_answer) {
  // The token request goes right behind the push (docs/protocol.md, "The
  // token behind the push"): with the shard holding the push's answer,
  // the chief has the request all the same. A worker that waited for the
  // answer first would have sent none.
  auto held = std::make_shared<held_requests>();
  spawned.push_back(sys.spawn(shard_holding_pushes, held));
  auto w = spawn(worker_role::gradients, true,
                 {caf::actor_cast<ps_actor>(spawned.back())});
  self->send(w, run_atom::value);
  sched.run();
  BOOST_CHECK_EQUAL(held->pushes, 1);
  BOOST_REQUIRE_EQUAL(log_a->token_requests.size(), 1u);
  BOOST_CHECK_EQUAL(log_a->token_requests[0], 0);
}

BOOST_AUTO_TEST_CASE(a_stale_push_is_reported_with_the_next_token_request) {
  // The shard is at step 5 and the worker at 0: its push is stale. The
  // token request that followed the push went before the shard's answer,
  // so it reports nothing stale; the next one reports the push.
  self->send(shard, set_step_atom::value, int64_t{5});
  sched.run();
  self->send(worker, run_atom::value);
  sched.run();
  BOOST_REQUIRE_EQUAL(log_a->stale_reported.size(), 1u);
  BOOST_CHECK_EQUAL(log_a->stale_reported[0], 0);
  BOOST_CHECK_EQUAL(status().stale_pushes, 1);
  // The token for step 5: the shard is there, the worker pulls its values
  // and pushes a fresh gradient at 5.
  grant(chief_a, 5);
  BOOST_REQUIRE_EQUAL(log_a->token_requests.size(), 2u);
  BOOST_CHECK_EQUAL(log_a->token_requests[1], 5);
  BOOST_CHECK_EQUAL(log_a->stale_reported[1], 1);
  BOOST_CHECK_EQUAL(status().stale_pushes, 1);
}

BOOST_AUTO_TEST_CASE(a_stall_that_runs_out_fails_naming_what_it_waited_for) {
  self->send(worker, run_atom::value);
  sched.run();
  BOOST_REQUIRE_EQUAL(log_a->token_requests.size(), 1u);
  // Chief A is frozen: the token request times out, the worker stalls.
  advance(token_timeout);
  BOOST_CHECK_EQUAL(status().peers_lost, 1);
  // A step request meanwhile is refused, naming the wait.
  self->send(worker, step_atom::value);
  sched.run();
  auto refused = answers();
  BOOST_REQUIRE_EQUAL(refused.size(), 1u);
  BOOST_REQUIRE(!refused[0]);
  BOOST_CHECK_EQUAL(refused[0].error(), make_error(ec::peer_lost));
  BOOST_CHECK_MESSAGE(render(refused[0].error()).find("token request")
                        != std::string::npos,
                      render(refused[0].error()));
  // Just short of peer_wait it still waits.
  advance(peer_wait - 1s);
  BOOST_CHECK_EQUAL(status().peers_lost, 1);
  BOOST_CHECK(answers().empty());
  advance(1s);
  auto out = answers();
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_REQUIRE(!out[0]);
  auto why = render(out[0].error());
  BOOST_CHECK_EQUAL(out[0].error(), make_error(ec::timeout));
  BOOST_CHECK_MESSAGE(why.find("no chief rebound it within 5 s") != std::string::npos
                        && why.find("no answer to token request") != std::string::npos,
                      why);
}

BOOST_AUTO_TEST_CASE(a_rebind_ends_the_stall_and_an_earlier_deadline_ends_no_later_one) {
  self->send(worker, run_atom::value);
  sched.run();
  advance(token_timeout); // t = 1 s: A frozen, loss 1, its deadline at 6 s
  BOOST_REQUIRE_EQUAL(status().peers_lost, 1);
  rebind(chief_b, 0, 1);
  BOOST_REQUIRE_EQUAL(answers().size(), 1u); // the abandoned run's answer
  BOOST_REQUIRE_EQUAL(log_b->token_requests.size(), 1u);
  auto running = status();
  BOOST_CHECK_EQUAL(running.rebinds, 1);
  // t = 2 s: B freezes as well, loss 2, its deadline at 7 s.
  advance(token_timeout);
  BOOST_REQUIRE_EQUAL(status().peers_lost, 2);
  // t = 6 s: the deadline of loss 1 arrives while the worker waits on loss 2.
  advance(peer_wait - token_timeout);
  BOOST_CHECK(answers().empty());
  BOOST_CHECK_EQUAL(status().peers_lost, 2);
  // t = 7 s: loss 2's own deadline ends it, naming it.
  advance(token_timeout);
  auto out = answers();
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_REQUIRE(!out[0]);
  auto why = render(out[0].error());
  BOOST_CHECK_MESSAGE(why.find("within 5 s") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(a_rebind_while_running_to_the_same_incarnation_goes_on) {
  run_then_rebind(0);
  // The node's rejoin after the driver's rebind: same chief, same
  // incarnation. Giving the step up would waste the token it waits for.
  rebind(chief_b, 0, 1);
  auto again = answers();
  BOOST_REQUIRE_EQUAL(again.size(), 1u);
  BOOST_REQUIRE(again[0]);
  BOOST_CHECK_EQUAL(again[0]->rebinds, 1);
  BOOST_CHECK_EQUAL(log_b->token_requests.size(), 1u);
  grant(chief_b, 0);
  BOOST_CHECK_EQUAL(status().steps, 1);
  BOOST_CHECK_EQUAL(log_b->token_requests.size(), 2u);
}

BOOST_AUTO_TEST_CASE(a_statistics_wake_up_of_an_old_binding_starts_no_second_loop) {
  auto stats = spawn(worker_role::statistics);
  self->send(stats, run_atom::value);
  sched.run();
  // Statistics at the shard's step 0; its next look is a wake-up in `poll`.
  BOOST_REQUIRE_EQUAL(*stats_computed, 1);
  // Rebound meanwhile: the new binding looks at once (statistics at step
  // 0 again, from its resume point) and schedules its own wake-up.
  rebind(stats, chief_b, 0, 1);
  BOOST_REQUIRE_EQUAL(*stats_computed, 2);
  BOOST_REQUIRE_EQUAL(answers().size(), 1u);
  // Both wake-ups come: the earlier binding's starts no loop beside the
  // new one's, so each new step gets one computation.
  advance(poll);
  BOOST_CHECK_EQUAL(*stats_computed, 2);
  self->send(shard, set_step_atom::value, int64_t{1});
  sched.run();
  for (int i = 0; i < 3; ++i)
    advance(poll);
  BOOST_CHECK_EQUAL(*stats_computed, 3);
}

BOOST_AUTO_TEST_SUITE_END()
