// Messages and bytes per training step of the sync-replica runtime for the
// seeds' ConvNet at batch 128: each message of one worker step and one
// chief round is built as the runtime builds it and serialised with CAF's
// binary serializer (the bytes it would cost across a process boundary).
//
//   build/bin/bench_messages [ps_tasks=1] [batch=128]

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/binary_serializer.hpp>

#include "messages/atoms.hpp"
#include "messages/device_messages.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/model.hpp"
#include "actors/program_config.hpp"
#include "runtime/sync/placement.hpp"

using namespace syncfac;

namespace {

template <class... Ts>
size_t bytes_of(caf::actor_system& sys, Ts... xs) {
  auto msg = caf::make_message(std::move(xs)...);
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(msg)) {
    std::fprintf(stderr, "serialisation failed\n");
    std::exit(1);
  }
  return buf.size();
}

struct tally {
  size_t messages = 0;
  size_t bytes = 0;
  void add(const char* what, size_t n, size_t b) {
    std::printf("  %-44s x%zu  %10zu bytes\n", what, n, b);
    messages += n;
    bytes += n * b;
  }
};

} // namespace

int main(int argc, char** argv) {
  int shards = argc > 1 ? std::atoi(argv[1]) : 1;
  int64_t batch_size = argc > 2 ? std::atoll(argv[2]) : 128;
  program_config cfg;
  caf::actor_system sys{cfg};
  auto m = model::make(model_spec{}, 0);
  const auto& params = (*m)->parameters();
  auto placement = place_variables(params, shards,
                                   placement_strategy::round_robin);
  if (!m || !placement) {
    std::fprintf(stderr, "bad arguments\n");
    return 1;
  }
  auto data = make_fake_dataset(batch_size, 1);
  batch b;
  slice(data, 0, batch_size, b);
  step_result res{1.0f, 1, batch_size, params, {}, 0, {}, 0};
  std::printf("ConvNet (%lld parameters), batch %lld, %d PS shard(s)\n",
              static_cast<long long>(value_count(params)),
              static_cast<long long>(batch_size), shards);
  std::printf("one worker step:\n");
  tally w;
  w.add("worker -> device: grads(params, batch)", 1,
        bytes_of(sys, grads_atom::value, params, b));
  w.add("device -> worker: step_result", 1, bytes_of(sys, res));
  for (int s = 0; s < shards; ++s) {
    gradient_push push;
    shard_params pulled;
    for (auto i : (*placement)[static_cast<size_t>(s)]) {
      push.dense.push_back(params[i]);
      pulled.values.push_back(params[i]);
    }
    auto label = "ps:" + std::to_string(s);
    w.add(("worker -> " + label + ": push").c_str(), 1,
          bytes_of(sys, push_atom::value, push));
    w.add((label + " -> worker: push_ack").c_str(), 1,
          bytes_of(sys, push_ack{}));
    w.add(("worker -> " + label + ": pull").c_str(), 1,
          bytes_of(sys, pull_atom::value));
    w.add((label + " -> worker: shard_params").c_str(), 1,
          bytes_of(sys, pulled));
  }
  w.add("worker -> chief: token(report)", 1,
        bytes_of(sys, token_atom::value, worker_report{}));
  w.add("chief -> worker: token_grant", 1, bytes_of(sys, token_grant{}));
  std::printf("  = %zu messages, %zu bytes per worker step\n", w.messages,
              w.bytes);
  std::printf("one chief round:\n");
  tally c;
  c.add("chief -> shards: apply(step, R)", static_cast<size_t>(shards),
        bytes_of(sys, apply_atom::value, int64_t{0}, int64_t{1}));
  c.add("shards -> chief: applied", static_cast<size_t>(shards),
        bytes_of(sys, applied{}));
  std::printf("  = %zu messages, %zu bytes per global step\n", c.messages,
              c.bytes);
  std::printf("per global step with N workers and R = N: %zu N + %zu "
              "messages, %zu N + %zu bytes\n",
              w.messages, c.messages, w.bytes, c.bytes);
  return 0;
}
