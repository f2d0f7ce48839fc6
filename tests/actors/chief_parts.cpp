#define BOOST_TEST_MODULE chief_parts
#include <boost/test/unit_test.hpp>

// The chief's pure parts: the workers' data positions and the checkpoint
// count a pause or the run's end waits for (actors/chief_checkpoints.hpp),
// and the lifetimes its continuations hold weakly (actors/chief_round.hpp).

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/chief.hpp"
#include "actors/chief_checkpoints.hpp"
#include "actors/chief_round.hpp"

using namespace syncfac;

namespace {

worker_position at(int32_t worker, int64_t local_step) {
  worker_position p;
  p.worker = worker;
  p.local_step = local_step;
  return p;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_checkpoint_takes_each_workers_newest_position_before_it) {
  worker_positions pos{2};
  BOOST_TEST(!pos.complete_for(3));
  for (int64_t s = 0; s < 6; ++s)
    pos.record(at(0, s));
  pos.record(at(1, 1));
  BOOST_TEST(!pos.complete_for(3)); // worker 1 reported step 1, not 2
  pos.record(at(1, 2));
  BOOST_TEST(pos.complete_for(3));
  auto taken = pos.for_checkpoint_of(3);
  BOOST_REQUIRE_EQUAL(taken.size(), 2u);
  BOOST_TEST(taken[0].local_step == 2);
  BOOST_TEST(taken[1].local_step == 2);
  // Four kept per worker: step 1 of worker 0 is gone.
  BOOST_TEST(pos.for_checkpoint_of(2).size() == 1u);
  BOOST_TEST(pos.newest(0)->local_step == 5);
}

BOOST_AUTO_TEST_CASE(a_rollback_keeps_only_the_checkpoints_positions) {
  worker_positions pos{2};
  pos.record(at(0, 7));
  pos.record(at(1, 7));
  std::vector<resume_point> points(2);
  points[1].has_data_order = true;
  pos.roll_back(5, points);
  BOOST_TEST(pos.newest(0) == nullptr);
  BOOST_REQUIRE(pos.newest(1) != nullptr);
  BOOST_TEST(pos.newest(1)->local_step == 5);
  pos.roll_back(5, {});
  BOOST_TEST(pos.newest(1) == nullptr);
}

BOOST_AUTO_TEST_CASE(what_waits_for_the_checkpoints_runs_once_none_is_in_flight) {
  chief_checkpoints cps;
  int runs = 0;
  cps.begin(10);
  cps.pending.reset();
  cps.begin(20);
  cps.when_settled = [&] { ++runs; };
  BOOST_TEST(cps.in_flight == 2);
  BOOST_TEST(!cps.settle(checkpoint_written{10, "ckpt-10", 1, 0}));
  BOOST_TEST(!cps.take_when_settled());
  BOOST_TEST(cps.settle(caf::make_error(caf::sec::request_timeout)));
  auto then = cps.take_when_settled();
  BOOST_REQUIRE(then);
  then();
  BOOST_TEST(runs == 1);
  BOOST_TEST(!cps.take_when_settled()); // once
  BOOST_TEST(cps.written == 1);
  BOOST_TEST(cps.last_path == "ckpt-10");
  BOOST_TEST(cps.errors.size() == 1u);
  BOOST_TEST(cps.newest_step == 20);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_is_written_once_its_snapshots_and_positions_are_in) {
  chief_checkpoints cps;
  worker_positions pos{1};
  BOOST_TEST(!cps.ready_to_write(pos));
  cps.begin(4);
  BOOST_TEST(!cps.ready_to_write(pos));
  cps.pending->snapshots_in = true;
  BOOST_TEST(!cps.ready_to_write(pos)); // no position of step 3 yet
  cps.pending->grace_over = true;
  BOOST_TEST(cps.ready_to_write(pos));
  cps.pending->grace_over = false;
  pos.record(at(0, 3));
  BOOST_TEST(cps.ready_to_write(pos));
}

BOOST_AUTO_TEST_CASE(checkpoints_are_due_at_the_cadence_and_the_end) {
  chief_config cfg;
  cfg.steps = 10;
  cfg.start_step = 2;
  cfg.checkpoint_every = 3;
  BOOST_TEST(!chief_checkpoints::due(cfg, 10)); // no writer
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  cfg.checkpointer = sys.spawn([]() -> checkpointer_actor::behavior_type {
    return {[](checkpoint_atom, const checkpoint_contents&) {
      return checkpoint_written{};
    }};
  });
  BOOST_TEST(!chief_checkpoints::due(cfg, 2)); // the start: nothing new
  BOOST_TEST(!chief_checkpoints::due(cfg, 5));
  BOOST_TEST(chief_checkpoints::due(cfg, 6));
  BOOST_TEST(chief_checkpoints::due(cfg, 10)); // the end
  cfg.checkpoint_every = 0;
  BOOST_TEST(!chief_checkpoints::due(cfg, 6));
  caf::anon_send_exit(cfg.checkpointer, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(an_answer_of_a_round_over_reaches_nothing) {
  auto steps = std::make_shared<chief_steps>();
  auto round = std::make_shared<chief_round>(3, steps);
  std::vector<std::string> seen;
  auto k = while_round<int>(
    round, [&](int x) { seen.push_back("running " + std::to_string(x)); },
    [&](int x) { seen.push_back("paused " + std::to_string(x)); });
  auto failed = while_steps<int>(
    steps, [&](int x) { seen.push_back("steps " + std::to_string(x)); });
  k(1);
  failed(1);
  steps.reset(); // a pause: the round's apply still counts
  k(2);
  failed(2);
  round.reset(); // a rollback
  k(3);
  BOOST_TEST(seen == (std::vector<std::string>{"running 1", "steps 1",
                                               "paused 2"}),
             boost::test_tools::per_element());
}
