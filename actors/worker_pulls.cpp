// The worker's pulls: payload bytes, and which rows a pull asks for.

#include "actors/worker_parts.hpp"

namespace syncfac::worker_parts {

/// Payload bytes of pulled values (whole variables and rows with their
/// ids).
int64_t payload_bytes(const shard_params& sp) {
  auto n = value_count(sp.values) * static_cast<int64_t>(sizeof(float));
  for (const auto& r : sp.rows)
    n += payload_bytes(r);
  return n;
}

int64_t payload_bytes(const std::vector<shard_params>& pulled) {
  int64_t n = 0;
  for (const auto& sp : pulled)
    n += payload_bytes(sp);
  return n;
}

/// Payload bytes of a push: dense values, sparse indices and rows.
int64_t payload_bytes(const gradient_push& p) {
  int64_t n = 0;
  for (const auto& g : p.dense)
    n += g.value.size() * static_cast<int64_t>(sizeof(float));
  for (const auto& g : p.sparse)
    n += static_cast<int64_t>(g.indices.size() * sizeof(int64_t))
         + g.rows.size() * static_cast<int64_t>(sizeof(float));
  return n;
}

// -- row pulls -----------------------------------------------------------------

/// Whether this worker pulls its embedding table by rows (once it knows
/// which shard holds the table).
bool pulls_rows(const worker_state& st) {
  return st.row_table && st.initialised()
         && st.slot_of.count(*st.row_table) > 0;
}

/// The shard that holds the table (pulls_rows() only).
size_t table_shard(const worker_state& st) {
  return st.shard_of[st.slot_of.at(*st.row_table)];
}

/// Draws the batch the next step takes (compute() takes it from here
/// instead of drawing again) and returns the rows it looks up of the
/// table.
std::vector<int64_t> rows_ahead(worker_state& st) {
  auto at = st.batches->state();
  if (!st.ahead || st.ahead_from != at) {
    st.ahead = *st.batches;
    st.ahead->next(st.ahead_batch);
    st.ahead_from = at;
  }
  return rows_looked_up(st.ahead_batch.images);
}

/// The batch of this step: the one drawn ahead when it was drawn at the
/// batcher's position (a resume elsewhere draws anew).
void draw_batch(worker_state& st) {
  if (st.ahead && st.ahead_from == st.batches->state()) {
    std::swap(st.current, st.ahead_batch);
    *st.batches = std::move(*st.ahead);
  } else {
    st.batches->next(st.current);
  }
  st.ahead.reset();
}

/// Per shard, the rows its pull asks for: the next batch's rows of the
/// table to the shard holding it, nothing (every variable whole) to the
/// others. All empty when the worker pulls whole.
std::vector<std::vector<row_request>> row_requests(worker_state& st) {
  std::vector<std::vector<row_request>> result(st.cfg.shards.size());
  if (!pulls_rows(st))
    return result;
  result[table_shard(st)].push_back(row_request{*st.row_table,
                                                rows_ahead(st)});
  return result;
}

} // namespace syncfac::worker_parts
