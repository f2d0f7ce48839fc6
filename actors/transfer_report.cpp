#include "actors/transfer_report.hpp"

#include "actors/gather.hpp"

namespace syncfac {

namespace {

void add(transfer_counts& sum, const transfer_counts& x) {
  sum.messages += x.messages;
  sum.bytes += x.bytes;
}

json_object counts_json(const transfer_counts& x, int64_t global_steps) {
  json_object obj;
  obj.add("messages", x.messages).add("bytes", x.bytes);
  if (global_steps > 0)
    obj.add("messages_per_global_step",
            static_cast<double>(x.messages) / global_steps)
      .add("bytes_per_global_step",
           static_cast<double>(x.bytes) / global_steps);
  return obj;
}

} // namespace

double transfer_tally::ratio_to_minimum() const {
  if (worker_steps <= 0 || parameter_bytes <= 0)
    return 0;
  auto per_step = static_cast<double>(bytes_pushed + bytes_pulled
                                      + bytes_pulled_unused)
                  / static_cast<double>(worker_steps);
  return per_step / (2.0 * static_cast<double>(parameter_bytes));
}

json_object transfer_tally::to_json() const {
  json_object obj;
  obj.add("parameter_bytes", parameter_bytes)
    .add("global_steps", global_steps)
    .add("worker_steps", worker_steps)
    .add("min_bytes_per_worker_step", 2 * parameter_bytes);
  if (worker_steps > 0)
    obj.add("bytes_per_worker_step",
            static_cast<double>(bytes_pushed + bytes_pulled
                                + bytes_pulled_unused)
              / static_cast<double>(worker_steps));
  if (worker_steps > 0)
    obj.add("token_wait_ms_per_worker_step",
            1000.0 * token_wait_s / static_cast<double>(worker_steps));
  obj.add("ratio_to_minimum", ratio_to_minimum())
    .add("bytes_pushed", bytes_pushed)
    .add("bytes_pulled", bytes_pulled)
    .add("bytes_pulled_unused", bytes_pulled_unused)
    .add("pulls_waited", pulls_waited)
    .add("pulls_without_values", pulls_without_values)
    // Not "workers" and so on: the summary has those keys at its top level.
    .add("sent_by_workers", counts_json(workers, global_steps))
    .add("sent_by_shards", counts_json(shards, global_steps))
    .add("sent_by_chief", counts_json(chief, global_steps));
  return obj;
}

transfer_tally tally_transfers(caf::scoped_actor& self,
                               const chief_actor& chief,
                               const std::vector<ps_actor>& shards,
                               const std::vector<worker_actor>& workers,
                               std::chrono::milliseconds timeout) {
  transfer_tally t;
  auto ignore = [](size_t, const caf::error&) {};
  ask_each<worker_status>(
    self, workers, timeout,
    [&](size_t, const worker_status& ws) {
      t.worker_steps += ws.steps;
      add(t.workers, ws.sent);
      t.bytes_pushed += ws.bytes_pushed;
      t.bytes_pulled += ws.bytes_pulled;
      t.bytes_pulled_unused += ws.bytes_pulled_unused;
      t.token_wait_s += ws.token_wait_s;
    },
    ignore, status_atom::value);
  // Counters before the pull of the sizes below, which the shards count.
  ask_each<shard_status>(
    self, shards, timeout,
    [&](size_t, const shard_status& ss) {
      add(t.shards, ss.sent);
      t.pulls_waited += ss.pulls_waited;
      t.pulls_without_values += ss.pulls_without_values;
    },
    ignore, status_atom::value);
  ask_each<chief_status>(
    self, std::vector<chief_actor>{chief}, timeout,
    [&](size_t, const chief_status& cs) {
      t.global_steps = cs.global_step;
      add(t.chief, cs.sent);
    },
    ignore, status_atom::value);
  ask_each<shard_params>(
    self, shards, timeout,
    [&](size_t, const shard_params& sp) {
      t.parameter_bytes += value_count(sp.values)
                           * static_cast<int64_t>(sizeof(float));
    },
    ignore, pull_atom::value);
  return t;
}

} // namespace syncfac
