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

#include <ostream>
#include <string>
#include <vector>

#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

const std::string launcher = bin + "syncfac-launch";
const std::string program = bin + "convnet_mnist_distributed";

// A short connect timeout: a refusal must not wait for it, and a node that
// is never refused (the other shards) gives up soon after the chief.
const std::string common = " --fake_data --fake_train_size 512"
                           " --fake_test_size 100 --batch_size 32"
                           " --threads 1 --seed 3 --no_progress --steps 20"
                           " --num_tokens 0 --connect_timeout_ms 20000"
                           " --max_wait_ms 20000";

/// Runs the cluster with `flags` everywhere but `job`, which gets `flags`
/// plus `differing`.
process_result launch(const std::string& cluster, const std::string& flags,
                      const std::string& job, const std::string& differing) {
  return run_program(launcher + " --cluster " + cluster + " --program "
                     + program + " --max_wall_s 120 --grace_ms 2000"
                     + " --job_flags '" + job + "=" + flags + differing
                     + "' -- " + flags);
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
                   const std::string& difference) {
  BOOST_TEST_MESSAGE(res.output);
  // The chief's exit code; 124 would be the launcher's wall limit.
  BOOST_TEST(res.exit_code != 0);
  BOOST_TEST(res.exit_code != 124);
  const auto& out = res.output;
  // Both say it: the refused node's error and the chief's.
  auto said = node + " differs from the chief in " + difference;
  BOOST_TEST(said_by(out, node, said), node << " did not say '" << said << "'");
  BOOST_TEST(said_by(out, "chief:0", "refused " + node + " at connect: " + said),
             "the chief did not name " << node);
  BOOST_TEST(out.find("global_step:") == std::string::npos,
             "a step ran");
  BOOST_TEST(out.find("never connected") == std::string::npos,
             "the chief waited for its connect timeout");
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
};

} // namespace

BOOST_DATA_TEST_CASE(a_worker_with_another_setting_is_refused,
                     boost::unit_test::data::make(worker_differences), x) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 1}});
  check_refused(launch(cluster, x.flags, "worker", x.differing), "worker:0",
                x.difference);
}

BOOST_AUTO_TEST_CASE(shards_with_another_placement_refuse_the_chief) {
  // The chief connects to the shards itself: there the shard compares the
  // chief's hello and refuses it; the chief ends naming the shard.
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 2}});
  auto res = launch(cluster, common, "ps", " --placement by_size");
  BOOST_TEST_MESSAGE(res.output);
  BOOST_TEST(res.exit_code != 0);
  BOOST_TEST(res.exit_code != 124);
  const auto& out = res.output;
  // Whichever shard the chief reached first refused it.
  std::string shard;
  for (const char* s : {"ps:0", "ps:1"})
    if (out.find(std::string{s} + " differs from the chief") != std::string::npos)
      shard = s;
  BOOST_REQUIRE_MESSAGE(!shard.empty(), "no shard refused the chief");
  auto said = shard + " differs from the chief in ps.placement: by_size on "
              + shard + ", round_robin on the chief";
  BOOST_TEST(said_by(out, shard, "refused chief:0 at connect: " + said));
  BOOST_TEST(said_by(out, "chief:0", "refused at connect to " + shard + ": "
                                       + said));
  BOOST_TEST(out.find("global_step:") == std::string::npos);
  BOOST_TEST(out.find("syncfac-launch: chief:0 exited with code 1")
               != std::string::npos);
  // The shard that refused the chief exits 1 too (the other one was not
  // reached: the launcher stops it after its grace).
  BOOST_TEST(out.find("syncfac-launch: " + shard + " exited with code 1")
               != std::string::npos);
}
