#pragma once

// Mini-batches for one data-parallel shard. Worker k of n sees the examples
// i with i % n == k, so the shards are disjoint and together cover the set.
// Each epoch visits the shard in a fresh order seeded by (seed, shard,
// epoch) alone, so a run resumed from a batcher_state continues with exactly
// the batches it would have seen.

#include <cstdint>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/inspect.hpp"

namespace syncfac {

struct batch {
  /// float32 [B, H, W, C], pixel bytes scaled to [0, 1] (byte / 255).
  tensor images;
  /// B labels.
  label_vector labels;
  /// Where the training passes on this batch draw their dropout masks
  /// (model::set_noise_seed): from the batcher's seed, shard and the
  /// batch's place in its epoch, so a resumed run draws the same ones.
  uint64_t noise_seed = 0;
};

/// Where a batcher stands: the epoch of the next batch and the position of
/// that batch within the epoch's order (a multiple of the batch size).
struct batcher_state {
  int64_t epoch = 0;
  int64_t cursor = 0;

  friend bool operator==(const batcher_state& x, const batcher_state& y) {
    return x.epoch == y.epoch && x.cursor == y.cursor;
  }

  friend bool operator!=(const batcher_state& x, const batcher_state& y) {
    return !(x == y);
  }
};

SYNCFAC_INSPECT(batcher_state, x.epoch, x.cursor)

class batcher {
public:
  /// A batcher over shard `shard_index` of `num_shards`, or an
  /// ec::invalid_argument error naming the bad value: batch_size >= 1,
  /// 0 <= shard_index < num_shards, and the shard must hold at least one
  /// full batch. `data` must outlive the batcher.
  static caf::expected<batcher> make(const dataset& data, int64_t batch_size,
                                     uint64_t seed, int shard_index = 0,
                                     int num_shards = 1);

  /// As make(), but throws std::invalid_argument on bad arguments (a
  /// programming error where they are not user input).
  batcher(const dataset& data, int64_t batch_size, uint64_t seed,
          int shard_index = 0, int num_shards = 1);

  /// Fills `out` with the next batch (reusing its storage) and moves on,
  /// starting the next epoch after the last full batch of this one. The
  /// partial batch at an epoch's end is dropped: every step then has the
  /// same batch size (the K-FAC statistics assume it), and the next epoch's
  /// shuffle gives the dropped examples their turn.
  void next(batch& out);

  /// The epoch the next batch comes from (= epochs completed).
  int64_t epoch() const noexcept {
    return epoch_;
  }

  /// floor(shard_size() / batch_size()).
  int64_t steps_per_epoch() const noexcept {
    return shard_size() / batch_size_;
  }

  int64_t shard_size() const noexcept {
    return static_cast<int64_t>(order_.size());
  }

  int64_t batch_size() const noexcept {
    return batch_size_;
  }

  batcher_state state() const noexcept {
    return {epoch_, cursor_};
  }

  /// Continues from a state() of a batcher made with the same arguments.
  /// A state that does not fit this batcher is ec::invalid_argument and
  /// changes nothing.
  caf::error restore(const batcher_state& st);

  /// How many examples `num_shards` shards give to shard `shard_index`.
  static int64_t shard_size(int64_t count, int shard_index, int num_shards);

private:
  // Sets order_ to the shard's examples in the order of epoch_.
  void shuffle();

  const dataset* data_ = nullptr;
  int64_t batch_size_ = 0;
  uint64_t seed_ = 0;
  int shard_index_ = 0;
  int num_shards_ = 1;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  std::vector<int64_t> order_;
};

/// Fills `out` with examples [begin, end) of `data` in order, as
/// batcher::next would scale them: evaluation batches. Requires
/// 0 <= begin < end <= data.count (throws std::out_of_range otherwise).
void slice(const dataset& data, int64_t begin, int64_t end, batch& out);

} // namespace syncfac
