#include "runtime/data/batcher.hpp"

#include <algorithm>
#include <array>
#include <random>
#include <stdexcept>
#include <utility>

#include "runtime/data/seeding.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/least_counts.hpp"

namespace syncfac {

namespace {

caf::error check_dataset(const dataset& data) {
  auto pixels = data.element_count();
  auto labels = static_cast<int64_t>(data.labels.size());
  if (data.count >= 0 && data.example_size() > 0
      && pixels == data.count * data.example_size() && labels == data.count)
    return caf::none;
  return make_error(ec::invalid_argument,
                    "dataset " + data.source + " is inconsistent: "
                      + std::to_string(data.count) + " examples of "
                      + std::to_string(data.example_size()) + " bytes, but "
                      + std::to_string(pixels) + " input values and "
                      + std::to_string(labels) + " labels");
}

caf::error check_args(const dataset& data, int64_t batch_size,
                      int shard_index, int num_shards) {
  auto fail = [](std::string why) {
    return make_error(ec::invalid_argument, std::move(why));
  };
  if (auto why = first_below_least({{"batch size", batch_size, 1},
                                     {"number of shards", num_shards, 1}});
      !why.empty())
    return fail(why);
  if (shard_index < 0 || shard_index >= num_shards)
    return fail("shard index " + std::to_string(shard_index)
                + " is not in [0, " + std::to_string(num_shards) + ")");
  if (auto err = check_dataset(data))
    return err;
  auto size = batcher::shard_size(data.count, shard_index, num_shards);
  if (size < batch_size)
    return fail("shard " + std::to_string(shard_index) + " of "
                + std::to_string(num_shards) + " of " + data.source + " has "
                + std::to_string(size) + " examples, fewer than one batch of "
                + std::to_string(batch_size));
  return caf::none;
}

// Exactly byte / 255.0f, without a division per pixel.
const std::array<float, 256>& byte_scale() {
  static const auto table = [] {
    std::array<float, 256> result{};
    for (int i = 0; i < 256; ++i)
      result[i] = static_cast<float>(i) / 255.0f;
    return result;
  }();
  return table;
}

void shape_batch(const dataset& data, int64_t size, batch& out) {
  out.images.resize({size, data.height, data.width, data.channels});
  out.labels.resize(static_cast<size_t>(size));
}

void fill_row(const dataset& data, int64_t example, int64_t row,
              batch& out) {
  auto n = data.example_size();
  float* dst = out.images.data() + row * n;
  if (data.float_inputs()) {
    const float* src = data.value_data() + example * n;
    std::copy(src, src + n, dst);
  } else {
    const auto& scale = byte_scale();
    const uint8_t* src = data.image(example);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = scale[src[i]];
  }
  out.labels[static_cast<size_t>(row)] = data.labels[example];
}

} // namespace

caf::expected<batcher> batcher::make(const dataset& data, int64_t batch_size,
                                     uint64_t seed, int shard_index,
                                     int num_shards) {
  if (auto err = check_args(data, batch_size, shard_index, num_shards))
    return err;
  return batcher{data, batch_size, seed, shard_index, num_shards};
}

batcher::batcher(const dataset& data, int64_t batch_size, uint64_t seed,
                 int shard_index, int num_shards)
  : data_(&data),
    batch_size_(batch_size),
    seed_(seed),
    shard_index_(shard_index),
    num_shards_(num_shards) {
  if (auto err = check_args(data, batch_size, shard_index, num_shards))
    throw std::invalid_argument(render(err));
  shuffle();
}

int64_t batcher::shard_size(int64_t count, int shard_index, int num_shards) {
  if (num_shards < 1 || shard_index < 0 || shard_index >= count)
    return 0;
  return (count - shard_index + num_shards - 1) / num_shards;
}

void batcher::shuffle() {
  order_.clear();
  order_.reserve(static_cast<size_t>(
    shard_size(data_->count, shard_index_, num_shards_)));
  for (int64_t i = shard_index_; i < data_->count; i += num_shards_)
    order_.push_back(i);
  // Seeded from (seed, shard, epoch) only, so restore() can rebuild any
  // epoch's order without replaying the ones before it.
  auto s = mix_seed(mix_seed(seed_, static_cast<uint64_t>(shard_index_)),
                    static_cast<uint64_t>(epoch_));
  std::mt19937_64 rng{s};
  for (auto i = order_.size(); i > 1; --i)
    std::swap(order_[i - 1], order_[uniform_below(rng, i)]);
}

void batcher::next(batch& out) {
  shape_batch(*data_, batch_size_, out);
  out.noise_seed = mix_seed(
    mix_seed(mix_seed(seed_ ^ 0x6e6f697365ULL, // "noise"
                      static_cast<uint64_t>(shard_index_)),
             static_cast<uint64_t>(epoch_)),
    static_cast<uint64_t>(cursor_));
  for (int64_t row = 0; row < batch_size_; ++row)
    fill_row(*data_, order_[static_cast<size_t>(cursor_ + row)], row, out);
  cursor_ += batch_size_;
  if (cursor_ + batch_size_ > shard_size()) {
    ++epoch_;
    cursor_ = 0;
    shuffle();
  }
}

caf::error batcher::restore(const batcher_state& st) {
  auto end = steps_per_epoch() * batch_size_;
  if (st.epoch < 0 || st.cursor < 0 || st.cursor >= end
      || st.cursor % batch_size_ != 0)
    return make_error(ec::invalid_argument,
                      "batcher state (epoch " + std::to_string(st.epoch)
                        + ", cursor " + std::to_string(st.cursor)
                        + ") does not fit batches of "
                        + std::to_string(batch_size_) + " over a shard of "
                        + std::to_string(shard_size()) + " examples");
  cursor_ = st.cursor;
  if (st.epoch != epoch_) {
    epoch_ = st.epoch;
    shuffle();
  }
  return caf::none;
}

void slice(const dataset& data, int64_t begin, int64_t end, batch& out) {
  if (begin < 0 || begin >= end || end > data.count)
    throw std::out_of_range("slice [" + std::to_string(begin) + ", "
                            + std::to_string(end) + ") of " + data.source
                            + " with " + std::to_string(data.count)
                            + " examples");
  shape_batch(data, end - begin, out);
  for (int64_t i = begin; i < end; ++i)
    fill_row(data, i, i - begin, out);
}

} // namespace syncfac
