#define BOOST_TEST_MODULE convnet_mnist_multi_tower
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "tests/examples/process.hpp"

using namespace syncfac::test;
namespace fs = std::filesystem;

namespace {

const std::string program = SYNCFAC_BINARY_DIR
  "/bin/convnet_mnist_multi_tower";

} // namespace

BOOST_FIXTURE_TEST_CASE(loss_falls_on_fake_data, run_files) {
  auto res = run_ok(program + " --num_towers 2 --fake_data --steps 150"
                    " --batch_size 64 --optimizer adam"
                    " --learning_rate 0.001 --log_every 25 --threads 2"
                    " --no_progress --metrics " + metrics
                    + " --summary " + summary);
  BOOST_TEST(said(res.output, "2 tower(s) of 1 thread(s), each batch of 64 "
                              "split 32/32"),
             res.output);
  check_loss_fell(metrics, 6);
  auto text = read_file(summary);
  BOOST_TEST(json_numbers(text, "global_step").at(0) == 150);
  BOOST_TEST(json_numbers(text, "test_accuracy").at(0) > 0.5);
}

BOOST_AUTO_TEST_CASE(the_trainer_runs_the_towers) {
  // The sync trainer says how many towers each worker's device has (the
  // line comes from actors/sync_trainer.cpp, not from this program).
  auto res = run_ok(program + " --num_towers 3 --fake_data --steps 4"
                    " --batch_size 30 --threads 3 --no_progress"
                    " --no_final_eval");
  BOOST_TEST(said(res.output, "multi-tower: 3 towers per worker"), res.output);
}

BOOST_AUTO_TEST_CASE(towers_follow_the_single_device_trajectory) {
  // The towers' combined gradient is the batch's gradient up to float
  // rounding, so with plain SGD from the same seed an uneven three-way
  // split follows one device's losses closely.
  auto losses_with = [](int towers) {
    temp_dir tmp;
    auto metrics = tmp.file("metrics.jsonl");
    auto res = run_ok(program + " --num_towers "
                      + std::to_string(towers)
                      + " --fake_data --steps 20 --batch_size 31"
                        " --optimizer sgd --learning_rate 0.01"
                        " --log_every 5 --threads 3 --no_progress"
                        " --no_final_eval --seed 3 --metrics "
                      + metrics);
    return json_numbers(read_file(metrics), "loss");
  };
  auto one = losses_with(1);
  auto three = losses_with(3);
  BOOST_REQUIRE_EQUAL(one.size(), 4u);
  BOOST_REQUIRE_EQUAL(three.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i)
    BOOST_TEST(std::abs(three[i] - one[i]) <= 1e-3 * std::abs(one[i]),
               "log line " << i << ": " << three[i] << " vs " << one[i]);
}

BOOST_FIXTURE_TEST_CASE(kfac_trains_across_towers, run_files) {
  auto res = run_ok(program + " --num_towers 2 --optimizer kfac"
                    " --fake_data --steps 60 --batch_size 64"
                    " --log_every 20 --invert_every 5 --threads 2"
                    " --no_progress --no_final_eval --metrics "
                    + metrics);
  check_loss_fell(metrics, 3);
}

BOOST_AUTO_TEST_CASE(bad_tower_counts_are_clear_errors) {
  check_refused(program + " --fake_data --num_towers 0",
                {"--num_towers 0: must be >= 1"});
  check_refused(program + " --fake_data --num_towers 9 --batch_size 8",
                {"num_towers 9 exceeds batch_size 8"});
  check_refused(program + " --fake_data --batch_size 0", {"batch_size"});
  check_refused(program + " --no_such_flag=1", {"no_such_flag"});
}

BOOST_AUTO_TEST_CASE(help_exits_cleanly) {
  auto res = run_program(program + " --help");
  BOOST_TEST(res.exit_code == 0);
  BOOST_TEST(said(res.output, "num_towers"));
}
