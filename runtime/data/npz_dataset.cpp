// load_npz (runtime/data/dataset.hpp): a split of a Keras-style .npz file
// as a dataset, every array checked before it is used.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/data/dataset.hpp"
#include "runtime/data/npz.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

} // namespace

caf::expected<dataset> load_npz(const std::string& path, split which) {
  auto arrays = read_npz(path);
  if (!arrays)
    return arrays.error();
  auto suffix = which == split::train ? std::string{"train"}
                                      : std::string{"test"};
  auto x_name = "x_" + suffix;
  auto y_name = "y_" + suffix;
  auto bad = [&](const std::string& array, const std::string& what) {
    return make_error(ec::bad_data,
                      "'" + path + "' array '" + array + "': " + what);
  };
  auto find = [&](const std::string& key) -> const npy_array* {
    auto it = arrays->find(key);
    return it == arrays->end() ? nullptr : &it->second;
  };
  const auto* x = find(x_name);
  const auto* y = find(y_name);
  for (auto [array, name] : {std::pair{x, x_name}, std::pair{y, y_name}})
    if (array == nullptr) {
      std::string present;
      for (const auto& kv : *arrays)
        present += (present.empty() ? "" : ", ") + kv.first;
      return make_error(ec::bad_data,
                        "'" + path + "': no array '" + name
                          + "' (expected x_train, y_train, x_test, y_test "
                            "as Keras's mnist.npz; found "
                          + (present.empty() ? "none" : present) + ")");
    }
  if (x->shape.size() < 2 || x->shape.size() > 4)
    return bad(x_name, "shape " + shape_text(x->shape)
                         + " must be (N, D), (N, H, W) or (N, H, W, C)");
  if (y->shape.size() != 1)
    return bad(y_name, "shape " + shape_text(y->shape)
                         + " must be (N,): one integer label per example");
  if (x->shape[0] != y->shape[0])
    return bad(y_name, std::to_string(y->shape[0]) + " labels for "
                         + std::to_string(x->shape[0]) + " examples in '"
                         + x_name + "'");
  if (x->shape[0] < 1)
    return bad(x_name, "no examples");
  for (auto d : x->shape)
    if (d < 1)
      return bad(x_name, "shape " + shape_text(x->shape)
                           + " has an empty dimension");
  bool bytes = x->kind == npy_kind::unsigned_int && x->item_size == 1;
  bool floats = x->kind == npy_kind::floating && x->item_size == 4;
  // int32 (or int64) inputs are embedding_bag indices, -1 padding: they
  // travel as exact float values.
  bool indices = x->kind == npy_kind::signed_int
                 && (x->item_size == 4 || x->item_size == 8);
  if (!bytes && !floats && !indices)
    return bad(x_name, "dtype '" + x->descr
                         + "' is not supported (inputs are uint8, scaled to "
                           "[0, 1], float32, or int32 indices)");
  if (y->kind == npy_kind::floating)
    return bad(y_name, "dtype '" + y->descr
                         + "' is not an integer type (labels are integers)");
  dataset result;
  result.count = x->shape[0];
  const auto& s = x->shape;
  switch (s.size()) {
    case 2: result.height = 1, result.width = 1, result.channels = s[1]; break;
    case 3: result.height = s[1], result.width = s[2], result.channels = 1; break;
    default: result.height = s[1], result.width = s[2], result.channels = s[3];
  }
  result.labels.resize(static_cast<size_t>(result.count));
  int64_t top = 0;
  for (int64_t i = 0; i < result.count; ++i) {
    auto label = y->as_integer(i);
    if (label < 0 || label > 255)
      return bad(y_name, "label " + std::to_string(label) + " at index "
                           + std::to_string(i)
                           + " is outside [0, 255] (at most 256 classes)");
    top = std::max(top, label);
    result.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(label);
  }
  result.num_classes = std::max<int64_t>(top + 1, 2);
  if (bytes) {
    result.pixels = x->data;
  } else if (indices) {
    result.values.resize(static_cast<size_t>(x->element_count()));
    for (int64_t i = 0; i < x->element_count(); ++i) {
      auto v = x->as_integer(i);
      if (v < -1 || v >= (int64_t{1} << 24))
        return bad(x_name, "index " + std::to_string(v) + " at flat index "
                             + std::to_string(i)
                             + " is outside [-1, 2^24) (-1 pads a bag)");
      result.values[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  } else {
    result.values.resize(static_cast<size_t>(x->element_count()));
    std::memcpy(result.values.data(), x->data.data(), x->data.size());
    auto nan = std::find_if(result.values.begin(), result.values.end(),
                            [](float v) { return !std::isfinite(v); });
    if (nan != result.values.end())
      return bad(x_name, "value " + std::to_string(*nan) + " at flat index "
                           + std::to_string(nan - result.values.begin())
                           + " is not finite");
  }
  result.source = path + " (" + to_string(which) + ")";
  return result;
}

} // namespace syncfac
