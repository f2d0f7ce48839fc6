// load_npz (runtime/data/dataset.hpp): a split of a Keras-style .npz file
// as a dataset, every array checked before it is used. Inputs come as
// x_<split> (any rank), or, for embedding_bag, as bags of indices:
// x_<split>_indices (int32, flat) with x_<split>_offsets (N + 1 entries,
// bag i = indices[offsets[i]:offsets[i+1]]), padded here to the longest
// bag of the file with -1 (docs/models.md, "Data").

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "runtime/data/content_digest.hpp"
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

using npz_arrays = std::map<std::string, npy_array>;

caf::error bad_array(const std::string& path, const std::string& array,
                     const std::string& what) {
  return make_error(ec::bad_data,
                    "'" + path + "' array '" + array + "': " + what);
}

const npy_array* find_array(const npz_arrays& arrays, const std::string& key) {
  auto it = arrays.find(key);
  return it == arrays.end() ? nullptr : &it->second;
}

/// One split's bags in the offsets layout, checked: indices int32 of rank
/// 1, each in [0, 2^24); offsets int32 or int64 of rank 1, at least two,
/// first 0, non-decreasing, last == len(indices).
struct offset_bags {
  const npy_array* indices = nullptr;
  const npy_array* offsets = nullptr;
  int64_t count = 0;
  int64_t longest = 0;

  int64_t begin(int64_t i) const noexcept {
    return offsets->as_integer(i);
  }
  int64_t end(int64_t i) const noexcept {
    return offsets->as_integer(i + 1);
  }
};

caf::expected<offset_bags> check_bags(const std::string& path,
                                      const npz_arrays& arrays,
                                      const std::string& x_name) {
  auto i_name = x_name + "_indices";
  auto o_name = x_name + "_offsets";
  auto bad = [&](const std::string& array, const std::string& what) {
    return bad_array(path, array, what);
  };
  offset_bags bags;
  bags.indices = find_array(arrays, i_name);
  bags.offsets = find_array(arrays, o_name);
  if (bags.offsets == nullptr)
    return make_error(ec::bad_data, "'" + path + "': array '" + i_name
                                      + "' without '" + o_name
                                      + "' (bags of indices need both)");
  const auto& idx = *bags.indices;
  const auto& off = *bags.offsets;
  if (idx.shape.size() != 1)
    return bad(i_name, "shape " + shape_text(idx.shape)
                         + " must be (M,): every bag's indices, one after "
                           "the other");
  if (idx.kind != npy_kind::signed_int || idx.item_size != 4)
    return bad(i_name, "dtype '" + idx.descr + "' must be int32 ('<i4')");
  if (off.shape.size() != 1)
    return bad(o_name, "shape " + shape_text(off.shape)
                         + " must be (N + 1,): where each bag begins, then "
                           "the end");
  if (off.kind == npy_kind::floating || off.item_size < 4)
    return bad(o_name, "dtype '" + off.descr
                         + "' must be int32 or int64 ('<i4', '<i8')");
  if (off.shape[0] < 2)
    return bad(o_name, std::to_string(off.shape[0])
                         + " entries: at least 2 are needed (N + 1 for N "
                           "bags)");
  bags.count = off.shape[0] - 1;
  if (off.as_integer(0) != 0)
    return bad(o_name, "the first offset is " + std::to_string(off.as_integer(0))
                         + ", not 0");
  for (int64_t i = 0; i < bags.count; ++i) {
    if (bags.end(i) < bags.begin(i))
      return bad(o_name, "offsets decrease at index " + std::to_string(i + 1)
                           + " (" + std::to_string(bags.begin(i)) + " then "
                           + std::to_string(bags.end(i))
                           + "): they must not decrease");
    bags.longest = std::max(bags.longest, bags.end(i) - bags.begin(i));
  }
  if (bags.end(bags.count - 1) != idx.shape[0])
    return bad(o_name, "the last offset is "
                         + std::to_string(bags.end(bags.count - 1))
                         + ", but '" + i_name + "' has "
                         + std::to_string(idx.shape[0])
                         + " indices (they must be equal)");
  for (int64_t k = 0; k < idx.shape[0]; ++k) {
    auto v = idx.as_integer(k);
    if (v < 0 || v >= (int64_t{1} << 24))
      return bad(i_name, "index " + std::to_string(v) + " at position "
                           + std::to_string(k) + " is outside [0, 2^24)");
  }
  if (bags.longest < 1)
    return bad(o_name, "every bag is empty");
  if (bags.longest * bags.count > max_npy_elements)
    return bad(o_name, std::to_string(bags.count) + " bags of up to "
                         + std::to_string(bags.longest)
                         + " indices are too many once padded (at most "
                         + std::to_string(max_npy_elements) + ")");
  return bags;
}

/// The width of every padded bag: the longest bag of the file's splits in
/// the offsets layout, so that train and test fit the same model.
caf::expected<int64_t> bag_width(const std::string& path,
                                 const npz_arrays& arrays) {
  int64_t width = 0;
  for (auto name : {"x_train", "x_test"})
    if (find_array(arrays, std::string{name} + "_indices") != nullptr) {
      auto bags = check_bags(path, arrays, name);
      if (!bags)
        return bags.error();
      width = std::max(width, bags->longest);
    }
  return width;
}

/// "<prefix>array '<array>': <what>" (ec::bad_data).
caf::error bad_named(const array_names& names, const std::string& array,
                     const std::string& what) {
  return make_error(ec::bad_data,
                    names.prefix + "array '" + array + "': " + what);
}

/// Labels are integers.
caf::error check_label_dtype(const npy_view& y, const array_names& names) {
  if (y.kind == npy_kind::floating)
    return bad_named(names, names.y,
                     "dtype '" + y.descr
                       + "' is not an integer type (labels are integers)");
  return caf::none;
}

/// `result`'s labels from y (count of them, each in [0, 255]) and its
/// classes: the largest label plus one, at least 2.
caf::error fill_labels(dataset& result, const npy_view& y,
                       const array_names& names) {
  result.labels.resize(static_cast<size_t>(result.count));
  int64_t top = 0;
  for (int64_t i = 0; i < result.count; ++i) {
    auto label = y.as_integer(i);
    if (label < 0 || label > 255)
      return bad_named(names, names.y,
                       "label " + std::to_string(label) + " at index "
                         + std::to_string(i)
                         + " is outside [0, 255] (at most 256 classes)");
    top = std::max(top, label);
    result.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(label);
  }
  result.num_classes = std::max<int64_t>(top + 1, 2);
  return caf::none;
}

/// A split in the rows layout: x of rank 2 to 4, one example per row;
/// uint8 and float32 inputs borrowed from x where `owner` is given.
caf::expected<dataset> load_rows(const npy_view& x, const npy_view& y,
                                 const array_names& names,
                                 npz_inputs inputs,
                                 std::shared_ptr<const void> owner) {
  const auto& x_name = names.x;
  const auto& y_name = names.y;
  auto bad = [&](const std::string& array, const std::string& what) {
    return bad_named(names, array, what);
  };
  if (x.shape.size() < 2 || x.shape.size() > 4)
    return bad(x_name, "shape " + shape_text(x.shape)
                         + " must be (N, D), (N, H, W) or (N, H, W, C)");
  if (y.shape.size() != 1)
    return bad(y_name, "shape " + shape_text(y.shape)
                         + " must be (N,): one integer label per example");
  if (x.shape[0] != y.shape[0])
    return bad(y_name, std::to_string(y.shape[0]) + " labels for "
                         + std::to_string(x.shape[0]) + " examples in '"
                         + x_name + "'");
  if (x.shape[0] < 1)
    return bad(x_name, "no examples");
  for (auto d : x.shape)
    if (d < 1)
      return bad(x_name, "shape " + shape_text(x.shape)
                           + " has an empty dimension");
  bool bytes = x.kind == npy_kind::unsigned_int && x.item_size == 1;
  bool floats = x.kind == npy_kind::floating && x.item_size == 4;
  bool integers = x.kind != npy_kind::floating;
  if (!floats && !integers)
    return bad(x_name, "dtype '" + x.descr
                         + "' is not supported (inputs are float32 or an "
                           "integer type)");
  dataset result;
  result.count = x.shape[0];
  const auto& s = x.shape;
  switch (s.size()) {
    case 2: result.height = 1, result.width = 1, result.channels = s[1]; break;
    case 3: result.height = s[1], result.width = s[2], result.channels = 1; break;
    default: result.height = s[1], result.width = s[2], result.channels = s[3];
  }
  if (integers && inputs == npz_inputs::pixels) {
    if (bytes && owner != nullptr) {
      result.borrowed = {x.data, nullptr, x.element_count(),
                         std::move(owner)};
      return result;
    }
    if (bytes) {
      result.pixels.assign(x.data, x.data + x.element_count());
      return result;
    }
    // Any integer dtype (numpy's default is int64) holds pixels as uint8
    // does, when every value is one: 0..255, scaled to [0, 1].
    result.pixels.resize(static_cast<size_t>(x.element_count()));
    for (int64_t i = 0; i < x.element_count(); ++i) {
      auto v = x.as_integer(i);
      if (v < 0 || v > 255)
        return bad(x_name,
                   "dtype '" + x.descr + "': value "
                     + std::to_string(v) + " at flat index "
                     + std::to_string(i)
                     + " is not a pixel (integer inputs of a model without "
                       "embedding_bag are pixels, 0..255, scaled to [0, 1] "
                       "as uint8; give other values as float32)");
      result.pixels[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    }
  } else if (integers) {
    // An embedding_bag model's indices, -1 padding: they travel as exact
    // float values.
    result.values.resize(static_cast<size_t>(x.element_count()));
    for (int64_t i = 0; i < x.element_count(); ++i) {
      auto v = x.as_integer(i);
      if (v < -1 || v >= (int64_t{1} << 24))
        return bad(x_name, "index " + std::to_string(v) + " at flat index "
                             + std::to_string(i)
                             + " is outside [-1, 2^24) (-1 pads a bag)");
      result.values[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  } else {
    const auto n = x.element_count();
    if (owner != nullptr) {
      result.borrowed = {nullptr, reinterpret_cast<const float*>(x.data), n,
                         std::move(owner)};
    } else {
      result.values.resize(static_cast<size_t>(n));
      std::memcpy(result.values.data(), x.data,
                  static_cast<size_t>(n) * sizeof(float));
    }
    const float* values = result.value_data();
    auto nan = std::find_if(values, values + n,
                            [](float v) { return !std::isfinite(v); });
    if (nan != values + n)
      return bad(x_name, "value " + std::to_string(*nan) + " at flat index "
                           + std::to_string(nan - values)
                           + " is not finite");
  }
  return result;
}

/// A split in the offsets layout, as rows of bags padded with -1.
caf::expected<dataset> load_bags(const std::string& path,
                                 const npz_arrays& arrays,
                                 const std::string& x_name,
                                 const std::string& y_name) {
  auto width = bag_width(path, arrays);
  if (!width)
    return width.error();
  auto bags = check_bags(path, arrays, x_name);
  if (!bags)
    return bags.error();
  const auto* y = find_array(arrays, y_name);
  if (y->shape.size() != 1)
    return bad_array(path, y_name,
                     "shape " + shape_text(y->shape)
                       + " must be (N,): one integer label per example");
  if (y->shape[0] != bags->count)
    return bad_array(path, x_name + "_offsets",
                     std::to_string(bags->count + 1) + " entries ("
                        + std::to_string(bags->count) + " bags) for "
                        + std::to_string(y->shape[0]) + " labels in '"
                        + y_name + "' (N + 1 offsets for N labels)");
  dataset result;
  result.count = bags->count;
  result.height = 1;
  result.width = 1;
  result.channels = *width;
  result.values.assign(static_cast<size_t>(bags->count * *width), -1.0f);
  for (int64_t i = 0; i < bags->count; ++i)
    for (int64_t k = bags->begin(i); k < bags->end(i); ++k)
      result.values[static_cast<size_t>(i * *width + k - bags->begin(i))]
        = static_cast<float>(bags->indices->as_integer(k));
  return result;
}

} // namespace

caf::expected<dataset> load_npz(const std::string& path, split which,
                                npz_inputs inputs) {
  auto arrays = read_npz(path);
  if (!arrays)
    return arrays.error();
  auto suffix = which == split::train ? std::string{"train"}
                                      : std::string{"test"};
  auto x_name = "x_" + suffix;
  auto y_name = "y_" + suffix;
  const auto* x = find_array(*arrays, x_name);
  const auto* y = find_array(*arrays, y_name);
  const bool as_bags = find_array(*arrays, x_name + "_indices") != nullptr;
  if (as_bags && x != nullptr)
    return make_error(ec::bad_data,
                      "'" + path + "': both '" + x_name + "' and '" + x_name
                        + "_indices' (one layout per split: rows, or bags "
                          "of indices with offsets)");
  if ((x == nullptr && !as_bags) || y == nullptr) {
    std::string present;
    for (const auto& kv : *arrays)
      present += (present.empty() ? "" : ", ") + kv.first;
    return make_error(ec::bad_data,
                      "'" + path + "': no array '"
                        + (y == nullptr && (x != nullptr || as_bags) ? y_name
                                                                    : x_name)
                        + "' (expected x_train, y_train, x_test, y_test "
                          "as Keras's mnist.npz; found "
                        + (present.empty() ? "none" : present) + ")");
  }
  const array_names names{"'" + path + "' ", x_name, y_name,
                          path + " (" + to_string(which) + ")"};
  if (!as_bags)
    return dataset_from_arrays(x->view(), y->view(), names, inputs);
  if (auto err = check_label_dtype(y->view(), names))
    return err;
  if (inputs == npz_inputs::pixels)
    return bad_array(path, x_name + "_indices",
                     "bags of indices are the input of a model whose first "
                     "layer is embedding_bag, and this model has none");
  auto result = load_bags(path, *arrays, x_name, y_name);
  if (!result)
    return result.error();
  if (auto err = fill_labels(*result, y->view(), names))
    return err;
  result->source = names.source;
  result->digest = digest_of(*result);
  return result;
}

caf::expected<dataset> dataset_from_arrays(const npy_view& x,
                                           const npy_view& y,
                                           const array_names& names,
                                           npz_inputs inputs,
                                           std::shared_ptr<const void> owner) {
  if (auto err = check_label_dtype(y, names))
    return err;
  auto result = load_rows(x, y, names, inputs, std::move(owner));
  if (!result)
    return result.error();
  if (auto err = fill_labels(*result, y, names))
    return err;
  result->source = names.source;
  result->digest = digest_of(*result);
  return result;
}

} // namespace syncfac
