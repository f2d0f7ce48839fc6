#pragma once

// An in-memory image classification set. Pixels stay bytes (NHWC) and are
// scaled to floats per batch: Fashion-MNIST's 60000 training images take
// 47 MB this way instead of 188 MB, which keeps a worker's peak RSS far below
// the ~500 MiB of the PyTorch baseline.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/data/npy.hpp"

namespace syncfac {

#ifdef SYNCFAC_DEFAULT_DATA_DIR
constexpr const char* default_mnist_dir = SYNCFAC_DEFAULT_DATA_DIR;
#else
constexpr const char* default_mnist_dir = "/usr/share/datasets/fashion-mnist";
#endif

struct dataset {
  int64_t count = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 1;
  int64_t num_classes = 10;
  /// count x height x width x channels bytes, NHWC, scaled to [0, 1] per
  /// batch (empty when `values` holds the examples).
  std::vector<uint8_t> pixels;
  /// Float inputs taken as they are (a .npz file's float32 x_train):
  /// count x example_size() values; empty for byte examples.
  std::vector<float> values;
  /// The examples when the set borrows them instead (a NumPy array's
  /// buffer handed over by the Python module, docs/python.md): bytes or
  /// floats as `pixels` or `values` would hold them, kept alive by
  /// `owner`; pixels and values stay empty then. Read the examples
  /// through pixel_data() and value_data(), which see either.
  struct borrowed_examples {
    const uint8_t* pixels = nullptr;
    const float* values = nullptr;
    /// Elements of all examples (count x example_size()).
    int64_t elements = 0;
    std::shared_ptr<const void> owner;
  };
  borrowed_examples borrowed;
  /// count labels in [0, num_classes).
  std::vector<uint8_t> labels;
  /// Where the examples came from (a path, or "fake data (seed 7)"), for
  /// messages.
  std::string source;
  /// digest_of (runtime/data/content_digest.hpp) of every example and
  /// label, set by the loader that made the set: the nodes of a cluster
  /// compare it (actors/run_fingerprint).
  uint64_t digest = 0;

  /// Bytes per example: height * width * channels.
  int64_t example_size() const noexcept {
    return height * width * channels;
  }

  /// Whether the examples are floats (values) rather than bytes (pixels).
  bool float_inputs() const noexcept {
    return !values.empty() || borrowed.values != nullptr;
  }

  /// Elements of all examples: pixels or values.
  int64_t element_count() const noexcept {
    if (borrowed.pixels != nullptr || borrowed.values != nullptr)
      return borrowed.elements;
    return static_cast<int64_t>(float_inputs() ? values.size()
                                               : pixels.size());
  }

  /// The byte examples, owned or borrowed (element_count() of them).
  const uint8_t* pixel_data() const noexcept {
    return borrowed.pixels != nullptr ? borrowed.pixels : pixels.data();
  }

  /// The float examples, owned or borrowed (element_count() of them).
  const float* value_data() const noexcept {
    return borrowed.values != nullptr ? borrowed.values : values.data();
  }

  /// The first pixel of example i.
  const uint8_t* image(int64_t i) const noexcept {
    return pixel_data() + i * example_size();
  }
};

enum class split : uint8_t { train, test };

/// Examples [first, first + count) of `data` as a set of their own: the
/// fixed subset an evaluation measures, or a training set with examples
/// held out for validation. Owned examples are copied; borrowed ones stay
/// borrowed (the same owner keeps them alive). The source names the range
/// and the digest is the range's own. A range outside the set is
/// ec::invalid_argument naming both.
caf::expected<dataset> examples_range(const dataset& data, int64_t first,
                                      int64_t count);

/// "train" / "test".
const char* to_string(split x) noexcept;

/// Loads an (Fashion-)MNIST split from `dir`: train-images-idx3-ubyte and
/// train-labels-idx1-ubyte (or the t10k-* pair for the test split), each
/// either gzip-compressed with a .gz suffix or plain. Images must be rank 3
/// [N, H, W], labels rank 1 [N] with the same N and values below 10.
/// A missing directory or file is ec::io_error; a malformed one ec::bad_data.
caf::expected<dataset> load_mnist(const std::string& dir, split which);

/// A synthetic, deterministic stand-in for Fashion-MNIST (the seeds'
/// use_fake_data): `count` 28x28x1 images in 10 classes, each a class
/// prototype plus per-example noise. The prototypes are the same for every
/// seed, so a model trained on one seed's examples is meaningfully evaluated
/// on another's; the seed picks the examples. Same (count, seed) gives
/// identical bytes on every platform. count >= 0 (throws
/// std::invalid_argument otherwise: a programming error).
dataset make_fake_dataset(int64_t count, uint64_t seed);

/// What the integers of an .npz file's inputs are: pixels for a dense or
/// conv model, row indices for a model whose first layer is embedding_bag
/// (runtime/model_fit.hpp's npz_inputs_for says which).
enum class npz_inputs : uint8_t { pixels, indices };

/// The `which` split of a NumPy .npz file laid out as Keras's mnist.npz:
/// arrays x_train, y_train, x_test, y_test. x is float32 (taken as it is,
/// finite) or an integer type (int8..int64, uint8..uint64), of shape
/// [N, D], [N, H, W] or [N, H, W, C]. Integers are pixels when `inputs`
/// says so: each in 0..255, scaled to [0, 1] like IDX pixels (numpy's
/// default int64 included), a value outside refused by name; or indices
/// (-1 pads a bag; the offsets layout, docs/models.md) for an
/// embedding_bag model. y holds N integer labels in [0, 255]. num_classes
/// is the largest label of the split plus one. Every problem is
/// ec::bad_data naming the file, the array and what is wrong (ec::io_error
/// for a file that cannot be read). docs/models.md, "Data".
caf::expected<dataset> load_npz(const std::string& path, split which,
                                npz_inputs inputs);

/// How the messages about a split's two arrays name them: each begins
/// with `prefix` and the array's name ("'data.npz' array 'x_train': ...",
/// or "array 'data[0]': ..." for the Python module's arguments).
struct array_names {
  std::string prefix;
  std::string x;
  std::string y;
  /// The dataset's source (for later messages and the summary).
  std::string source;
};

/// The split of inputs `x` and labels `y` (the rows layout of load_npz:
/// x of shape [N, D], [N, H, W] or [N, H, W, C], y [N] integers), checked
/// as load_npz checks them, with its messages (ec::bad_data). With an
/// `owner`, inputs the runtime takes as they are (uint8 pixels, float32
/// values) are borrowed from x's memory, which `owner` keeps alive (and
/// must not change while the set is in use); everything else is
/// converted into the set's own memory, as without one. Labels are
/// always the set's own.
caf::expected<dataset> dataset_from_arrays(const npy_view& x,
                                           const npy_view& y,
                                           const array_names& names,
                                           npz_inputs inputs,
                                           std::shared_ptr<const void> owner
                                           = nullptr);

} // namespace syncfac
