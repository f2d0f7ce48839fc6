#define BOOST_TEST_MODULE resnet
#include <boost/test/unit_test.hpp>

// ResNet-20 (examples/models/resnet20.json; docs/models.md) trained across
// processes on Debian's Fashion-MNIST, with momentum SGD and with K-FAC:
// two workers and two PS shards in a loopback cluster, 120 steps of 32.
// What must hold is learning, measured on the 10,000 test images with the
// moving statistics the shards averaged: such a run reaches 0.70-0.76
// here, while a model whose moving statistics did not travel, or whose
// residual additions or pools lost their gradients, stays near chance
// (0.1-0.2). K-FAC must precondition most steps (its first inverses are
// due at step 10).

#include <string>

#include "tests/examples/process.hpp"

using namespace syncfac::test;

namespace {

std::string train_across_processes(const temp_dir& tmp,
                                   const std::string& optimizer_flags,
                                   const std::string& summary) {
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 2}, {"ps", 2}});
  run_ok(bin + "syncfac-launch --cluster " + cluster + " --program " + bin
         + "convnet_mnist_distributed --max_wall_s 900 --"
           " --model_file " SYNCFAC_SOURCE_DIR "/examples/models/resnet20.json"
           " --batch_size 32 --steps 120 --seed 3 --threads 1 --num_tokens 0"
           " --no_progress --log_every 20 --connect_timeout_ms 60000 "
         + optimizer_flags + " --summary " + summary);
  return read_file(summary);
}

} // namespace

BOOST_AUTO_TEST_CASE(resnet20_learns_across_processes_with_momentum) {
  require_fashion_mnist();
  temp_dir tmp;
  auto summary = train_across_processes(
    tmp, "--optimizer momentum --learning_rate 0.05", tmp.file("s.json"));
  BOOST_TEST(json_numbers(summary, "global_step").at(0) == 120);
  BOOST_TEST(json_numbers(summary, "workers").at(0) == 2);
  BOOST_TEST(json_numbers(summary, "test_accuracy").at(0) > 0.6, summary);
}

BOOST_AUTO_TEST_CASE(resnet20_learns_across_processes_with_kfac) {
  require_fashion_mnist();
  temp_dir tmp;
  auto summary = train_across_processes(
    tmp, "--optimizer kfac --learning_rate 0.003 --invert_every 10",
    tmp.file("s.json"));
  BOOST_TEST(json_numbers(summary, "global_step").at(0) == 120);
  // All 22 conv and dense layers hold Kronecker factors; batch_norm's
  // gamma and beta are trained first-order.
  BOOST_TEST(json_numbers(summary, "layers").at(0) == 22);
  BOOST_TEST(json_numbers(summary, "preconditioned_steps").at(0) >= 90,
             summary);
  BOOST_TEST(json_numbers(summary, "test_accuracy").at(0) > 0.6, summary);
}
