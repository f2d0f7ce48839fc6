#define BOOST_TEST_MODULE sync_replicas
#include <boost/test/unit_test.hpp>

// The seeds' SyncReplicasOptimizerV2 scenarios (test2Workers,
// test3Workers1Backup) replayed against the real chief, PS shards and
// workers. Only the device is a mock implementing the device interface: it
// returns the seeds' constant gradients (worker i: v0 0.1 + 0.2 i, v1
// 0.9 + 0.2 i, row 1 of v_sparse 0.1 + 0.2 i). Ordering is made
// deterministic by CAF's test scheduler: nothing runs until the test says so.
// The last cases hold a worker's rejoin while the steps are paused for a
// lost role, and answer it where they go on, or fail it naming the worker
// when the run ends first.

#include <chrono>
#include <cmath>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/chief.hpp"
#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "actors/program_config.hpp"
#include "tests/helpers.hpp"
#include "tests/test_scheduler.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

float grad_of(int worker, float base) {
  return base + 0.2f * static_cast<float>(worker);
}

/// A device that "computes" the seeds' constant gradients.
device_actor::behavior_type
seed_device(device_actor::pointer self, int worker, bool bad_shape) {
  (void) self;
  auto variables = [] {
    return parameter_set{{"v0", tensor{tensor_shape{}}},
                         {"v1", tensor{tensor_shape{}}},
                         {"v_sparse", tensor{2, 1}}};
  };
  return {
    [=](load_model_atom, const model_spec&, uint64_t) {
      return model_info{"seed variables", 4, variables()};
    },
    [=](params_atom, const parameter_set&) { return caf::ok_atom::value; },
    [=](params_atom) { return variables(); },
    [=](optimizer_atom, const optimizer_config&) {
      return caf::ok_atom::value;
    },
    [=](grads_atom, const parameter_set&, const batch& b) {
      step_result res;
      res.loss = 1.0f;
      res.count = static_cast<int64_t>(b.labels.size());
      auto v0 = bad_shape ? tensor{{2}, {1, 2}}
                          : tensor{tensor_shape{}, {grad_of(worker, 0.1f)}};
      res.gradients = {{"v0", v0},
                       {"v1", tensor{tensor_shape{}, {grad_of(worker, 0.9f)}}}};
      res.sparse_gradients = {
        {"v_sparse", {1}, tensor{{1, 1}, {grad_of(worker, 0.1f)}}}};
      return res;
    },
    [=](grads_atom, const batch&) -> caf::result<step_result> {
      return make_error(ec::unavailable, "seed device: parameters first");
    },
    [=](grads_atom, const parameter_set&, const std::vector<sparse_update>&,
        const batch&) -> caf::result<step_result> {
      return make_error(ec::unavailable, "seed device: no row steps (its "
                                         "model has no embedding_bag)");
    },
    [=](grads_atom, const parameter_set&, const batch&,
        const stats_request&) -> caf::result<step_result> {
      return make_error(ec::unavailable, "seed device: no K-FAC statistics");
    },
    [=](stats_atom, const parameter_set&, const batch&,
        const stats_request&) -> caf::result<stats_update> {
      return make_error(ec::unavailable, "seed device: no K-FAC statistics");
    },
    [=](invert_atom, const factor_set&,
        const kfac_config&) -> caf::result<inverse_set> {
      return make_error(ec::unavailable, "seed device: no K-FAC inverses");
    },
    [=](train_atom, const batch&) -> caf::result<step_result> {
      return make_error(ec::unavailable, "seed device: no training");
    },
    [=](eval_atom, const batch&) { return eval_result{}; },
    [=](gemm_atom, const tensor&, bool, const tensor&,
        bool) -> caf::result<tensor> {
      return make_error(ec::unavailable, "seed device: no gemm");
    },
    [=](info_atom) { return device_info{"seed", 1}; },
  };
}

/// What a worker's node got when it asked the chief where the worker
/// rejoins: nothing yet, a resume point or an error.
struct rejoin_answer {
  std::optional<resume_point> point;
  std::optional<caf::error> error;

  bool answered() const {
    return point || error;
  }
};

struct fixture : test::deterministic_system {
  std::shared_ptr<const dataset> data
    = std::make_shared<const dataset>(make_fake_dataset(64, 1));
  std::vector<ps_actor> shards;
  chief_actor chief;
  std::vector<worker_actor> workers;
  /// The actors that asked the chief where a worker rejoins.
  std::vector<caf::actor> askers;

  ~fixture() {
    for (auto& a : askers)
      self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& w : workers)
      self->send_exit(w, caf::exit_reason::user_shutdown);
    self->send_exit(chief, caf::exit_reason::user_shutdown);
    for (auto& s : shards)
      self->send_exit(s, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// ps0: v0 = 0; ps1: v1 = 1 and v_sparse = [[3], [4]], SGD with lr 2.
  void spawn_shards(float average_decay = 0) {
    auto sgd = test::optimizer_of(optimizer_kind::sgd, 2.0f);
    ps_shard_config ps0;
    ps0.index = 0;
    ps0.optimizer = sgd;
    ps0.variables = {{"v0", tensor{tensor_shape{}, {0.0f}}}};
    ps_shard_config ps1;
    ps1.index = 1;
    ps1.optimizer = sgd;
    ps1.variables = {{"v1", tensor{tensor_shape{}, {1.0f}}},
                     {"v_sparse", tensor{{2, 1}, {3.0f, 4.0f}}}};
    ps1.sparse_variables = {"v_sparse"};
    for (auto* sc : {&ps0, &ps1}) {
      sc->moving_average_decay = average_decay;
      auto shard = spawn_ps_shard(sys, *sc);
      BOOST_REQUIRE_MESSAGE(shard, test::why(shard));
      shards.push_back(*shard);
    }
  }

  void start(int num_workers, int replicas_to_aggregate, int64_t num_tokens,
             int bad_worker = -1, float average_decay = 0,
             float clip_norm = 0) {
    spawn_shards(average_decay);
    chief_config cc;
    cc.worker_replicas = num_workers;
    cc.replicas_to_aggregate = replicas_to_aggregate;
    cc.num_tokens = num_tokens;
    cc.steps = 100;
    cc.shards = shards;
    cc.clip_norm = clip_norm;
    auto c = spawn_chief(sys, cc);
    BOOST_REQUIRE_MESSAGE(c, test::why(c));
    chief = *c;
    for (int i = 0; i < num_workers; ++i) {
      worker_config wc;
      wc.index = i;
      wc.num_workers = num_workers;
      wc.batch_size = 4;
      wc.data = data;
      wc.device = sys.spawn(seed_device, i, i == bad_worker);
      wc.shards = shards;
      wc.chief = chief;
      auto w = spawn_worker(sys, wc);
      BOOST_REQUIRE_MESSAGE(w, test::why(w));
      workers.push_back(*w);
    }
    self->send(chief, run_atom::value);
    sched.run();
  }

  template <class T, class Handle, class... Ts>
  T ask(const Handle& h, Ts... xs) {
    std::optional<T> result;
    auto pending = self->request(h, caf::infinite, xs...);
    sched.run();
    // The answer is in the mailbox by now; a blocking actor only takes a
    // response through its request's handle.
    pending.receive([&](T& x) { result = std::move(x); },
                    [&](caf::error& err) {
                      BOOST_FAIL("request failed: " << render(err));
                    });
    return *result;
  }

  int64_t global_step() {
    return ask<chief_status>(chief, status_atom::value).global_step;
  }

  /// Asks the chief where `worker` rejoins, as the worker's node does (an
  /// actor of its own, so that the answer may wait); runs what can run.
  std::shared_ptr<rejoin_answer> ask_rejoin(int32_t worker) {
    auto out = std::make_shared<rejoin_answer>();
    auto c = chief;
    askers.push_back(sys.spawn([=](caf::event_based_actor* node)
                                 -> caf::behavior {
      node->request(c, caf::infinite, rejoin_atom::value, worker)
        .then([=](resume_point& rp) { out->point = rp; },
              [=](caf::error& err) { out->error = err; });
      return {[](caf::ok_atom) {}};
    }));
    sched.run();
    return out;
  }

  /// Two workers, two replicas: `n` global steps, each worker one step
  /// of each.
  void two_worker_steps(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      step({0});
      step({1});
    }
    BOOST_REQUIRE_EQUAL(global_step(), n);
  }

  /// The chief's supervisor's word: `task` is lost (the steps pause).
  void lose(const std::string& task) {
    self->send(chief, lost_atom::value, task);
    sched.run();
  }

  float value(size_t shard, size_t var, int64_t i = 0) {
    auto p = ask<shard_params>(shards[shard], pull_atom::value);
    return p.values.at(var).value[i];
  }

  int64_t local_step(size_t worker) {
    return ask<worker_status>(workers[worker], status_atom::value).local_step;
  }

  /// Starts one step on each of `ids` and runs everything that can run.
  void step(std::initializer_list<size_t> ids) {
    for (auto i : ids)
      self->send(workers[i], step_atom::value);
    sched.run();
  }

  /// After the steps so far: `finished` of them answered, and the run is
  /// at global step `global`.
  void check_steps(size_t finished, int64_t global) {
    BOOST_TEST(finished_steps() == finished);
    BOOST_TEST(global_step() == global);
  }

  /// The first element of each shard's first variable (the seeds' v0 and
  /// v1), within 1e-6.
  void check_values(float v0, float v1) {
    BOOST_TEST(std::abs(value(0, 0) - v0) < 1e-6f);
    BOOST_TEST(std::abs(value(1, 0) - v1) < 1e-6f);
  }

  /// The run's summary, once the chief answered the run request (the
  /// workers' answers that arrived meanwhile are dropped).
  std::optional<sync_summary> run_summary() {
    std::optional<sync_summary> out;
    bool more = true;
    while (more)
      self->receive([&](sync_summary& s) { out = std::move(s); },
                    [&](worker_status&) {},
                    [&](caf::error& err) {
                      BOOST_FAIL("the run failed: " << render(err));
                    },
                    caf::after(0s) >> [&] { more = false; });
    return out;
  }

  /// Collects the worker_status replies that have arrived.
  size_t finished_steps() {
    size_t n = 0;
    bool more = true;
    while (more)
      self->receive([&](worker_status&) { ++n; },
                    [&](caf::error& err) {
                      BOOST_FAIL("step failed: " << render(err));
                    },
                    caf::after(0s) >> [&] { more = false; });
    return n;
  }
};

constexpr float tol = 1e-6f;

} // namespace

BOOST_FIXTURE_TEST_SUITE(sync_replicas_tests, fixture)

BOOST_AUTO_TEST_CASE(test2Workers) {
  start(2, 2, 2);
  BOOST_TEST(global_step() == 0);
  BOOST_TEST(value(0, 0) == 0.0f);
  BOOST_TEST(value(1, 0) == 1.0f);
  BOOST_TEST(value(1, 1, 0) == 3.0f);
  BOOST_TEST(value(1, 1, 1) == 4.0f);
  // Initial tokens let the workers run one at a time.
  step({0});
  BOOST_TEST(finished_steps() == 1u);
  step({1});
  check_steps(1, 1);
  check_values(0 - (0.1f + 0.3f) / 2 * 2.0f,
               1 - (0.9f + 1.1f) / 2 * 2.0f);
  BOOST_TEST(value(1, 1, 0) == 3.0f);
  BOOST_TEST(std::abs(value(1, 1, 1) - (4.0f - (0.1f + 0.3f) / 2 * 2.0f))
             < tol);
  // The initial tokens carried step 0: the next round is wasted by design.
  BOOST_TEST(local_step(0) == 0);
  BOOST_TEST(local_step(1) == 0);
  step({0});
  step({1});
  check_steps(2, 1);
  BOOST_TEST(local_step(0) == 1);
  BOOST_TEST(local_step(1) == 1);
  BOOST_TEST(std::abs(value(0, 0) + 0.4f) < tol);
  BOOST_TEST(std::abs(value(1, 0) + 1.0f) < tol);
  auto st0 = ask<shard_status>(shards[0], status_atom::value);
  BOOST_TEST(st0.stale_pushes == 2);
  BOOST_TEST(st0.accepted_pushes == 2);
  // The queue is empty now: one worker alone cannot finish the step.
  step({0});
  check_steps(0, 1);
  step({1});
  check_steps(2, 2);
  check_values(0 - 2 * (0.1f + 0.3f) / 2 * 2.0f,
               1 - 2 * (0.9f + 1.1f) / 2 * 2.0f);
}

BOOST_AUTO_TEST_CASE(clip_norm_scales_every_shard_by_the_global_norm) {
  // test2Workers' first round under --clip_norm 0.5. The averages (v0 0.2
  // on ps0; v1 1.0 and v_sparse's row 1 0.2 on ps1) have the global norm
  // sqrt(1.08) > 0.5, so every shard scales by 0.5 / sqrt(1.08). Clipped
  // shard by shard, ps0 (norm 0.2) would not have clipped at all.
  start(2, 2, 2, -1, 0, 0.5f);
  step({0});
  step({1});
  check_steps(2, 1);
  float v0 = (0.1f + 0.3f) / 2, v1 = (0.9f + 1.1f) / 2;
  double factor = 0.5 / std::sqrt(double{v0} * v0 * 2 + double{v1} * v1);
  check_values(static_cast<float>(0 - factor * v0 * 2.0),
               static_cast<float>(1 - factor * v1 * 2.0));
  BOOST_TEST(std::abs(value(1, 1, 1) - (4.0 - factor * v0 * 2.0)) < tol);
  BOOST_TEST(value(1, 1, 0) == 3.0f);
}

BOOST_AUTO_TEST_CASE(a_clip_norm_above_the_norm_changes_nothing) {
  start(2, 2, 2, -1, 0, 10.0f);
  step({0});
  step({1});
  check_steps(2, 1);
  check_values(0 - (0.1f + 0.3f) / 2 * 2.0f, 1 - (0.9f + 1.1f) / 2 * 2.0f);
}

BOOST_AUTO_TEST_CASE(test3Workers1Backup) {
  start(3, 2, 3);
  BOOST_TEST(global_step() == 0);
  step({0});
  step({2});
  check_steps(2, 1);
  check_values(0 - (0.1f + 0.5f) / 2 * 2.0f,
               1 - (0.9f + 1.3f) / 2 * 2.0f);
  // Worker 1 was late: its gradients are stale and dropped.
  step({1});
  BOOST_TEST(finished_steps() == 1u);
  step({0});
  step({1});
  step({2});
  check_steps(3, 1);
  BOOST_TEST(local_step(1) == 1);
  // Worker 0 alone waits; with worker 1 the step completes.
  step({0});
  check_steps(0, 1);
  step({1});
  check_steps(2, 2);
  check_values(-0.6f - (0.1f + 0.3f) / 2 * 2.0f,
               -1.2f - (0.9f + 1.1f) / 2 * 2.0f);
  auto st1 = ask<shard_status>(shards[1], status_atom::value);
  BOOST_TEST(st1.stale_pushes == 4);
}

BOOST_AUTO_TEST_CASE(fewer_workers_than_replicas_contribute_several_batches) {
  // N = 1 < R = 2: the single worker needs R - N = 1 extra initial token.
  start(1, 2, 1);
  step({0});
  check_steps(1, 0);
  step({0});
  check_steps(1, 1);
  // Both gradients were the worker's own: the average is 0.1.
  BOOST_TEST(std::abs(value(0, 0) + 0.2f) < tol);
}

BOOST_AUTO_TEST_CASE(a_faster_worker_contributes_twice) {
  // N = 2, R = 2 and plenty of initial tokens: worker 0 runs twice before
  // worker 1 arrives, so its two gradients make the first update.
  start(2, 2, 4);
  step({0});
  step({0});
  check_steps(2, 1);
  BOOST_TEST(std::abs(value(0, 0) + 0.2f) < tol); // 0 - 0.1 * 2
  step({1});
  BOOST_TEST(finished_steps() == 1u);
  auto st0 = ask<shard_status>(shards[0], status_atom::value);
  BOOST_TEST(st0.stale_pushes == 1); // worker 1 computed at step 0
}

BOOST_AUTO_TEST_CASE(a_worker_pushing_a_wrong_shape_fails_the_run) {
  start(2, 2, 2, 1);
  step({1});
  std::optional<caf::error> failure;
  bool more = true;
  while (more)
    self->receive([&](worker_status&) {},
                  [&](sync_summary&) {},
                  [&](caf::error& err) { failure = err; },
                  caf::after(0s) >> [&] { more = false; });
  BOOST_REQUIRE(failure.has_value());
  BOOST_TEST(render(*failure).find("v0") != std::string::npos,
             render(*failure));
  auto st0 = ask<shard_status>(shards[0], status_atom::value);
  BOOST_TEST(st0.refused_pushes == 1);
  BOOST_TEST(value(0, 0) == 0.0f);
}

BOOST_AUTO_TEST_CASE(moving_averages_follow_each_applied_step) {
  start(2, 2, 2, -1, 0.5f);
  step({0});
  step({1});
  check_steps(2, 1);
  // v0: 0 -> -0.4; its shadow starts at 0 and moves half way.
  auto avg = ask<shard_params>(shards[0], pull_atom::value,
                               average_atom::value);
  BOOST_TEST(std::abs(avg.values.at(0).value[0] + 0.2f) < tol);
  BOOST_TEST(std::abs(value(0, 0) + 0.4f) < tol);
}

BOOST_AUTO_TEST_CASE(malformed_and_diverged_reports) {
  start(2, 2, 2);
  worker_report bad{7, 0, 1.0f, 1, 4, 0, {}};
  auto pending = self->request(chief, caf::infinite, token_atom::value, bad);
  sched.run();
  std::optional<caf::error> refused;
  pending.receive([](token_grant&) { BOOST_FAIL("granted a bad report"); },
                  [&](caf::error& err) { refused = err; });
  BOOST_REQUIRE(refused.has_value());
  BOOST_TEST(render(*refused).find("worker index out of range")
             != std::string::npos);
  BOOST_TEST(ask<chief_status>(chief, status_atom::value).refused_reports
             == 1);
  worker_report diverged{0, 0, NAN, 1, 4, 0, {}};
  auto last = self->request(chief, caf::infinite, token_atom::value,
                            diverged);
  sched.run();
  std::optional<caf::error> failure;
  last.receive([](token_grant&) {}, [&](caf::error& err) { failure = err; });
  BOOST_REQUIRE(failure.has_value());
  BOOST_TEST(render(*failure).find("diverged") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_preempted_chief_ends_after_the_step_in_flight) {
  start(2, 2, 0);
  step({0}); // step 0 is in flight: one gradient of two
  self->send(chief, preempt_atom::value, std::string{"worker:1: SIGTERM"});
  sched.run();
  BOOST_TEST(!run_summary().has_value());
  step({1}); // the step in flight finishes; the run ends with it
  auto summary = run_summary();
  BOOST_REQUIRE(summary.has_value());
  BOOST_TEST(summary->global_step == 1);
  BOOST_TEST(summary->preempted == "worker:1: SIGTERM");
  BOOST_TEST(global_step() == 1);
  // Later preemptions change nothing.
  self->send(chief, preempt_atom::value, std::string{"ps:0: SIGTERM"});
  sched.run();
  BOOST_TEST(global_step() == 1);
}

BOOST_AUTO_TEST_CASE(a_step_in_flight_that_never_finishes_is_given_up) {
  // Worker 1 was preempted for good (or is dead): the step in flight at
  // the preemption waits for its gradient in vain; after preempt_wait the
  // run ends at the last applied step.
  start(2, 2, 0);
  step({0});
  step({1});
  BOOST_REQUIRE_EQUAL(global_step(), 1);
  step({0}); // step 1 in flight, worker 1 never comes
  self->send(chief, preempt_atom::value, std::string{"chief:0: SIGINT"});
  sched.run();
  sched.advance_time(19s);
  sched.run();
  BOOST_TEST(!run_summary().has_value());
  sched.advance_time(1s); // chief_config::preempt_wait's default
  sched.run();
  auto summary = run_summary();
  BOOST_REQUIRE(summary.has_value());
  BOOST_TEST(summary->global_step == 1);
  BOOST_TEST(summary->preempted == "chief:0: SIGINT");
  // The round given up times out later without failing the run.
  sched.advance_time(120s);
  sched.run();
  BOOST_TEST(global_step() == 1);
}

BOOST_AUTO_TEST_CASE(a_rejoin_while_paused_is_answered_where_the_steps_go_on) {
  start(2, 2, 0);
  two_worker_steps(2);
  lose("ps:1");
  auto first = ask_rejoin(1);
  BOOST_TEST(!first->answered());
  // A newer request of the same worker (its node asked again) replaces
  // the held one, which fails saying so.
  auto second = ask_rejoin(1);
  BOOST_REQUIRE(first->error.has_value());
  BOOST_TEST(first->error->code() == static_cast<uint8_t>(ec::unavailable));
  BOOST_TEST(test::contains(render(*first->error),
                            "worker 1 asked again where it rejoins"));
  BOOST_TEST(!second->answered());
  // A worker the run does not have is refused at once.
  auto stranger = ask_rejoin(7);
  BOOST_REQUIRE(stranger->error.has_value());
  BOOST_TEST(test::contains(render(*stranger->error), "no gradient worker 7"));
  // Rolled back to step 1: still held until the steps go on.
  BOOST_TEST(ask<int64_t>(chief, rollback_atom::value, int64_t{1}, shards,
                          std::vector<resume_point>{})
             == 1);
  BOOST_TEST(!second->answered());
  auto other = ask_rejoin(0); // asked after the rollback, before the run
  BOOST_TEST(!other->answered());
  self->send(chief, run_atom::value);
  sched.run();
  for (const auto& a : {second, other}) {
    BOOST_REQUIRE(a->point.has_value());
    BOOST_TEST(a->point->global_step == 1);
    BOOST_TEST(a->point->incarnation == 1);
  }
  // While the steps run a rejoin is answered at once.
  auto running = ask_rejoin(1);
  BOOST_REQUIRE(running->point.has_value());
  BOOST_TEST(running->point->global_step == 1);
}

BOOST_AUTO_TEST_CASE(a_rejoin_held_when_the_run_ends_fails_naming_the_worker) {
  start(2, 2, 0);
  two_worker_steps(1);
  lose("ps:1");
  auto held = ask_rejoin(0);
  BOOST_TEST(!held->answered());
  // Preempted while paused: the run ends where it stands.
  self->send(chief, preempt_atom::value, std::string{"chief:0: SIGTERM"});
  sched.run();
  BOOST_TEST(!held->answered());
  self->send(chief, run_atom::value);
  sched.run();
  BOOST_REQUIRE(held->error.has_value());
  BOOST_TEST(held->error->code() == static_cast<uint8_t>(ec::unavailable));
  auto text = render(*held->error);
  BOOST_TEST(test::contains(text, "worker 0 cannot rejoin"), text);
  BOOST_TEST(test::contains(text, "ps:1 was lost"), text);
  BOOST_TEST(test::contains(text, "the run ended at global step 1 "
                                  "(preempted: chief:0: SIGTERM)"),
             text);
}

BOOST_AUTO_TEST_CASE(a_rejoin_held_when_the_chief_is_stopped_fails_naming_it) {
  start(2, 2, 0);
  lose("ps:0");
  auto held = ask_rejoin(1);
  BOOST_TEST(!held->answered());
  self->send_exit(chief, caf::exit_reason::user_shutdown);
  sched.run();
  BOOST_REQUIRE(held->error.has_value());
  auto text = render(*held->error);
  BOOST_TEST(test::contains(text, "worker 1 cannot rejoin"), text);
  BOOST_TEST(test::contains(text, "the chief was stopped"), text);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(too_few_initial_tokens_are_refused) {
  chief_config cc;
  cc.worker_replicas = 1;
  cc.replicas_to_aggregate = 3;
  cc.num_tokens = 1;
  cc.steps = 10;
  cc.shards.resize(1); // validation only counts them
  auto err = cc.validate();
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("too few tokens to finish the first step")
             != std::string::npos);
  BOOST_TEST(render(err).find("1 (given) vs 2 (needed") != std::string::npos);
  cc.num_tokens = 2;
  BOOST_TEST(!cc.validate());
  cc.num_tokens = -1; // defaults to R
  BOOST_TEST(cc.initial_tokens() == 3);
  BOOST_TEST(cc.tokens_per_step() == 3);
}
