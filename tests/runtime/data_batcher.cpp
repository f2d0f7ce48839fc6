#define BOOST_TEST_MODULE data_batcher
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "data_fixtures.hpp"

#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// A dataset whose 1x2x1 images spell their own index (low byte, high byte),
// so a batch tells which examples it holds.
dataset indexed_dataset(int64_t count) {
  dataset result;
  result.count = count;
  result.height = 1;
  result.width = 2;
  result.channels = 1;
  result.source = "indexed";
  for (int64_t i = 0; i < count; ++i) {
    result.pixels.push_back(static_cast<uint8_t>(i & 0xFF));
    result.pixels.push_back(static_cast<uint8_t>(i >> 8));
    result.labels.push_back(static_cast<uint8_t>(i % 10));
  }
  return result;
}

std::vector<int64_t> indices_of(const batch& b) {
  std::vector<int64_t> result;
  for (int64_t row = 0; row < b.images.dim(0); ++row) {
    auto lo = std::lround(b.images[2 * row] * 255.0f);
    auto hi = std::lround(b.images[2 * row + 1] * 255.0f);
    result.push_back(lo + 256 * hi);
  }
  return result;
}

// The examples of the next `steps` batches, in order.
std::vector<int64_t> take(batcher& src, int64_t steps) {
  std::vector<int64_t> result;
  batch b;
  for (int64_t i = 0; i < steps; ++i) {
    src.next(b);
    auto idx = indices_of(b);
    result.insert(result.end(), idx.begin(), idx.end());
  }
  return result;
}

void check_invalid(const caf::expected<batcher>& x, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(!x, "accepted, expected: " << what);
  BOOST_TEST_MESSAGE(render(x.error()));
  BOOST_CHECK(has_code(x.error(), ec::invalid_argument));
  BOOST_CHECK_MESSAGE(mentions(x.error(), what), render(x.error()));
}

} // namespace

BOOST_AUTO_TEST_CASE(shards_are_disjoint_and_cover_the_set) {
  auto data = indexed_dataset(1003);
  const int shards = 4;
  std::vector<int64_t> all;
  for (int k = 0; k < shards; ++k) {
    auto src = batcher::make(data, 1, 42, k, shards);
    BOOST_REQUIRE_MESSAGE(src, why(src));
    BOOST_CHECK_EQUAL(src->shard_size(), k < 3 ? 251 : 250);
    BOOST_CHECK_EQUAL(src->shard_size(), batcher::shard_size(1003, k, shards));
    auto seen = take(*src, src->steps_per_epoch());
    for (auto i : seen)
      BOOST_CHECK_EQUAL(i % shards, k);
    all.insert(all.end(), seen.begin(), seen.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(1003);
  for (int64_t i = 0; i < 1003; ++i)
    expected[i] = i;
  BOOST_CHECK(all == expected);
}

BOOST_AUTO_TEST_CASE(epochs_drop_the_partial_batch_and_reshuffle) {
  auto data = indexed_dataset(1003);
  batcher src{data, 7, 5, 1, 4}; // shard of 251: 35 batches, 6 left over
  BOOST_CHECK_EQUAL(src.steps_per_epoch(), 35);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    BOOST_CHECK_EQUAL(src.epoch(), e);
    epochs.push_back(take(src, 35));
    std::set<int64_t> distinct(epochs.back().begin(), epochs.back().end());
    BOOST_CHECK_EQUAL(distinct.size(), 245u);
  }
  BOOST_CHECK_EQUAL(src.epoch(), 3);
  BOOST_CHECK(epochs[0] != epochs[1]);
  BOOST_CHECK(epochs[1] != epochs[2]);
  // Deterministic: the same arguments give the same epochs.
  batcher again{data, 7, 5, 1, 4};
  for (int e = 0; e < 3; ++e)
    BOOST_CHECK(take(again, 35) == epochs[e]);
  batcher other_seed{data, 7, 6, 1, 4};
  BOOST_CHECK(take(other_seed, 35) != epochs[0]);
}

BOOST_AUTO_TEST_CASE(batches_scale_pixels_and_copy_labels) {
  auto data = make_fake_dataset(64, 3);
  batcher src{data, 16, 1};
  batch b;
  src.next(b);
  BOOST_CHECK(b.images.shape() == (tensor_shape{16, 28, 28, 1}));
  BOOST_REQUIRE_EQUAL(b.labels.size(), 16u);
  // Find each row's example by its pixels, then compare exactly.
  for (int64_t row = 0; row < 16; ++row) {
    const float* got = b.images.data() + row * 784;
    int64_t match = -1;
    for (int64_t i = 0; i < data.count && match < 0; ++i)
      if (std::equal(got, got + 784, data.image(i), [](float x, uint8_t y) {
            return x == static_cast<float>(y) / 255.0f;
          }))
        match = i;
    BOOST_REQUIRE_GE(match, 0);
    BOOST_CHECK_EQUAL(b.labels[row], static_cast<int32_t>(data.labels[match]));
  }
  auto [lo, hi] = std::minmax_element(b.images.values().begin(),
                                      b.images.values().end());
  BOOST_CHECK_GE(*lo, 0.0f);
  BOOST_CHECK_LE(*hi, 1.0f);
}

BOOST_AUTO_TEST_CASE(slice_gives_examples_in_order) {
  auto data = make_fake_dataset(50, 4);
  batch b;
  slice(data, 45, 50, b);
  BOOST_CHECK(b.images.shape() == (tensor_shape{5, 28, 28, 1}));
  for (int64_t row = 0; row < 5; ++row) {
    BOOST_CHECK_EQUAL(b.labels[row], data.labels[45 + row]);
    for (int64_t j = 0; j < 784; ++j)
      BOOST_REQUIRE_EQUAL(b.images[row * 784 + j],
                          static_cast<float>(data.image(45 + row)[j]) / 255.0f);
  }
  // Storage is reused: a smaller slice reshapes the same batch.
  slice(data, 0, 2, b);
  BOOST_CHECK(b.images.shape() == (tensor_shape{2, 28, 28, 1}));
  BOOST_CHECK_EQUAL(b.labels.size(), 2u);
  BOOST_CHECK_THROW(slice(data, 3, 3, b), std::out_of_range);
  BOOST_CHECK_THROW(slice(data, -1, 3, b), std::out_of_range);
  BOOST_CHECK_THROW(slice(data, 40, 51, b), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(restore_reproduces_the_next_batch) {
  auto data = indexed_dataset(300);
  batcher src{data, 8, 11, 0, 2}; // 150 examples: 18 batches per epoch
  take(src, 25);                 // into the second epoch
  auto saved = src.state();
  BOOST_CHECK_EQUAL(saved.epoch, 1);
  BOOST_CHECK_EQUAL(saved.cursor, 7 * 8);
  auto expected = take(src, 20); // across the next epoch boundary too
  batcher resumed{data, 8, 11, 0, 2};
  BOOST_REQUIRE(!resumed.restore(saved));
  BOOST_CHECK(resumed.state() == saved);
  BOOST_CHECK_EQUAL(resumed.epoch(), 1);
  BOOST_CHECK(take(resumed, 20) == expected);
  BOOST_CHECK(resumed.state() == src.state());
}

BOOST_AUTO_TEST_CASE(state_survives_caf_serialisation) {
  batcher_state st{3, 96};
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  BOOST_REQUIRE(!sink(st));
  batcher_state back;
  caf::binary_deserializer source{nullptr, buf};
  BOOST_REQUIRE(!source(back));
  BOOST_CHECK(back == st);
}

BOOST_AUTO_TEST_CASE(restore_rejects_states_that_do_not_fit) {
  auto data = indexed_dataset(100);
  batcher src{data, 10, 1};
  take(src, 3);
  auto before = src.state();
  for (auto bad : {batcher_state{-1, 0}, batcher_state{0, -10},
                   batcher_state{0, 5}, batcher_state{0, 100},
                   batcher_state{2, 110}}) {
    auto err = src.restore(bad);
    BOOST_CHECK_MESSAGE(has_code(err, ec::invalid_argument), render(err));
    BOOST_CHECK(src.state() == before);
  }
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_rejected) {
  auto data = indexed_dataset(10);
  check_invalid(batcher::make(data, 0, 1), "batch size must be at least 1");
  check_invalid(batcher::make(data, -4, 1), "got -4");
  check_invalid(batcher::make(data, 1, 1, 0, 0), "number of shards");
  check_invalid(batcher::make(data, 1, 1, -1, 2), "shard index -1");
  check_invalid(batcher::make(data, 1, 1, 2, 2), "is not in [0, 2)");
  // Shard 3 of 4 holds examples 3 and 7 only.
  check_invalid(batcher::make(data, 3, 1, 3, 4),
                "has 2 examples, fewer than one batch of 3");
  check_invalid(batcher::make(data, 11, 1), "fewer than one batch");
  check_invalid(batcher::make(data, 1, 1, 10, 11), "has 0 examples");
  auto broken = data;
  broken.pixels.pop_back();
  check_invalid(batcher::make(broken, 1, 1), "inconsistent");
  BOOST_CHECK_THROW(batcher(data, 0, 1), std::invalid_argument);
  BOOST_CHECK(batcher::make(data, 10, 1));
  BOOST_CHECK(batcher::make(data, 2, 1, 3, 4));
}
