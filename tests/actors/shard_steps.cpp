#define BOOST_TEST_MODULE actors_shard_steps
#include <boost/test/unit_test.hpp>

// What a starting chief finds on real PS shard actors (actors/shard_steps.hpp):
// a round a lost chief applied on one shard only is completed on the other
// with the gradients it holds and the factor the first one took, also when
// the lost chief's own apply is still pending there; shards that disagree
// otherwise are reported, and a wait that runs out names the shard.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/ps_shard.hpp"
#include "actors/shard_steps.hpp"
#include "runtime/base/error.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/actors/shard_seeds.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::test;
using namespace std::chrono_literals;

namespace {

/// Two shards with the seeds' variables (the same on both, so a round
/// applied alike leaves them equal) and the chief's side of a start.
struct fixture : actor_fixture {
  std::vector<ps_actor> shards;
  std::vector<std::string> notes;
  shard_step_waits waits;

  fixture() {
    for (int32_t i = 0; i < 2; ++i) {
      auto shard = seed_config();
      shard.index = i;
      shards.push_back(keep(spawn_ps_shard(sys, std::move(shard))));
    }
    waits.request_timeout = 5s;
    waits.step_timeout = 10s;
    waits.replicas_to_aggregate = 2;
  }

  /// Workers 0 and 1's gradients of `step` on shard i.
  void push_round(size_t i, int64_t step) {
    for (int32_t w = 0; w < 2; ++w) {
      auto ack = require<push_ack>(shards[i], push_atom::value,
                                   seed_push(w, step));
      BOOST_REQUIRE(ack.accepted);
    }
  }

  void apply(size_t i, int64_t step, float scale = 1.0f) {
    auto done = ask<applied>(shards[i], apply_atom::value, step, int64_t{2},
                             gradient_scale{scale});
    BOOST_REQUIRE_MESSAGE(done, why(done));
  }

  caf::expected<shard_steps> find() {
    return find_shard_steps(self, shards, waits,
                            [this](const std::string& line) {
                              notes.push_back(line);
                            });
  }

  shard_params values(size_t i) {
    return require<shard_params>(shards[i], pull_atom::value);
  }

  int64_t step_of(size_t i) {
    return require<shard_status>(shards[i], status_atom::value).global_step;
  }

  bool noted(const std::string& part) const {
    for (const auto& line : notes)
      if (contains(line, part))
        return true;
    return false;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(shard_steps_tests, fixture)

BOOST_AUTO_TEST_CASE(shards_at_one_step_are_taken_as_they_are) {
  auto fresh = find();
  BOOST_REQUIRE_MESSAGE(fresh, why(fresh));
  BOOST_TEST(fresh->step == -1);
  BOOST_TEST(fresh->disagreement.empty());
  for (size_t i = 0; i < 2; ++i) {
    push_round(i, 0);
    apply(i, 0);
  }
  auto under_way = find();
  BOOST_REQUIRE_MESSAGE(under_way, why(under_way));
  BOOST_TEST(under_way->step == 1);
  BOOST_TEST(under_way->completed.empty());
  BOOST_TEST(notes.empty());
}

BOOST_AUTO_TEST_CASE(a_round_applied_on_one_shard_is_completed_on_the_other) {
  push_round(0, 0);
  push_round(1, 0);
  apply(0, 0);
  BOOST_REQUIRE(!same(values(0).values, values(1).values));
  auto found = find();
  BOOST_REQUIRE_MESSAGE(found, why(found));
  BOOST_TEST(found->step == 1);
  BOOST_TEST(found->disagreement.empty());
  BOOST_TEST(found->completed == std::vector<size_t>{1});
  BOOST_TEST(step_of(1) == 1);
  BOOST_TEST(same(values(0).values, values(1).values));
  BOOST_TEST(noted("ps:0 at 1, ps:1 at 0"));
  BOOST_TEST(noted("completing it on ps:1"));
}

BOOST_AUTO_TEST_CASE(the_completing_apply_takes_the_ahead_shards_clip_factor) {
  push_round(0, 0);
  push_round(1, 0);
  apply(1, 0, 0.25f);
  auto found = find();
  BOOST_REQUIRE_MESSAGE(found, why(found));
  BOOST_TEST(found->completed == std::vector<size_t>{0});
  // Unscaled, v0 would move by 2 * 0.2 = 0.4, not 0.1.
  BOOST_TEST(same(values(0).values, values(1).values));
}

BOOST_AUTO_TEST_CASE(the_lost_chiefs_own_pending_apply_is_awaited) {
  push_round(0, 0);
  apply(0, 0);
  // The lost chief's apply reached ps:1 before one worker's push did.
  auto one = require<push_ack>(shards[1], push_atom::value, seed_push(0, 0));
  BOOST_REQUIRE(one.accepted);
  {
    caf::scoped_actor lost_chief{sys};
    lost_chief->send(shards[1], apply_atom::value, int64_t{0}, int64_t{2},
                     gradient_scale{1.0f});
  }
  // The last push arrives while the new chief waits.
  std::thread late_push([this] {
    std::this_thread::sleep_for(300ms);
    caf::scoped_actor worker{sys};
    worker->request(shards[1], 5s, push_atom::value, seed_push(1, 0))
      .receive([](push_ack&) {}, [](caf::error&) {});
  });
  auto found = find();
  late_push.join();
  BOOST_REQUIRE_MESSAGE(found, why(found));
  BOOST_TEST(found->step == 1);
  BOOST_TEST(found->completed.empty());
  BOOST_TEST(noted("ps:1 reached global step 1 through the lost chief's own "
                   "apply"));
  BOOST_TEST(same(values(0).values, values(1).values));
}

BOOST_AUTO_TEST_CASE(a_completing_apply_without_its_pushes_times_out_naming_it) {
  push_round(0, 0);
  apply(0, 0);
  waits.step_timeout = 300ms;
  auto found = find();
  check_error(found, ec::timeout,
              {"ps:1: completing the round of global step 0",
               "no answer within 300 ms", "2 fresh pushes"});
}

BOOST_AUTO_TEST_CASE(shards_apart_by_more_than_a_round_disagree) {
  for (int64_t step = 0; step < 2; ++step) {
    push_round(0, step);
    apply(0, step);
  }
  auto found = find();
  BOOST_REQUIRE_MESSAGE(found, why(found));
  BOOST_TEST(found->step == -1);
  BOOST_TEST(found->disagreement == "ps:0 at 2, ps:1 at 0");
  BOOST_TEST(step_of(1) == 0);
}

BOOST_AUTO_TEST_CASE(a_shard_set_to_its_step_is_no_round_to_complete) {
  // Ahead by one, but by set_step: there is no apply to repeat.
  auto ok = require<caf::ok_atom>(shards[0], set_step_atom::value,
                                  int64_t{1});
  (void) ok;
  push_round(1, 0);
  auto found = find();
  BOOST_REQUIRE_MESSAGE(found, why(found));
  BOOST_TEST(found->disagreement == "ps:0 at 1, ps:1 at 0");
  BOOST_TEST(step_of(1) == 0);
}

BOOST_AUTO_TEST_CASE(a_shard_gone_away_is_named) {
  self->send_exit(shards[1], caf::exit_reason::kill);
  std::this_thread::sleep_for(50ms);
  auto found = find();
  check_error(found, ec::peer_down, {"status of ps:1"});
}

BOOST_AUTO_TEST_SUITE_END()
