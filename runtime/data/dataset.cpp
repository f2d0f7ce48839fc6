#include "runtime/data/dataset.hpp"

#include <algorithm>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <system_error>

#include "runtime/data/content_digest.hpp"
#include "runtime/data/idx.hpp"
#include "runtime/data/seeding.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

const char* to_string(split x) noexcept {
  return x == split::train ? "train" : "test";
}

namespace {

namespace fs = std::filesystem;

std::string install_hint() {
  return std::string{"Debian's dataset-fashion-mnist package provides the "
                     "default dataset in "}
         + default_mnist_dir;
}

// Prefers the .gz file (what Debian ships), else the plain one; compression
// itself is detected from the content by read_idx.
caf::expected<std::string> find_idx(const std::string& dir,
                                    const std::string& base) {
  auto stem = (fs::path{dir} / base).string();
  for (auto candidate : {stem + ".gz", stem}) {
    std::error_code err;
    if (fs::is_regular_file(candidate, err))
      return candidate;
  }
  return make_error(ec::io_error, stem + "(.gz): not found; " + install_hint());
}

caf::error check_images(const std::string& path, const idx_array& x) {
  if (x.dims.size() == 3)
    return caf::none;
  return make_error(ec::bad_data,
                    path + ": images must be rank 3 [N, H, W], found rank "
                      + std::to_string(x.dims.size()));
}

caf::error check_labels(const std::string& path, const idx_array& x,
                        int64_t num_classes) {
  if (x.dims.size() != 1)
    return make_error(ec::bad_data,
                      path + ": labels must be rank 1 [N], found rank "
                        + std::to_string(x.dims.size()));
  auto bad = std::find_if(x.data.begin(), x.data.end(),
                          [&](uint8_t y) { return y >= num_classes; });
  if (bad == x.data.end())
    return caf::none;
  return make_error(ec::bad_data,
                    path + ": label " + std::to_string(*bad) + " at index "
                      + std::to_string(bad - x.data.begin())
                      + " is not below " + std::to_string(num_classes));
}

} // namespace

caf::expected<dataset> load_mnist(const std::string& dir, split which) {
  std::error_code fs_err;
  if (!fs::is_directory(dir, fs_err))
    return make_error(ec::io_error,
                      dir + ": no such directory; " + install_hint());
  std::string prefix = which == split::train ? "train" : "t10k";
  auto images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  if (!images_path)
    return std::move(images_path.error());
  auto labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  if (!labels_path)
    return std::move(labels_path.error());
  auto images = read_idx(*images_path);
  if (!images)
    return std::move(images.error());
  if (auto err = check_images(*images_path, *images))
    return err;
  auto labels = read_idx(*labels_path);
  if (!labels)
    return std::move(labels.error());
  dataset result;
  if (auto err = check_labels(*labels_path, *labels, result.num_classes))
    return err;
  if (images->dims[0] != labels->dims[0])
    return make_error(ec::bad_data,
                      *images_path + " has " + std::to_string(images->dims[0])
                        + " images but " + *labels_path + " has "
                        + std::to_string(labels->dims[0]) + " labels");
  result.count = images->dims[0];
  result.height = images->dims[1];
  result.width = images->dims[2];
  result.channels = 1;
  // Moved, not copied: the pixel block is the one big allocation.
  result.pixels = std::move(images->data);
  result.labels = std::move(labels->data);
  result.source = dir + " (" + to_string(which) + ")";
  result.digest = digest_of(result);
  return result;
}

namespace {

constexpr int64_t fake_side = 28;
constexpr int64_t fake_classes = 10;
// Prototypes are drawn on a coarse grid and upsampled, so they are smooth
// shapes that convolutions can pick up, not per-pixel static.
constexpr int64_t fake_cell = 4;
constexpr uint64_t fake_prototype_seed = 0x5EEDFA5Eull;

using image_bytes = std::vector<uint8_t>;

std::vector<image_bytes> fake_prototypes() {
  std::mt19937_64 rng{mix_seed(fake_prototype_seed)};
  constexpr int64_t coarse = fake_side / fake_cell;
  std::vector<image_bytes> result;
  for (int64_t k = 0; k < fake_classes; ++k) {
    image_bytes grid(coarse * coarse);
    for (auto& v : grid)
      v = static_cast<uint8_t>(rng() >> 56);
    image_bytes proto(fake_side * fake_side);
    for (int64_t y = 0; y < fake_side; ++y)
      for (int64_t x = 0; x < fake_side; ++x)
        proto[y * fake_side + x]
          = grid[(y / fake_cell) * coarse + x / fake_cell];
    result.push_back(std::move(proto));
  }
  return result;
}

// Approximately normal noise (sum of four uniform bytes; sd ~37 grey
// levels) from 32 random bits: portable, unlike std::normal_distribution.
int noise_from(uint32_t bits) {
  int sum = static_cast<int>(bits & 0xFF) + static_cast<int>((bits >> 8) & 0xFF)
            + static_cast<int>((bits >> 16) & 0xFF)
            + static_cast<int>(bits >> 24);
  return (sum - 510) / 4;
}

void fake_example(std::mt19937_64& rng, const image_bytes& proto,
                  uint8_t* out) {
  for (size_t i = 0; i < proto.size(); i += 2) {
    auto bits = rng();
    for (size_t j = 0; j < 2 && i + j < proto.size(); ++j) {
      auto noise = noise_from(static_cast<uint32_t>(bits >> (32 * j)));
      out[i + j]
        = static_cast<uint8_t>(std::clamp(proto[i + j] + noise, 0, 255));
    }
  }
}

} // namespace

caf::expected<dataset> examples_range(const dataset& data, int64_t first,
                                      int64_t count) {
  if (first < 0 || count < 0 || first > data.count
      || count > data.count - first)
    return make_error(ec::invalid_argument,
                      "examples " + std::to_string(first) + " to "
                        + std::to_string(first + count) + " of "
                        + data.source + ": it has "
                        + std::to_string(data.count));
  dataset result = data;
  result.count = count;
  auto size = data.example_size();
  auto begin = first * size;
  auto end = (first + count) * size;
  if (data.borrowed.owner != nullptr) {
    if (data.borrowed.pixels != nullptr)
      result.borrowed.pixels = data.borrowed.pixels + begin;
    if (data.borrowed.values != nullptr)
      result.borrowed.values = data.borrowed.values + begin;
    result.borrowed.elements = end - begin;
  } else if (data.float_inputs()) {
    result.values.assign(data.values.begin() + begin,
                         data.values.begin() + end);
  } else {
    result.pixels.assign(data.pixels.begin() + begin,
                         data.pixels.begin() + end);
  }
  result.labels.assign(data.labels.begin() + first,
                       data.labels.begin() + first + count);
  result.source = data.source + " (examples " + std::to_string(first)
                  + " to " + std::to_string(first + count) + ")";
  result.digest = digest_of(result);
  return result;
}

dataset make_fake_dataset(int64_t count, uint64_t seed) {
  if (count < 0)
    throw std::invalid_argument("make_fake_dataset: negative count "
                                + std::to_string(count));
  dataset result;
  result.count = count;
  result.height = fake_side;
  result.width = fake_side;
  result.channels = 1;
  result.num_classes = fake_classes;
  result.pixels.resize(count * result.example_size());
  result.labels.resize(count);
  result.source = "fake data (seed " + std::to_string(seed) + ")";
  auto protos = fake_prototypes();
  std::mt19937_64 rng{mix_seed(seed)};
  for (int64_t i = 0; i < count; ++i) {
    auto label = static_cast<uint8_t>(uniform_below(rng, fake_classes));
    result.labels[i] = label;
    fake_example(rng, protos[label], result.pixels.data()
                                       + i * result.example_size());
  }
  result.digest = digest_of(result);
  return result;
}

} // namespace syncfac
