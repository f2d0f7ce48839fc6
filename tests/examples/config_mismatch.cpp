#define BOOST_TEST_MODULE config_mismatch
#include <boost/test/unit_test.hpp>
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>

// Real clusters on loopback where one job was started with other flags
// than the chief (syncfac-launch --job_flags): the chief compares every
// node's configuration at the hello handshake (docs/distributed.md, "One
// configuration across every node"), so the run never starts: the refused
// node exits non-zero naming the field and both values, and the chief ends
// with an error naming the node, both well within the connect timeout.
// A task whose own setup refuses it (a batch larger than its data shard, a
// device it cannot make) says why before it exits, and the chief ends with
// that at once too. Either way the chief has created none of its outputs
// (--metrics, --logdir, --checkpoint_dir): it opens them only once every
// node agreed.

#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/examples/node_process.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

// The connect timeout: a refusal must end the run well within it (a
// third, checked by chief_lifetime_s), and a node that is never refused
// (the other shards) is stopped by the launcher soon after the chief.
const int connect_timeout_s = 60;
const std::string common = " --fake_data --fake_train_size 512"
                           " --fake_test_size 100 --batch_size 32"
                           " --threads 1 --seed 3 --no_progress --steps 20"
                           " --num_tokens 0 --connect_timeout_ms "
                           + std::to_string(connect_timeout_s * 1000)
                           + " --max_wait_ms 20000";

/// The launcher's command line for `cluster` running the program (150 s at
/// most, 2 s of grace) with `options`: its --job_program and --job_flags,
/// then " -- " and the flags of every node.
std::string launch_command(const std::string& cluster,
                           const std::string& options) {
  return launcher + " --cluster " + cluster + " --program " + distributed
         + " --max_wall_s 150 --grace_ms 2000" + options;
}

/// The chief's outputs, in a directory of their own that a refused run
/// must leave empty.
struct chief_outputs {
  std::string dir;

  std::string flags() const {
    return " --metrics " + dir + "/metrics.jsonl --logdir " + dir
           + "/events --checkpoint_dir " + dir + "/checkpoints";
  }

  /// What the run created there, one path a line.
  std::string created() const {
    std::string out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      out += e.path().string() + "\n";
    return out;
  }
};

/// Runs the cluster with `flags` everywhere but `job`, which gets `flags`
/// plus `differing`; the chief writes its outputs into `outputs`.
process_result launch(const std::string& cluster, const std::string& flags,
                      const std::string& job, const std::string& differing,
                      const chief_outputs& outputs) {
  std::string jobs;
  if (job == "chief")
    jobs = " --job_flags 'chief=" + flags + outputs.flags() + differing + "'";
  else
    jobs = " --job_flags 'chief=" + flags + outputs.flags() + "'"
           + (differing.empty()
                ? std::string{}
                : " --job_flags '" + job + "=" + flags + differing + "'");
  return run_program(launch_command(cluster, jobs + " -- " + flags));
}

/// Seconds of the day of a launcher line's timestamp
/// ("2026-12-01T13:56:35.123Z ...").
double stamp_s(const std::string& line) {
  static const std::regex stamp{R"(^\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d\.\d{3})Z )"};
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(std::regex_search(line, m, stamp),
                        "no timestamp: " << line);
  return std::stod(m[1]) * 3600 + std::stod(m[2]) * 60 + std::stod(m[3]);
}

/// Seconds of the day (UTC) of `t`, as stamp_s reads a launcher line.
double seconds_of_day(std::chrono::system_clock::time_point t) {
  auto since = t.time_since_epoch();
  auto whole = std::chrono::duration_cast<std::chrono::seconds>(since);
  return static_cast<double>(whole.count() % 86400)
         + std::chrono::duration<double>(since - whole).count();
}

/// `distributed` started `seconds` late (the chief then waits for that task).
std::string late_program(const temp_dir& tmp, int seconds) {
  auto late = tmp.file("late.sh");
  {
    std::ofstream script{late};
    script << "#!/bin/sh\nsleep " << seconds << "\nexec " << distributed
           << " \"$@\"\n";
  }
  std::filesystem::permissions(late, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  return late;
}

/// The first line of `out` that contains `text` (the last one: `last`).
std::string line_with(const std::string& out, const std::string& text,
                      bool last = false) {
  std::istringstream in{out};
  std::string found;
  for (std::string line; std::getline(in, line);)
    if (line.find(text) != std::string::npos) {
      found = line;
      if (!last)
        break;
    }
  if (found.empty())
    BOOST_FAIL("no line with '" << text << "'");
  return found;
}

/// The chief program's last word: its error.
std::string chief_error(const std::string& out) {
  return line_with(out, "[chief:0] convnet_mnist_distributed: ", true);
}

/// How long the chief ran, from the launcher's lines.
double chief_lifetime_s(const std::string& out) {
  auto started = stamp_s(line_with(out, "syncfac-launch: chief:0 started"));
  auto ended = stamp_s(line_with(out, "syncfac-launch: chief:0 exited"));
  return ended >= started ? ended - started : ended + 86400 - started;
}

/// The run ended at once, with the chief's exit code 1..123 and `text` in
/// its last words; it created none of its outputs.
void check_ended_at_once(const process_result& res, const std::string& text,
                         const chief_outputs& outputs) {
  const auto& out = res.output;
  BOOST_TEST(res.exit_code >= 1);
  BOOST_TEST(res.exit_code <= 123);
  BOOST_TEST(out.find("never connected") == std::string::npos,
             "the chief waited for its connect timeout");
  BOOST_TEST(out.find("global_step:") == std::string::npos, "a step ran");
  auto last = chief_error(out);
  BOOST_TEST(last.find(text) != std::string::npos,
             "the chief's error does not say '" << text << "': " << last);
  auto lifetime = chief_lifetime_s(out);
  BOOST_TEST_MESSAGE("the chief ran " << lifetime << " s");
  BOOST_TEST(lifetime < connect_timeout_s / 3.0,
             "the chief ran " << lifetime << " s of its "
                              << connect_timeout_s << " s connect timeout");
  BOOST_TEST(outputs.created().empty(),
             "the refused run created:\n" << outputs.created());
}

/// Whether a line of `task`'s output (as the launcher prefixes it)
/// contains `text`.
bool said_by(const std::string& out, const std::string& task,
             const std::string& text) {
  auto label = "[" + task + "] ";
  for (auto pos = out.find(label); pos != std::string::npos;
       pos = out.find(label, pos + 1)) {
    auto end = out.find('\n', pos);
    if (out.substr(pos, end - pos).find(text) != std::string::npos)
      return true;
  }
  return false;
}

/// The run ended before any step, with `difference` (the field and both
/// values) in the refused node's and the chief's words, both exiting
/// non-zero.
void check_refused(const process_result& res, const std::string& node,
                   const std::string& difference,
                   const chief_outputs& outputs) {
  case_output::keep("the run", res.output);
  const auto& out = res.output;
  // Both say it: the refused node's error and the chief's.
  auto said = node + " differs from the chief in " + difference;
  check_ended_at_once(res, "refused " + node + " at connect: " + said,
                      outputs);
  BOOST_TEST(said_by(out, node, said), node << " did not say '" << said << "'");
  BOOST_TEST(said_by(out, "chief:0", "refused " + node + " at connect: " + said),
             "the chief did not name " << node);
  BOOST_TEST(out.find("syncfac-launch: " + node + " exited with code 1")
               != std::string::npos,
             node << " did not exit 1");
  BOOST_TEST(out.find("syncfac-launch: chief:0 exited with code 1")
               != std::string::npos,
             "the chief did not exit 1");
}

} // namespace

namespace {

/// A worker started with `differing` on top of everyone's `flags`, and
/// the `difference` (the field and both values) that it and the chief
/// must name.
struct worker_difference {
  std::string what;
  std::string flags;
  std::string differing;
  std::string difference;
};

std::ostream& operator<<(std::ostream& out, const worker_difference& x) {
  return out << x.what;
}

const std::vector<worker_difference> worker_differences{
  {"another model", common, " --model mlp",
   "model.arch: mlp on worker:0, convnet on the chief"},
  {"another learning rate", common, " --learning_rate 0.02",
   "optimizer.learning_rate: 0.02 on worker:0, 0.01 on the chief"},
  {"another K-FAC damping",
   common + " --optimizer kfac --learning_rate 0.0003 --init glorot",
   " --damping 0.01",
   "optimizer.kfac.damping: 0.01 on worker:0, 0.001 on the chief"},
  {"other data", common, " --fake_train_size 1024",
   "data.train.count: 1024 on worker:0, 512 on the chief"},
  {"another batch size", common, " --batch_size 16",
   "run.batch_size: 16 on worker:0, 32 on the chief"},
  {"K-FAC's cadence", common + " --optimizer kfac --learning_rate 0.0003",
   " --kfac_cadence exact",
   "optimizer.kfac.cadence: exact on worker:0, counted on the chief"},
  {"K-FAC's strategy", common + " --optimizer kfac --learning_rate 0.0003",
   " --cov_inv_op_strategy all_workers",
   "kfac.strategy: all_workers on worker:0, chief_worker on the chief"},
  {"the benchmark-only delay device", common, " --device bench_delay:5",
   "device.kind: bench_delay on worker:0, real on the chief"},
};

} // namespace

BOOST_DATA_TEST_CASE(a_worker_with_another_setting_is_refused,
                     boost::unit_test::data::make(worker_differences), x) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  temp_dir out;
  chief_outputs outputs{out.path()};
  check_refused(launch(cluster, x.flags, "worker", x.differing, outputs),
                "worker:0", x.difference, outputs);
}

BOOST_AUTO_TEST_CASE(workers_whose_own_setup_refuses_them_end_the_run_at_once) {
  // Every node has the same flags, so they agree at hello; but each of the
  // two workers' shards (256 examples) is smaller than a batch of 300, which
  // only the worker finds when it builds its batcher. It tells the chief
  // before it exits: the run ends with its words, not "tasks that never
  // connected" a connect timeout later.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 1}});
  temp_dir out;
  chief_outputs outputs{out.path()};
  auto res = launch(cluster, common + " --batch_size 300", "worker", "",
                    outputs);
  case_output::keep("the run", res.output);
  check_ended_at_once(res, "cannot join the run: ", outputs);
  auto last = chief_error(res.output);
  BOOST_TEST(std::regex_search(last, std::regex{"worker:[01] cannot join the "
                                                "run: .*fewer than one batch "
                                                "of 300"}),
             last);
  bool heard = said_by(res.output, "worker:0", "worker:0: chief:0 knows why")
               || said_by(res.output, "worker:1", "worker:1: chief:0 knows why");
  BOOST_TEST(heard, "no worker heard the chief take its refusal");
}

BOOST_AUTO_TEST_CASE(a_refusal_ends_the_chiefs_wait_for_a_slow_task) {
  // The chief has published its node and waits for the K-FAC hosts it
  // connects to itself; the inverse host starts 40 s late. The worker
  // cannot make its device (no GPU 999 in any build) and says so: the
  // chief ends with that now, not once the inverse host is there.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1},
                                     {"covariance", 1}, {"inverse", 1}});
  auto late = late_program(tmp, 40);
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto flags = common + " --optimizer kfac --learning_rate 0.0003";
  auto res = run_program(launch_command(
    cluster, " --job_program inverse=" + late + " --job_flags 'chief=" + flags
               + outputs.flags() + "' --job_flags 'worker=" + flags
               + " --device gpu:999' -- " + flags));
  case_output::keep("the run", res.output);
  check_ended_at_once(res, "worker:0 cannot join the run: ", outputs);
  BOOST_TEST(said_by(res.output, "chief:0", "gpu:999"));
}

BOOST_AUTO_TEST_CASE(a_stop_signal_ends_a_refused_workers_wait_for_the_chief) {
  // A worker that cannot join (no GPU 999) waits up to its connect timeout
  // to tell a chief that has not started; the scheduler's SIGTERM ends
  // that wait at once, and the program exits preempted.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto worker = start_process(distributed + " --cluster " + cluster
                                + " --job_name worker --task 0"
                                + " --device gpu:999" + common,
                              tmp.file("worker.log"));
  kill_on_exit guard{worker};
  await_output(worker, "cannot join the run");
  auto signalled = clock_type::now();
  worker.signal(SIGTERM);
  BOOST_REQUIRE_MESSAGE(worker.wait(std::chrono::seconds{10}),
                        "still waiting 10 s after SIGTERM:\n"
                          << worker.output());
  auto took = std::chrono::duration<double>(worker.exited_at - signalled);
  BOOST_TEST_MESSAGE("SIGTERM to exit: " << took.count() << " s");
  BOOST_TEST(worker.exit_code == 143, worker.output());
  BOOST_TEST(took.count() < 5.0);
  BOOST_TEST(said(worker.output(), "a stop signal came; no longer waiting"),
             worker.output());
}

BOOST_AUTO_TEST_CASE(an_inverse_host_without_its_device_refuses_the_chief) {
  // The chief connects to the inverse host, which cannot make its device
  // (no GPU 999 in any build): it cannot wait for a chief that waits for
  // it, so it answers the chief's hello with why, and exits after.
  temp_dir tmp;
  auto cluster = write_cluster(
    tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}, {"inverse", 1}});
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto res = launch(cluster,
                    common + " --optimizer kfac --learning_rate 0.0003",
                    "inverse", " --device gpu:999", outputs);
  case_output::keep("the run", res.output);
  check_ended_at_once(res,
                      "refused at connect to inverse:0: inverse:0 cannot "
                      "join the run: ",
                      outputs);
  BOOST_TEST(said_by(res.output, "chief:0", "gpu:999"));
  BOOST_TEST(said_by(res.output, "inverse:0", "inverse:0: chief:0 knows why"));
  BOOST_TEST(res.output.find("syncfac-launch: inverse:0 exited with code 1")
               != std::string::npos);
}

BOOST_DATA_TEST_CASE(a_kfac_host_with_another_setting_refuses_the_chief,
                     boost::unit_test::data::make(
                       std::vector<std::string>{"covariance", "inverse"}),
                     job) {
  // The chief connects to the covariance and inverse hosts itself: the
  // host compares the chief's hello and refuses it, naming the field.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1},
                                     {"covariance", 1}, {"inverse", 1}});
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto res = launch(cluster,
                    common + " --optimizer kfac --learning_rate 0.0003",
                    job, " --damping 0.01", outputs);
  case_output::keep("the run", res.output);
  auto task = job + ":0";
  check_ended_at_once(res,
                      "refused at connect to " + task + ": " + task
                        + " differs from the chief in optimizer.kfac."
                          "damping: 0.01 on "
                        + task + ", 0.001 on the chief",
                      outputs);
  BOOST_TEST(res.output.find("syncfac-launch: " + task + " exited with code 1")
               != std::string::npos);
}

BOOST_AUTO_TEST_CASE(shards_with_another_placement_refuse_the_chief) {
  // The chief connects to the shards itself: there the shard compares the
  // chief's hello and refuses it; the chief ends naming the shard.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 2}});
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto res = launch(cluster, common, "ps", " --placement by_size", outputs);
  case_output::keep("the run", res.output);
  check_ended_at_once(res, "differs from the chief in ps.placement", outputs);
  const auto& out = res.output;
  // The chief connects to both shards at once, so either or both refuse
  // it; the chief ends naming the one whose refusal reached it first, and
  // that shard says it refused.
  auto said = [](const std::string& shard) {
    return shard + " differs from the chief in ps.placement: by_size on "
           + shard + ", round_robin on the chief";
  };
  std::string shard;
  for (const char* s : {"ps:0", "ps:1"})
    if (said_by(out, "chief:0",
                "refused at connect to " + std::string{s} + ": " + said(s)))
      shard = s;
  BOOST_REQUIRE_MESSAGE(!shard.empty(), "the chief named no shard that "
                                        "refused it");
  BOOST_TEST(said_by(out, shard, "refused chief:0 at connect: "
                                   + said(shard)));
  BOOST_TEST(out.find("global_step:") == std::string::npos);
  BOOST_TEST(out.find("syncfac-launch: chief:0 exited with code 1")
               != std::string::npos);
  // The shard that refused the chief exits 1 too (the other one was not
  // reached: the launcher stops it after its grace).
  BOOST_TEST(out.find("syncfac-launch: " + shard + " exited with code 1")
               != std::string::npos);
}

// -- the evaluator: a role outside the library --------------------------------
//
// syncfac_evaluator joins on its own (the run neither awaits it nor
// notices its loss), so its refusal ends the run whenever it comes: before
// the first step at once, while the steps run after the global step in
// flight, checkpointed as a preemption is.

namespace {

/// The launcher's run of chief:0, worker:0 (started 40 s late, so that the
/// chief waits for it) and ps:0 with the chief's outputs in `outputs`.
process_result launch_waiting_for_a_worker(const temp_dir& tmp,
                                           const std::string& cluster,
                                           const chief_outputs& outputs) {
  return run_program(launch_command(
    cluster, " --job_program worker=" + late_program(tmp, 40)
               + " --job_flags 'chief=" + common + outputs.flags() + "' -- "
               + common));
}

/// The evaluator exited 1 within a bound, saying `text`.
void check_evaluator_refused(node_process& eval, const std::string& text) {
  BOOST_REQUIRE_MESSAGE(eval.wait(std::chrono::seconds{60}),
                        "the evaluator still runs:\n" << eval.output());
  case_output::keep("the evaluator", eval.output());
  BOOST_TEST(eval.exit_code == 1, eval.output());
  BOOST_TEST(said(eval.output(), text), eval.output());
}

} // namespace

BOOST_AUTO_TEST_CASE(an_evaluator_of_another_model_ends_the_run_at_once) {
  // The cluster trains the ConvNet; the evaluator was given the MLP. The
  // chief compares its hello (the model as built: every variable's name
  // and shape) while it waits for a worker, and ends at once.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto eval = start_evaluator(tmp, cluster, 10, connect_timeout_s * 1000,
                              " --model mlp --fake_data --fake_test_size 100");
  kill_on_exit guard{eval};
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto res = launch_waiting_for_a_worker(tmp, cluster, outputs);
  case_output::keep("the run", res.output);
  auto said = "evaluator:0 differs from the chief in model.arch: mlp on "
              "evaluator:0, convnet on the chief";
  check_ended_at_once(res, std::string{"refused evaluator:0 at connect: "} + said,
                      outputs);
  check_evaluator_refused(eval, std::string{"refused at connect to chief:0: "}
                                  + said);
}

BOOST_AUTO_TEST_CASE(an_evaluator_without_its_data_ends_the_run_at_once) {
  // The evaluator's test set is not where it was told: it says so to the
  // chief before it exits, and the chief ends with its words.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto eval = start_evaluator(tmp, cluster, 10, connect_timeout_s * 1000,
                              " --data_dir " + tmp.file("no-such-dir"));
  kill_on_exit guard{eval};
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto res = launch_waiting_for_a_worker(tmp, cluster, outputs);
  case_output::keep("the run", res.output);
  check_ended_at_once(res, "evaluator:0 cannot join the run: ", outputs);
  BOOST_TEST(said_by(res.output, "chief:0", "no-such-dir"),
             "the chief does not name the missing data");
  check_evaluator_refused(eval, "evaluator:0: chief:0 knows why");
}

BOOST_AUTO_TEST_CASE(an_evaluator_refused_while_the_steps_run_ends_the_run_checkpointed) {
  // The run trains (the chief logged a step) when an evaluator of
  // another model says hello: the chief ends after the global step in
  // flight, checkpoints it, and exits 1 with the refusal.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  temp_dir dir;
  chief_outputs outputs{dir.path()};
  auto flags = common + " --steps 1000000 --log_every 10";
  auto run = start_process(
    launch_command(cluster, " --job_flags 'chief=" + flags + outputs.flags()
                              + " --checkpoint_every 0' -- " + flags),
    tmp.file("launcher.log"));
  kill_on_exit run_guard{run};
  await_output(run, "[chief:0] global_step: ");
  auto started = std::chrono::system_clock::now();
  auto eval = start_evaluator(tmp, cluster, 10, connect_timeout_s * 1000,
                              " --model mlp --fake_data --fake_test_size 100");
  kill_on_exit eval_guard{eval};
  BOOST_REQUIRE_MESSAGE(run.wait(std::chrono::seconds{60}),
                        "the run goes on after the refusal:\n"
                          << run.output());
  const auto out = run.output();
  case_output::keep("the run", out);
  BOOST_TEST(run.exit_code >= 1);
  BOOST_TEST(run.exit_code <= 123);
  const std::string said = "evaluator:0 differs from the chief in "
                           "model.arch: mlp on evaluator:0, convnet on the "
                           "chief";
  BOOST_TEST(chief_error(out).find("refused evaluator:0 at connect: " + said)
               != std::string::npos,
             chief_error(out));
  BOOST_TEST(said_by(out, "chief:0", "the run ends after the global step in "
                                     "flight"));
  // The newest applied step is checkpointed: the one the chief named.
  std::smatch m;
  static const std::regex ends{R"(the run ends after global step (\d+))"};
  BOOST_REQUIRE_MESSAGE(std::regex_search(out, m, ends), out);
  auto ckpt = dir.path() + "/checkpoints/ckpt-" + m[1].str()
              + ".safetensors";
  BOOST_TEST(std::filesystem::exists(ckpt), "no " << ckpt);
  // From the evaluator's start (its data, model and hello included) to
  // the chief's exit, by the launcher's clock.
  auto started_s = seconds_of_day(started);
  auto exited_s = stamp_s(line_with(out, "syncfac-launch: chief:0 exited"));
  auto took = exited_s >= started_s ? exited_s - started_s
                                    : exited_s + 86400 - started_s;
  BOOST_TEST_MESSAGE("the evaluator's start to the chief's exit: " << took
                                                                  << " s");
  BOOST_TEST(took < connect_timeout_s / 3.0);
  check_evaluator_refused(eval, "refused at connect to chief:0: " + said);
}
