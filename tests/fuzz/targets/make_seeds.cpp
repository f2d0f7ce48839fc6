// Writes the seed corpora in tests/fuzz/corpus/<target>/: a handful of
// small valid inputs per fuzzer, made with the real encoders so that they
// match the code (message layouts change; regenerate after such a change).
// Run by hand, not in CI (tests/fuzz/run.sh --seeds does both steps):
//
//   tests/fuzz/run.sh --seeds
//
// Reproducers of fixed bugs are kept next to the seeds under their own
// names (crash-*, timeout-*, oom-*) and are not touched here.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>

#include "messages/cluster_messages.hpp"
#include "messages/kfac_messages.hpp"
#include "messages/row_pull.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/data/idx.hpp"
#include "runtime/base/error.hpp"

namespace fs = std::filesystem;
using namespace syncfac;

namespace {

fs::path corpus;

void write(const std::string& target, const std::string& name,
           const std::string& bytes) {
  auto dir = corpus / target;
  fs::create_directories(dir);
  std::ofstream out{dir / ("seed-" + name), std::ios::binary};
  out << bytes;
  if (!out)
    throw std::runtime_error("cannot write " + (dir / name).string());
}

tensor values(tensor_shape shape) {
  tensor t{std::move(shape)};
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = 0.25f * static_cast<float>(i + 1);
  return t;
}

// -- fuzz_messages: the selector byte (the index in fuzz_messages.cpp's
// decoders table) and the encoded message.

/// An actor system as the context of the encoder (actor handles need one);
/// never torn down, as in fuzz_messages.
caf::actor_system& system() {
  static auto* cfg = new caf::actor_system_config;
  static auto* sys = new caf::actor_system{*cfg};
  return *sys;
}

template <class T>
void message(uint8_t selector, const std::string& name, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{system(), buf};
  if (auto err = sink(x))
    throw std::runtime_error(name + ": " + render(err));
  write("fuzz_messages", name,
        std::string(1, static_cast<char>(selector))
          + std::string(buf.begin(), buf.end()));
}

void messages() {
  message(0, "tensor", values({2, 3}));
  gradient_push push;
  push.worker = 1;
  push.local_step = 7;
  push.dense = {{"fc/w", values({3, 2})}, {"fc/b", values({2})}};
  push.sparse = {{"embed", {0, 2}, values({2, 4})}};
  message(1, "gradient_push", push);
  stats_update stats;
  stats.worker = 0;
  stats.step = 3;
  stats.examples = 16;
  stats.layers = {{"fc", values({4, 4}), values({2, 2})}};
  message(2, "stats_update", stats);
  factor_set factors;
  factors.step = 4;
  factors.layers = {{"fc", 1, 5, values({4, 4}), values({2, 2})}};
  message(3, "factor_set", factors);
  inverse_set inverses;
  inverses.step = 4;
  layer_inverse inv;
  inv.layer = "fc";
  inv.damping = inv.a_damping = inv.g_damping = 0.001f;
  inv.a = values({4, 4});
  inv.g = values({2, 2});
  inverses.layers = {inv};
  inverses.problems = {"conv1: too few covariance updates"};
  message(4, "inverse_set", inverses);
  node_hello hello;
  hello.job = "worker";
  hello.index = 1;
  hello.message_types = {"syncfac::gradient_push", "syncfac::tensor"};
  message(5, "node_hello", hello);
  node_info info;
  info.job = "ps";
  info.role_names = {"ps:0"};
  message(6, "node_info", info);
  worker_report report;
  report.worker = 2;
  report.local_step = 9;
  report.loss = 0.5f;
  report.correct = 100;
  report.count = 128;
  message(7, "worker_report", report);
  message(8, "sparse_update", sparse_update{"embed", {1, 3}, values({2, 3})});
  // A row pull's answer: a dense variable whole, two rows of the table.
  shard_params pulled{1, 5, {{"fc/b", values({2})}}};
  pulled.rows = {{"embed", {0, 4}, values({2, 3})}};
  message(9, "shard_params", pulled);
  message(10, "row_request", row_request{"embed", {0, 4, 9}});
}

// -- fuzz_idx --------------------------------------------------------------

std::string slurp(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

void idx_file(const std::string& name, std::vector<int64_t> dims, bool gzip) {
  idx_array x;
  x.dims = std::move(dims);
  x.data.resize(static_cast<size_t>(x.element_count()));
  for (size_t i = 0; i < x.data.size(); ++i)
    x.data[i] = static_cast<uint8_t>(i * 37);
  auto tmp = fs::temp_directory_path() / "syncfac-seed.idx";
  if (auto err = write_idx(tmp.string(), x, gzip))
    throw std::runtime_error(render(err));
  write("fuzz_idx", name, slurp(tmp));
  fs::remove(tmp);
}

void idx() {
  idx_file("labels-idx1", {10}, false);
  idx_file("images-idx3", {2, 4, 4}, false);
  idx_file("images-idx3.gz", {3, 5, 5}, true);
  idx_file("rank4-idx4", {1, 2, 2, 3}, false);
}

// -- fuzz_cluster_spec -----------------------------------------------------

void cluster() {
  auto seed = [](const std::string& name, const std::string& text) {
    write("fuzz_cluster_spec", name, text);
  };
  seed("momentum.json",
       R"({"cluster": {"chief": ["localhost:2222"], "worker": )"
       R"(["localhost:2223", "localhost:2224"], "ps": ["localhost:2225"]}})");
  seed("kfac-task.json",
       R"({"cluster": {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"],)"
       R"( "ps": ["10.0.0.3:2222"], "covariance": ["10.0.0.4:2222"], )"
       R"("inverse": ["10.0.0.5:2222"]}, "task": {"type": "worker", )"
       R"("index": 0}})");
  seed("ipv6.json",
       R"({"cluster": {"chief": ["[::1]:2222"], "evaluator": )"
       R"(["[fe80::1]:2223"]}, "task": {"type": "chief", "index": 0}})");
  seed("address", "localhost:2222");
  seed("task", "worker:3");
}

// -- fuzz_checkpoint -------------------------------------------------------

void checkpoint(const std::string& name, const parameter_set& xs,
                const tensor_metadata& meta) {
  auto bytes = encode_safetensors(xs, meta);
  if (!bytes)
    throw std::runtime_error(render(bytes.error()));
  write("fuzz_checkpoint", name, *bytes);
}

void checkpoints() {
  checkpoint("empty.safetensors", {}, {});
  checkpoint("one.safetensors", {{"w", values({2, 2})}},
             {{"global_step", "3"}});
  checkpoint("model.safetensors",
             {{"conv1/weights", values({2, 3, 1, 2})},
              {"conv1/biases", values({2})},
              {"scalar", values({})}},
             {{"global_step", "10"}, {"checksum", "crc32c:00000000"}});
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds CORPUS_DIR\n";
    return 2;
  }
  corpus = argv[1];
  try {
    messages();
    idx();
    cluster();
    checkpoints();
  } catch (const std::exception& e) {
    std::cerr << "make_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
