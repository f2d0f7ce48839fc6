#define BOOST_TEST_MODULE model_files
#include <boost/test/unit_test.hpp>

// Model files on the real programs (docs/models.md): the built-in models'
// files train to the same parameters as --model, in one process and in a
// loopback cluster; a bad description or a model that does not fit the
// data fails before training, exit != 0, nothing written.

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/data/npz.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac::test;
namespace fs = std::filesystem;

namespace {

const std::string models = SYNCFAC_SOURCE_DIR "/examples/models/";

const std::string data = " --fake_data --fake_train_size 1024"
                         " --fake_test_size 200 --batch_size 32 --seed 3"
                         " --no_progress --num_tokens 0 --log_every 10";

std::string digest_of(const std::string& command, const std::string& summary) {
  auto res = run_ok(command + " --summary " + summary);
  auto digest = json_string(read_file(summary), "params_digest");
  BOOST_REQUIRE(!digest.empty());
  return digest;
}

/// The summary of convnet_mnist_distributed with `flags` run by the
/// launcher as `cluster`, written to `summary`.
std::string cluster_summary(const std::string& cluster,
                            const std::string& flags,
                            const std::string& summary) {
  run_ok(bin + "syncfac-launch --cluster " + cluster + " --program " + bin
         + "convnet_mnist_distributed --max_wall_s 300 -- " + flags
         + " --connect_timeout_ms 60000 --summary " + summary);
  return read_file(summary);
}

/// The summaries of a model file's runs in a loopback cluster (the chief, a
/// worker, two PS shards).
struct cluster_runs {
  std::string momentum;
  std::string kfac;
};

/// Trains examples/models' `model_file` for `steps` global steps in a
/// loopback cluster with momentum SGD at `momentum_lr`, which must end on
/// the parameters of the same run in one process, and with K-FAC at
/// `kfac_lr` (inverting every 5 steps), which must precondition its steps.
cluster_runs train_in_a_cluster(const std::string& model_file, int steps,
                                const std::string& momentum_lr,
                                const std::string& kfac_lr) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 2}});
  auto common = data + " --threads 1 --steps " + std::to_string(steps)
                + " --model_file " + models + model_file;
  auto momentum = common + " --optimizer momentum --learning_rate "
                  + momentum_lr;
  cluster_runs runs;
  runs.momentum = cluster_summary(cluster, momentum, tmp.file("momentum.json"));
  auto here = digest_of(single + momentum + " --ps_tasks 2",
                        tmp.file("local.json"));
  BOOST_TEST(json_string(runs.momentum, "params_digest") == here);
  runs.kfac = cluster_summary(cluster,
                              common + " --optimizer kfac --learning_rate "
                                + kfac_lr + " --invert_every 5",
                              tmp.file("kfac.json"));
  BOOST_TEST(json_numbers(runs.kfac, "preconditioned_steps").at(0) > 0,
             runs.kfac);
  return runs;
}

} // namespace

BOOST_AUTO_TEST_CASE(builtin_files_train_as_the_builtin_models) {
  // Two workers, two shards, but one worker's batches only (--num_tokens
  // 0 and R = 1 would still race): one worker keeps the run bit-exact.
  for (auto [flag, file] : {std::pair{"convnet", "seeds_convnet.json"},
                            std::pair{"mlp", "seeds_mlp.json"}}) {
    BOOST_TEST_CONTEXT(flag) {
      temp_dir tmp;
      auto common = single + data + " --threads 1 --steps 30 --ps_tasks 2";
      auto by_flag = digest_of(common + " --model " + flag,
                               tmp.file("flag.json"));
      auto by_file = digest_of(common + " --model_file " + models + file,
                               tmp.file("file.json"));
      BOOST_TEST(by_flag == by_file);
      // The digest depends on the model: another seed changes it.
      auto other = digest_of(common + " --model_file " + models + file
                               + " --seed 4",
                             tmp.file("other.json"));
      BOOST_TEST(other != by_file);
    }
  }
}

BOOST_AUTO_TEST_CASE(autoencoder_file_trains_as_the_builtin_autoencoder) {
  temp_dir tmp;
  auto common = bin + "autoencoder_mnist --fake_data --fake_train_size 256"
                      " --eval_examples 64 --batch_size 32 --steps 8"
                      " --threads 1 --seed 3 --no_progress --runtime sync";
  auto builtin = digest_of(common, tmp.file("builtin.json"));
  auto file = digest_of(common + " --model_file " + models
                          + "autoencoder.json",
                        tmp.file("file.json"));
  BOOST_TEST(builtin == file);
}

BOOST_AUTO_TEST_CASE(builtin_file_in_a_cluster_equals_the_flag_in_process) {
  temp_dir tmp;
  auto cluster = write_cluster(tmp, {{"chief", 1}, {"worker", 1}, {"ps", 2}});
  auto across = json_string(
    cluster_summary(cluster,
                    data + " --threads 1 --steps 30 --model_file " + models
                      + "seeds_convnet.json",
                    tmp.file("summary.json")),
    "params_digest");
  auto here = digest_of(single + data + " --threads 1 --steps 30"
                          " --ps_tasks 2 --model convnet",
                        tmp.file("local.json"));
  BOOST_TEST(across == here);
}

BOOST_AUTO_TEST_CASE(a_residual_graph_trains_in_a_cluster_as_here) {
  // examples/models/residual_convnet.json (two residual blocks, a 1x1
  // shortcut): with momentum, across processes it ends on the in-process
  // parameters (K-FAC's inverses reach the shards when they are ready, so
  // its runs do not replay bit for bit); under K-FAC, which preconditions
  // its seven convolutions and the dense layer, 30 steps reach a test
  // accuracy momentum's do not (0.5 here).
  auto runs = train_in_a_cluster("residual_convnet.json", 30, "0.01", "0.0003");
  BOOST_TEST(json_numbers(runs.kfac, "test_accuracy").at(0) > 0.9, runs.kfac);
  BOOST_TEST(json_numbers(runs.momentum, "test_accuracy").at(0) < 0.9,
             runs.momentum);
}

BOOST_AUTO_TEST_CASE(a_normalised_model_trains_in_a_cluster_as_here) {
  // examples/models/normalised_convnet.json (batch_norm, avg_pool,
  // dropout, global_avg_pool): across processes the moving statistics
  // travel, average and apply as every variable does, and the dropout
  // masks follow the batches, so a momentum run ends on the in-process
  // parameters, moving statistics included. Its test accuracy is measured
  // with the moving statistics: were they left at their start (0 and 1),
  // the normalised activations would be off by the batches' scale and the
  // accuracy near chance. K-FAC preconditions the convolutions and the
  // classifier, and trains batch_norm's gamma and beta first-order.
  auto runs = train_in_a_cluster("normalised_convnet.json", 150, "0.1",
                                 "0.001");
  BOOST_TEST(json_numbers(runs.momentum, "test_accuracy").at(0) > 0.8,
             runs.momentum);
  BOOST_TEST(json_numbers(runs.kfac, "test_accuracy").at(0) > 0.8, runs.kfac);
}

namespace {

struct bad_case {
  const char* what;
  const char* json;
  std::vector<std::string> says;
};

} // namespace

BOOST_AUTO_TEST_CASE(bad_descriptions_fail_before_training) {
  const char* tail = R"(, "loss": "softmax_cross_entropy"})";
  std::vector<bad_case> cases = {
    {"unknown layer",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},
         {"type": "lstm", "units": 5}])",
     {"bad.json", "layer 1", "unknown layer type 'lstm'"}},
    {"missing field",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "conv2d",
         "kernel": 5}])",
     {"bad.json", "layer 0 (conv2d)", "missing field 'filters'"}},
    {"wrong-typed field",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},
         {"type": "dense", "units": "10"}])",
     {"bad.json", "layer 1 (dense)", "'units' must be an integer",
      "string \"10\""}},
    {"unknown field",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "conv2d",
         "kernel": 5, "filter": 16}])",
     {"bad.json", "layer 0 (conv2d)", "unknown field 'filter'"}},
    {"shapes that do not chain",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "conv2d",
         "kernel": 5, "filters": 16, "padding": "SAME"},
         {"type": "dense", "units": 10}])",
     {"bad.json", "layer 1 (dense 'fc1')", "[-1, 28, 28, 16]",
      "[-1, features]"}},
    {"window larger than the input",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "max_pool",
         "window": 40}, {"type": "flatten"}, {"type": "dense",
         "units": 10}])",
     {"bad.json", "layer 0 (max_pool 'pool0')"}},
    {"input that does not match the data",
     R"({"input_shape": [32, 32, 3], "layers": [{"type": "flatten"},
         {"type": "dense", "units": 10}])",
     {"model 'bad'", "[32, 32, 3]", "[28, 28, 1]", "fake data"}},
    {"fewer classes than the labels",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},
         {"type": "dense", "units": 4}])",
     {"model 'bad'", "4 classes", "label 9"}},
    {"loss that does not fit the output",
     R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},
         {"type": "dense", "units": 10}], "loss": "sigmoid_cross_entropy"})",
     {"bad.json", "sigmoid_cross_entropy", "[-1, 10]", "784"}},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      temp_dir tmp;
      auto file = tmp.file("bad.json");
      std::string text = c.json;
      if (text.find("\"loss\"") == std::string::npos)
        text += tail;
      std::ofstream{file} << text;
      auto out_dir = tmp.file("out");
      auto res = run_program(single + data + " --threads 1 --steps 5"
                             " --model_file " + file + " --summary "
                             + out_dir + "/summary.json --metrics " + out_dir
                             + "/metrics.jsonl --logdir " + out_dir
                             + "/tb --checkpoint_dir " + out_dir + "/ckpt");
      BOOST_TEST(res.exit_code != 0, res.output);
      for (const auto& needle : c.says)
        BOOST_TEST(said(res.output, needle),
                   "'" << needle << "' not in: " << res.output);
      BOOST_TEST(res.output.find("global_step") == std::string::npos);
      BOOST_TEST(!fs::exists(out_dir), "written: " << out_dir);
    }
  }
}

BOOST_AUTO_TEST_CASE(unreadable_model_file_is_named) {
  temp_dir tmp;
  check_refused(single + data + " --steps 5 --model_file"
                " " + tmp.file("nope.json"),
                {"nope.json"});
}

namespace {

/// A .npz file of `n` float32 examples of 16 values in 4 classes (the
/// class picks which quarter of the vector is raised) and a model file for
/// it, as a user would bring them.
void write_vectors(const std::string& path, int64_t n, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::normal_distribution<float> noise(0.0f, 0.3f);
  syncfac::npy_array x;
  x.kind = syncfac::npy_kind::floating;
  x.item_size = 4;
  x.descr = "<f4";
  x.shape = {n, 16};
  std::vector<float> values(static_cast<size_t>(n * 16));
  syncfac::npy_array y;
  y.kind = syncfac::npy_kind::unsigned_int;
  y.item_size = 1;
  y.descr = "|u1";
  y.shape = {n};
  for (int64_t i = 0; i < n; ++i) {
    auto label = static_cast<uint8_t>(rng() % 4);
    y.data.push_back(label);
    for (int64_t j = 0; j < 16; ++j)
      values[static_cast<size_t>(i * 16 + j)]
        = noise(rng) + (j / 4 == label ? 1.0f : 0.0f);
  }
  x.data.resize(values.size() * 4);
  std::memcpy(x.data.data(), values.data(), x.data.size());
  std::map<std::string, syncfac::npy_array> arrays{
    {"x_train", x}, {"y_train", y}, {"x_test", x}, {"y_test", y}};
  auto bytes = syncfac::write_npz(arrays);
  std::ofstream{path, std::ios::binary}.write(
    reinterpret_cast<const char*>(bytes.data()),
    static_cast<std::streamsize>(bytes.size()));
}

} // namespace

BOOST_AUTO_TEST_CASE(own_data_and_own_model_train) {
  temp_dir tmp;
  auto npz = tmp.file("vectors.npz");
  write_vectors(npz, 2048, 7);
  auto model = tmp.file("vectors.json");
  std::ofstream{model} << R"({"input_shape": [16], "init": "glorot",
    "layers": [{"type": "flatten"}, {"type": "dense", "units": 16},
               {"type": "relu"}, {"type": "dense", "units": 4}],
    "loss": "softmax_cross_entropy"})";
  auto summary = tmp.file("summary.json");
  auto res = run_ok(single + " --data " + npz + " --model_file " + model
                    + " --steps 200 --batch_size 32 --optimizer adam"
                      " --learning_rate 0.01 --threads 2"
                      " --worker_replicas 2 --ps_tasks 2 --no_progress"
                      " --summary " + summary);
  auto acc = json_numbers(read_file(summary), "test_accuracy");
  BOOST_REQUIRE_EQUAL(acc.size(), 1u);
  BOOST_TEST(acc[0] > 0.9, "test accuracy " << acc[0]);
  // The built-in ConvNet does not take these examples: refused by name.
  auto out_dir = tmp.file("out");
  check_refused(single + " --data " + npz + " --steps 5"
                " --summary " + out_dir + "/s.json",
                {"[28, 28, 1]", "vectors.npz"});
  BOOST_TEST(!fs::exists(out_dir));
}
