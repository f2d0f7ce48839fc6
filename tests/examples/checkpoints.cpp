#define BOOST_TEST_MODULE examples_checkpoints
#include <boost/test/unit_test.hpp>

// Checkpoints of whole runs, through the real programs: a run stopped and
// resumed from its checkpoint ends where an uninterrupted run does (bit
// for bit where the protocol is deterministic), in one process and across
// processes; K-FAC's factors and inverses come back; a checkpoint of
// another model, a corrupt newest checkpoint and a changed topology get
// what docs/checkpoints.md promises.

#include <cmath>
#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// One worker without initial tokens: every step takes the worker's next
/// batch, so a run is deterministic (docs/distributed.md).
const std::string deterministic = deterministic_flags;

/// Runs `command` to success and returns its summary file's text.
std::string summary_of(const temp_dir& tmp, const std::string& command,
                       const std::string& name) {
  auto summary = tmp.file(name + ".json");
  auto res = run_ok(command + " --summary " + summary);
  return read_file(summary);
}

/// Runs `command` for `stop` steps into a checkpoint directory of `tmp`,
/// resumes it from there for `end` steps, and checks that the resumed run
/// restored step `stop` and ends on the parameters of `whole` (the summary
/// of an uninterrupted run of `end` steps).
void check_resumed_ends_as(const temp_dir& tmp, const std::string& command,
                           int stop, int end, const std::string& whole) {
  auto dir = tmp.file("ckpt");
  summary_of(tmp,
             command + " --steps " + std::to_string(stop)
               + " --checkpoint_dir " + dir,
             "first");
  auto second = summary_of(tmp,
                           command + " --steps " + std::to_string(end)
                             + " --checkpoint_dir " + dir,
                           "second");
  check_counters(second, {{"restored_step", static_cast<double>(stop)},
                          {"global_step", static_cast<double>(end)}});
  BOOST_TEST(json_string(second, "params_digest")
             == json_string(whole, "params_digest"));
}

/// A scratch directory and its checkpoint directory.
struct checkpointed {
  temp_dir tmp;
  std::string dir = tmp.file("ckpt");

  /// The summary of the deterministic run in one process with `flags`,
  /// checkpointing into `dir`; `name` names its summary file.
  std::string run_single(const std::string& flags, const std::string& name) {
    return summary_of(tmp, single + deterministic + flags
                             + " --checkpoint_dir " + dir,
                      name);
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(a_resumed_run_ends_where_an_uninterrupted_one_does) {
  temp_dir tmp;
  auto flags = single + deterministic
               + " --optimizer momentum --moving_average_decay 0.9";
  auto whole = summary_of(tmp, flags + " --steps 40", "whole");
  auto dir = tmp.file("ckpt");
  auto first = summary_of(tmp, flags + " --steps 20 --checkpoint_dir " + dir,
                          "first");
  BOOST_TEST(json_numbers(first, "written").at(0) == 1);
  auto second = summary_of(tmp, flags + " --steps 40 --checkpoint_dir " + dir,
                           "second");
  check_counters(second, {{"restored_step", 20}, {"global_step", 40}});
  // Momentum slots, data order and step all came back, and the moving
  // averages of step 20 (the snapshot of a step holds its apply's update
  // of them: taken before it, a resumed run lacked one).
  BOOST_TEST(json_string(second, "params_digest")
             == json_string(whole, "params_digest"));
  BOOST_TEST(!json_string(whole, "averages_digest").empty());
  BOOST_TEST(json_string(second, "averages_digest")
             == json_string(whole, "averages_digest"));
  checkpoint_store store{dir};
  auto steps = store.list_steps();
  BOOST_REQUIRE(steps);
  BOOST_TEST((*steps == std::vector<int64_t>{20, 40}));
}

BOOST_AUTO_TEST_CASE(a_resumed_run_goes_on_with_the_scheduled_rate) {
  // The shards compute the rate from the global step: resumed in the
  // middle of its warm-up and cosine decay, with weight decay, a run ends
  // where an uninterrupted one does; and the schedule and the decay
  // change the result (a constant rate ends elsewhere).
  temp_dir tmp;
  auto flags = single + deterministic
               + " --optimizer momentum --lr_schedule cosine"
                 " --lr_warmup_steps 10 --lr_decay_steps 40"
                 " --weight_decay 0.01";
  auto metrics = tmp.file("whole.jsonl");
  auto whole = summary_of(tmp, flags + " --steps 40 --log_every 5 --metrics "
                                 + metrics,
                          "whole");
  // The log shows the rate each line's last step was applied with: the
  // default base rate 0.01 warming up (step 4: 5/10 of it), at its peak
  // at step 10, then falling along the cosine to step 40.
  auto rates = json_numbers(read_file(metrics), "learning_rate");
  BOOST_REQUIRE_EQUAL(rates.size(), 8u);
  BOOST_TEST(std::abs(rates[0] - 0.005) < 1e-6);
  BOOST_TEST(std::abs(rates[1] - 0.01 * 0.5 * (1 + std::cos(M_PI * 0.0)))
             < 1e-6);
  BOOST_TEST(std::abs(rates[7] - 0.01 * 0.5 * (1 + std::cos(M_PI * 29 / 30)))
             < 1e-6);
  for (size_t i = 2; i < rates.size(); ++i)
    BOOST_TEST(rates[i] < rates[i - 1]);
  check_resumed_ends_as(tmp, flags, 15, 40, whole);
  auto constant = summary_of(tmp, single + deterministic
                                    + " --optimizer momentum --steps 40",
                             "constant");
  auto no_decay = summary_of(tmp, single + deterministic
                                    + " --optimizer momentum --lr_schedule "
                                      "cosine --lr_warmup_steps 10 "
                                      "--lr_decay_steps 40 --steps 40",
                             "no_decay");
  BOOST_TEST(json_string(constant, "params_digest")
             != json_string(whole, "params_digest"));
  BOOST_TEST(json_string(no_decay, "params_digest")
             != json_string(whole, "params_digest"));
}

BOOST_AUTO_TEST_CASE(a_resumed_normalised_model_ends_where_an_uninterrupted_one_does) {
  // batch_norm's moving statistics come back with the variables, and the
  // dropout masks follow the batcher's position (docs/models.md,
  // "Dropout"): resumed in the middle of a cosine schedule, the run ends
  // on the uninterrupted run's parameters.
  temp_dir tmp;
  auto flags = single + deterministic + " --model_file " SYNCFAC_SOURCE_DIR
               "/examples/models/normalised_convnet.json"
               " --optimizer momentum --learning_rate 0.05"
               " --lr_schedule cosine --lr_warmup_steps 5"
               " --lr_decay_steps 30";
  auto whole = summary_of(tmp, flags + " --steps 30", "whole");
  check_resumed_ends_as(tmp, flags, 12, 30, whole);
}

BOOST_AUTO_TEST_CASE(checkpoints_every_k_steps_keep_the_newest) {
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  auto text = summary_of(tmp, single + deterministic
                                + " --steps 50 --checkpoint_every 10"
                                  " --keep_checkpoints 2 --checkpoint_dir "
                                + dir,
                         "run");
  check_counters(text, {{"written", 5}, {"failed", 0}});
  checkpoint_store store{dir};
  auto steps = store.list_steps();
  BOOST_REQUIRE(steps);
  BOOST_TEST((*steps == std::vector<int64_t>{40, 50}));
  auto latest = store.load(50);
  BOOST_REQUIRE(latest);
  BOOST_TEST(latest->metadata.at("format") == "syncfac-run-1");
  BOOST_TEST(said(latest->metadata.at("data_order"), "\"worker\":0"));
}

BOOST_AUTO_TEST_CASE(kfac_factors_and_inverses_come_back) {
  temp_dir tmp;
  auto dir = tmp.file("ckpt");
  auto flags = single + deterministic
               + " --optimizer kfac --learning_rate 0.0003 --init glorot"
                 " --invert_every 5 --checkpoint_every 20 --checkpoint_dir "
               + dir;
  summary_of(tmp, flags + " --steps 60", "first");
  // Factors fold every step, so every checkpoint has them; inverses come
  // asynchronously from the inverse actor, so the newest checkpoints of a
  // run of 12 inversion periods have them.
  checkpoint_store store{dir};
  auto count = [&](int64_t step, const std::string& prefix) {
    auto ckpt = store.load(step);
    BOOST_REQUIRE_MESSAGE(ckpt, "checkpoint of step " << step);
    size_t n = 0;
    for (const auto& t : ckpt->tensors)
      n += said(t.name, prefix) ? 1 : 0;
    return n;
  };
  // Three layers, A and G each.
  BOOST_TEST(count(60, "kfac/factors/") == 6u);
  auto inverses = count(60, "kfac/inverse/");
  BOOST_TEST(count(40, "kfac/inverse/") + inverses > 0u);
  auto second = summary_of(tmp, flags + " --steps 70", "second");
  BOOST_TEST(json_numbers(second, "restored_step").at(0) == 60);
  BOOST_TEST(json_numbers(second, "cov_updates").at(0) > 60);
  // Restored inverses precondition from the first step on.
  if (inverses == 6u)
    BOOST_TEST(json_numbers(second, "preconditioned_steps").at(0) == 10);
}

BOOST_FIXTURE_TEST_CASE(more_workers_and_shards_resume_a_checkpoint,
                        checkpointed) {
  run_single(" --steps 20", "first");
  auto res = run_ok(single + deterministic
                    + " --steps 30 --worker_replicas 2"
                      " --replicas_to_aggregate 2 --ps_tasks 2"
                      " --checkpoint_dir " + dir);
  BOOST_TEST(said(res.output, "restored " + dir + "/ckpt-20.safetensors"));
  BOOST_TEST(said(res.output, "data order starts the next epoch"));
  BOOST_TEST(said(res.output, "\"global_step\": 30"));
}

BOOST_FIXTURE_TEST_CASE(a_checkpoint_of_another_model_is_a_clear_error,
                        checkpointed) {
  run_single(" --steps 5", "convnet");
  auto res = run_program(bin + "autoencoder_mnist --runtime sync --fake_data"
                               " --fake_train_size 256 --batch_size 32"
                               " --steps 5 --no_progress --checkpoint_dir "
                         + dir);
  BOOST_TEST(res.exit_code != 0);
  BOOST_TEST(said(res.output, "was written for the model 'convnet"),
             res.output);
  BOOST_TEST(said(res.output, "this run trains 'autoencoder"), res.output);
  // Nothing of the convnet's checkpoint was touched.
  BOOST_TEST(static_cast<bool>(checkpoint_store{dir}.load(5)));
}

BOOST_FIXTURE_TEST_CASE(a_corrupt_newest_checkpoint_falls_back_to_the_previous,
                        checkpointed) {
  run_single(" --steps 20 --checkpoint_every 10", "first");
  // Cut the newest file in half, as a crash during a copy would.
  auto newest = dir + "/ckpt-20.safetensors";
  std::filesystem::resize_file(newest,
                               std::filesystem::file_size(newest) / 2);
  auto res = run_ok(single + deterministic
                    + " --steps 25 --checkpoint_dir " + dir);
  BOOST_TEST(said(res.output, "ckpt-20.safetensors"));
  BOOST_TEST(said(res.output, "restored " + dir + "/ckpt-10.safetensors"));
  BOOST_TEST(said(res.output, "\"restored_step\": 10"));
}

BOOST_AUTO_TEST_CASE(the_plain_runtime_refuses_a_checkpoint_directory) {
  temp_dir tmp;
  auto res = run_program(single + deterministic
                         + " --runtime plain --steps 5 --checkpoint_dir "
                         + tmp.file("ckpt"));
  BOOST_TEST(res.exit_code != 0);
  BOOST_TEST(said(res.output, "--checkpoint_dir needs --runtime sync"),
             res.output);
}

BOOST_AUTO_TEST_CASE(a_restarted_cluster_resumes_from_the_chiefs_checkpoint) {
  // Every process of a cluster stops after 20 steps and a new cluster
  // continues to 40 from the chief's checkpoint: the parameters equal
  // those of 40 uninterrupted steps in one process.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 2}});
  auto dir = tmp.file("ckpt");
  auto launch = [&](int steps, const std::string& name) {
    auto summary = tmp.file(name + ".json");
    auto res = run_ok(bin + "syncfac-launch --cluster " + cluster
                      + " --program " + bin
                      + "convnet_mnist_distributed --max_wall_s 300 -- "
                      + deterministic + " --connect_timeout_ms 60000"
                        " --steps " + std::to_string(steps)
                      + " --checkpoint_dir " + dir + " --summary "
                      + summary);
    return read_file(summary);
  };
  launch(20, "first");
  auto second = launch(40, "second");
  BOOST_TEST(json_numbers(second, "restored_step").at(0) == 20);
  auto whole = summary_of(tmp, single + deterministic
                                 + " --steps 40 --ps_tasks 2",
                          "whole");
  BOOST_TEST(json_string(second, "params_digest")
             == json_string(whole, "params_digest"));
}
