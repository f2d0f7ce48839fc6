#define BOOST_TEST_MODULE convnet_mnist_multi_tower
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "runtime/base/error.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac;
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

BOOST_AUTO_TEST_CASE(towers_combine_into_the_batch_s_gradient) {
  // The towers' combined gradient is the batch's gradient up to float
  // rounding: one step of plain SGD from the same parameters (seed 3; no
  // initial token, so that the step takes exactly the first batch) with
  // the uneven split 31 = 11/10/10 gives one device's gradient norm and
  // parameters. Only the first step is compared: later steps start from
  // parameters that differ by rounding, a max-pool window whose two best
  // values lie within that rounding then picks the other one, and from
  // that step on the losses part by 1e-3 to 1e-2 without anything being
  // combined wrongly (docs/kernels.md, "Winograd", has the seeds and the
  // step where it happens). --clip_norm far above the norm only measures
  // it.
  auto lr = 0.1;
  auto first_step = [lr](int towers) {
    temp_dir tmp;
    auto metrics = tmp.file("metrics.jsonl");
    auto dir = tmp.file("ckpt");
    run_ok(program + " --num_towers " + std::to_string(towers)
           + " --fake_data --steps 1 --batch_size 31 --optimizer sgd"
             " --learning_rate " + std::to_string(lr)
           + " --clip_norm 1e30 --num_tokens 0 --threads 3 --no_progress"
             " --no_final_eval --seed 3 --checkpoint_dir " + dir
           + " --metrics " + metrics);
    auto file = read_safetensors_file(dir + "/ckpt-1.safetensors");
    BOOST_REQUIRE_MESSAGE(file, "checkpoint of step 1: "
                                  << (file ? "" : render(file.error())));
    auto norm = json_numbers(read_file(metrics), "gradient_norm");
    BOOST_REQUIRE_EQUAL(norm.size(), 1u);
    return std::make_pair(norm[0], std::move(file->tensors));
  };
  auto [norm1, one] = first_step(1);
  auto [norm3, three] = first_step(3);
  // Measured (avx512, avx2): 2e-8 relative; an unweighted average of the
  // towers' gradients gives 1.0e-2, a tower left out 0.11.
  BOOST_TEST(std::abs(norm3 - norm1) <= 1e-5 * norm1,
             "gradient norm " << norm3 << " vs " << norm1);
  // The parameters after the step, their difference against the step's
  // length lr |g|: the values' own rounding (2^-24 |w| each) and the sums'
  // order give 5e-7; an unweighted average 3.6e-2, a tower left out 0.35.
  BOOST_REQUIRE_EQUAL(three.size(), one.size());
  double diff = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    BOOST_REQUIRE_EQUAL(three[i].name, one[i].name);
    BOOST_REQUIRE(three[i].value.shape() == one[i].value.shape());
    for (int64_t k = 0; k < one[i].value.size(); ++k) {
      double d = three[i].value[k] - one[i].value[k];
      diff += d * d;
    }
  }
  diff = std::sqrt(diff);
  BOOST_TEST_MESSAGE("first step, 3 towers against 1 device: gradient norm "
                     << std::abs(norm3 - norm1) / norm1
                     << " relative; parameters " << diff / (lr * norm1)
                     << " of the step's length");
  BOOST_TEST(diff <= 1e-4 * lr * norm1,
             "|parameters(3 towers) - parameters(1 device)| " << diff
               << " against the step's length " << lr * norm1);
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
