#include "actors/transfer_report.hpp"

#include "actors/gather.hpp"

namespace syncfac {

namespace {

int64_t whole(double figure) {
  return static_cast<int64_t>(figure);
}

/// What the actors of `kind` sent, from their table's "messages_sent" and
/// "payload_bytes_sent" (actors/role_figures.hpp).
transfer_counts sent_by(const role_totals& roles, const std::string& kind) {
  transfer_counts sent;
  sent.messages = whole(roles.value(kind, "messages_sent"));
  sent.bytes = whole(roles.value(kind, "payload_bytes_sent"));
  return sent;
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
                               const role_totals& roles,
                               const std::vector<ps_actor>& shards,
                               std::chrono::milliseconds timeout) {
  transfer_tally t;
  t.global_steps = whole(roles.value("chief", "global_step"));
  t.worker_steps = whole(roles.value("worker", "steps"));
  t.workers = sent_by(roles, "worker");
  t.shards = sent_by(roles, "ps");
  t.chief = sent_by(roles, "chief");
  t.bytes_pushed = whole(roles.value("worker", "bytes_pushed"));
  t.bytes_pulled = whole(roles.value("worker", "bytes_pulled"));
  t.bytes_pulled_unused = whole(roles.value("worker", "bytes_pulled_unused"));
  t.pulls_waited = whole(roles.value("ps", "pulls_waited"));
  t.pulls_without_values = whole(roles.value("ps", "pulls_without_values"));
  t.token_wait_s = roles.value("worker", "token_wait_s");
  auto ignore = [](size_t, const caf::error&) {};
  // After the statuses: the shards count this pull among what they sent.
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
