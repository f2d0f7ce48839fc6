#define BOOST_TEST_MODULE data_dataset
#include <boost/test/unit_test.hpp>

#include <array>
#include <filesystem>

#include "data_fixtures.hpp"

#include "runtime/data/content_digest.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/idx.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

struct fixture_split {
  idx_array images;
  idx_array labels;
};

fixture_split make_split(uint32_t n, uint32_t h, uint32_t w, uint8_t salt) {
  fixture_split result;
  result.images.dims = {n, h, w};
  result.images.data = pattern(size_t{n} * h * w, salt);
  result.labels.dims = {n};
  result.labels.data.resize(n);
  for (uint32_t i = 0; i < n; ++i)
    result.labels.data[i] = static_cast<uint8_t>((i * 3 + salt) % 10);
  return result;
}

void write_split(const temp_dir& dir, const std::string& prefix,
                 const fixture_split& x, bool gzip) {
  auto suffix = std::string{gzip ? ".gz" : ""};
  BOOST_REQUIRE(!write_idx(dir.file(prefix + "-images-idx3-ubyte" + suffix),
                           x.images, gzip));
  BOOST_REQUIRE(!write_idx(dir.file(prefix + "-labels-idx1-ubyte" + suffix),
                           x.labels, gzip));
}

caf::error load_error(const std::string& dir, split which) {
  auto x = load_mnist(dir, which);
  BOOST_REQUIRE_MESSAGE(!x, dir << " loaded but should fail");
  BOOST_TEST_MESSAGE(render(x.error()));
  return x.error();
}

} // namespace

BOOST_AUTO_TEST_CASE(loads_gzip_and_plain_fixtures) {
  temp_dir dir;
  auto train = make_split(12, 5, 4, 1);
  auto test = make_split(7, 5, 4, 2);
  write_split(dir, "train", train, true);
  write_split(dir, "t10k", test, false);
  for (auto [which, ref] : {std::pair{split::train, &train},
                            std::pair{split::test, &test}}) {
    auto x = load_mnist(dir.path(), which);
    BOOST_REQUIRE_MESSAGE(x, why(x));
    BOOST_CHECK_EQUAL(x->count, ref->images.dims[0]);
    BOOST_CHECK_EQUAL(x->height, 5);
    BOOST_CHECK_EQUAL(x->width, 4);
    BOOST_CHECK_EQUAL(x->channels, 1);
    BOOST_CHECK_EQUAL(x->num_classes, 10);
    BOOST_CHECK_EQUAL(x->example_size(), 20);
    BOOST_CHECK(x->pixels == ref->images.data);
    BOOST_CHECK(x->labels == ref->labels.data);
    BOOST_CHECK_NE(x->source.find(dir.path()), std::string::npos);
    BOOST_CHECK_NE(x->source.find(to_string(which)), std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(mismatched_counts) {
  temp_dir dir;
  auto x = make_split(10, 3, 3, 0);
  x.labels.dims = {9};
  x.labels.data.resize(9);
  write_split(dir, "train", x, true);
  auto err = load_error(dir.path(), split::train);
  BOOST_CHECK(has_code(err, ec::bad_data));
  BOOST_CHECK(mentions(err, "has 10 images"));
  BOOST_CHECK(mentions(err, "has 9 labels"));
  BOOST_CHECK(mentions(err, dir.file("train-labels-idx1-ubyte.gz")));
}

BOOST_AUTO_TEST_CASE(label_out_of_range) {
  temp_dir dir;
  auto x = make_split(10, 3, 3, 0);
  x.labels.data[3] = 10;
  write_split(dir, "t10k", x, false);
  auto err = load_error(dir.path(), split::test);
  BOOST_CHECK(has_code(err, ec::bad_data));
  BOOST_CHECK(mentions(err, dir.file("t10k-labels-idx1-ubyte")));
  BOOST_CHECK(mentions(err, "label 10 at index 3 is not below 10"));
}

BOOST_AUTO_TEST_CASE(wrong_ranks) {
  temp_dir dir;
  auto x = make_split(6, 2, 2, 0);
  x.images.dims = {6, 4};
  write_split(dir, "train", x, false);
  auto err = load_error(dir.path(), split::train);
  BOOST_CHECK(has_code(err, ec::bad_data));
  BOOST_CHECK(mentions(err, "images must be rank 3"));
  x = make_split(6, 2, 2, 0);
  x.labels.dims = {3, 2};
  write_split(dir, "train", x, false);
  err = load_error(dir.path(), split::train);
  BOOST_CHECK(mentions(err, "labels must be rank 1"));
}

BOOST_AUTO_TEST_CASE(corrupt_file_errors_pass_through) {
  temp_dir dir;
  write_split(dir, "train", make_split(4, 2, 2, 0), false);
  auto images = dir.file("train-images-idx3-ubyte");
  auto raw = read_bytes(images);
  raw.pop_back();
  write_bytes(images, raw);
  auto err = load_error(dir.path(), split::train);
  BOOST_CHECK(has_code(err, ec::bad_data));
  BOOST_CHECK(mentions(err, images + ": truncated"));
}

BOOST_AUTO_TEST_CASE(missing_directory_and_files) {
  temp_dir dir;
  auto nowhere = dir.file("nowhere");
  auto err = load_error(nowhere, split::train);
  BOOST_CHECK(has_code(err, ec::io_error));
  BOOST_CHECK(mentions(err, nowhere + ": no such directory"));
  BOOST_CHECK(mentions(err, "dataset-fashion-mnist"));
  // Only the images of the training split exist.
  auto x = make_split(4, 2, 2, 0);
  BOOST_REQUIRE(!write_idx(dir.file("train-images-idx3-ubyte.gz"), x.images,
                           true));
  err = load_error(dir.path(), split::train);
  BOOST_CHECK(has_code(err, ec::io_error));
  BOOST_CHECK(mentions(err, dir.file("train-labels-idx1-ubyte") + "(.gz)"));
  BOOST_CHECK(mentions(err, "dataset-fashion-mnist"));
  err = load_error(dir.path(), split::test);
  BOOST_CHECK(mentions(err, dir.file("t10k-images-idx3-ubyte")));
}

BOOST_AUTO_TEST_CASE(real_fashion_mnist) {
  BOOST_REQUIRE_MESSAGE(std::filesystem::is_directory(default_mnist_dir),
                        default_mnist_dir << " does not exist (Debian's "
                          "dataset-fashion-mnist; scripts/install-deps.sh "
                          "installs it)");
  for (auto [which, n] :
       {std::pair{split::train, 60000}, std::pair{split::test, 10000}}) {
    auto x = load_mnist(default_mnist_dir, which);
    BOOST_REQUIRE_MESSAGE(x, why(x));
    BOOST_CHECK_EQUAL(x->count, n);
    BOOST_CHECK_EQUAL(x->height, 28);
    BOOST_CHECK_EQUAL(x->width, 28);
    BOOST_CHECK_EQUAL(x->pixels.size(), size_t(n) * 28 * 28);
    // Fashion-MNIST is balanced: n / 10 examples of every class.
    std::array<int, 10> per_class{};
    for (auto y : x->labels)
      ++per_class.at(y);
    for (auto c : per_class)
      BOOST_CHECK_EQUAL(c, n / 10);
  }
}

BOOST_AUTO_TEST_CASE(fake_data_shape_and_determinism) {
  auto a = make_fake_dataset(500, 7);
  auto b = make_fake_dataset(500, 7);
  auto c = make_fake_dataset(500, 8);
  BOOST_CHECK_EQUAL(a.count, 500);
  BOOST_CHECK_EQUAL(a.height, 28);
  BOOST_CHECK_EQUAL(a.width, 28);
  BOOST_CHECK_EQUAL(a.channels, 1);
  BOOST_CHECK_EQUAL(a.num_classes, 10);
  BOOST_CHECK_EQUAL(a.pixels.size(), 500u * 784);
  BOOST_CHECK_EQUAL(a.labels.size(), 500u);
  BOOST_CHECK(a.pixels == b.pixels);
  BOOST_CHECK(a.labels == b.labels);
  BOOST_CHECK(a.pixels != c.pixels);
  BOOST_CHECK(a.labels != c.labels);
  // A prefix of a larger set is the smaller set: examples are drawn in turn.
  auto longer = make_fake_dataset(600, 7);
  BOOST_CHECK(std::equal(a.pixels.begin(), a.pixels.end(),
                         longer.pixels.begin()));
  std::array<int, 10> per_class{};
  for (auto y : a.labels)
    ++per_class.at(y);
  for (auto n : per_class)
    BOOST_CHECK_GT(n, 20);
  BOOST_CHECK_EQUAL(make_fake_dataset(0, 1).count, 0);
  BOOST_CHECK_THROW(make_fake_dataset(-1, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(fake_data_is_learnable) {
  // Class means fitted on one seed classify another seed's examples: the
  // classes carry signal that also generalises, so training loss can fall
  // and evaluation on a separately seeded fake test set means something.
  auto train = make_fake_dataset(2000, 1);
  auto test = make_fake_dataset(1000, 2);
  const int64_t n = train.example_size();
  std::vector<std::vector<double>> mean(10, std::vector<double>(n, 0.0));
  std::vector<int> count(10, 0);
  for (int64_t i = 0; i < train.count; ++i) {
    ++count[train.labels[i]];
    for (int64_t j = 0; j < n; ++j)
      mean[train.labels[i]][j] += train.image(i)[j];
  }
  for (int k = 0; k < 10; ++k)
    for (auto& v : mean[k])
      v /= std::max(count[k], 1);
  int correct = 0;
  for (int64_t i = 0; i < test.count; ++i) {
    int best = 0;
    double best_dist = 1e300;
    for (int k = 0; k < 10; ++k) {
      double dist = 0;
      for (int64_t j = 0; j < n; ++j) {
        auto d = test.image(i)[j] - mean[k][j];
        dist += d * d;
      }
      if (dist < best_dist) {
        best_dist = dist;
        best = k;
      }
    }
    correct += best == test.labels[i];
  }
  BOOST_TEST_MESSAGE("nearest-mean accuracy on fake data: " << correct
                                                            << " / 1000");
  BOOST_CHECK_GT(correct, 900);
}

// The nodes compare a digest of the whole data set (docs/distributed.md):
// the same bytes in any pieces give the same digest, one changed byte
// anywhere another, and every loader stores the digest of what it made.
BOOST_AUTO_TEST_CASE(content_digest_streams_and_covers_every_byte) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  content_digest whole;
  whole.add(bytes.data(), bytes.size());
  for (size_t piece : {1, 3, 31, 32, 33, 100, 999}) {
    content_digest pieces;
    for (size_t at = 0; at < bytes.size(); at += piece)
      pieces.add(bytes.data() + at, std::min(piece, bytes.size() - at));
    BOOST_TEST(pieces.value() == whole.value(), "pieces of " << piece);
  }
  for (size_t at : {0, 31, 32, 500, 968, 999}) {
    auto changed = bytes;
    changed[at] ^= 1;
    content_digest other;
    other.add(changed.data(), changed.size());
    BOOST_TEST(other.value() != whole.value(), "byte " << at);
  }
  content_digest shorter;
  shorter.add(bytes.data(), bytes.size() - 1);
  BOOST_TEST(shorter.value() != whole.value());

  auto fake = make_fake_dataset(200, 3);
  BOOST_TEST(fake.digest == digest_of(fake));
  BOOST_TEST(fake.digest != 0);
  auto last = fake;
  last.pixels.back() ^= 1;
  BOOST_TEST(digest_of(last) != fake.digest);
  auto label = fake;
  label.labels.back() = static_cast<uint8_t>((label.labels.back() + 1) % 10);
  BOOST_TEST(digest_of(label) != fake.digest);
  BOOST_TEST(make_fake_dataset(200, 4).digest != fake.digest);
}

// examples_range: the examples and labels of the range, in order, for
// owned bytes, owned floats and borrowed examples alike; its own digest
// and a source naming the range; a range outside the set refused by name.
BOOST_AUTO_TEST_CASE(examples_range_takes_the_range_and_nothing_else) {
  auto fake = make_fake_dataset(50, 5);
  auto size = fake.example_size();
  auto mid = examples_range(fake, 10, 15);
  BOOST_REQUIRE(mid);
  BOOST_TEST(mid->count == 15);
  BOOST_TEST(mid->element_count() == 15 * size);
  BOOST_TEST(std::equal(mid->pixel_data(), mid->pixel_data() + 15 * size,
                        fake.pixel_data() + 10 * size));
  BOOST_TEST(std::equal(mid->labels.begin(), mid->labels.end(),
                        fake.labels.begin() + 10));
  BOOST_TEST(mid->digest == digest_of(*mid));
  BOOST_TEST(mid->digest != fake.digest);
  BOOST_TEST(mid->source.find("examples 10 to 25") != std::string::npos,
             mid->source);
  auto whole = examples_range(fake, 0, 50);
  BOOST_REQUIRE(whole);
  BOOST_TEST(whole->digest == fake.digest);
  BOOST_REQUIRE(examples_range(fake, 50, 0));
  BOOST_TEST(examples_range(fake, 50, 0)->count == 0);

  auto floats = fake;
  floats.pixels.clear();
  floats.values.resize(static_cast<size_t>(50 * size));
  for (size_t i = 0; i < floats.values.size(); ++i)
    floats.values[i] = static_cast<float>(i);
  auto tail = examples_range(floats, 40, 10);
  BOOST_REQUIRE(tail);
  BOOST_TEST(tail->values.size() == static_cast<size_t>(10 * size));
  BOOST_TEST(tail->values.front() == static_cast<float>(40 * size));
  BOOST_TEST(tail->values.back() == static_cast<float>(50 * size - 1));

  auto owner = std::make_shared<std::vector<float>>(floats.values);
  auto borrowing = floats;
  borrowing.values.clear();
  borrowing.borrowed.values = owner->data();
  borrowing.borrowed.elements = static_cast<int64_t>(owner->size());
  borrowing.borrowed.owner = owner;
  auto lent = examples_range(borrowing, 40, 10);
  BOOST_REQUIRE(lent);
  BOOST_TEST(lent->values.empty());
  BOOST_TEST(lent->value_data() == owner->data() + 40 * size);
  BOOST_TEST(lent->element_count() == 10 * size);
  BOOST_TEST(lent->digest == tail->digest);

  for (auto [first, count] : {std::pair<int64_t, int64_t>{45, 6},
                              {-1, 3},
                              {51, 0},
                              {0, -2}}) {
    auto bad = examples_range(fake, first, count);
    BOOST_REQUIRE(!bad);
    auto why = render(bad.error());
    BOOST_TEST(why.find("of " + fake.source) != std::string::npos, why);
    BOOST_TEST(why.find("it has 50") != std::string::npos, why);
  }
}
