#pragma once

// A dense float32 tensor: a shape plus contiguous row-major storage (NHWC for
// images, as in the seeds). On the wire it is the shape followed by the
// values as one raw little-endian byte block: CAF 0.17 would otherwise
// serialise a std::vector<float> element by element (~70 MB/s instead of
// ~1.4 GB/s over loopback).

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>

namespace syncfac {

using tensor_shape = std::vector<int64_t>;

/// "[128, 28, 28, 1]".
std::string to_string(const tensor_shape& shape);

/// Number of elements of a shape; 1 for rank 0.
int64_t element_count(const tensor_shape& shape);

/// The largest tensor accepted from a peer: 2^31 floats (8 GiB).
constexpr int64_t max_wire_elements = int64_t{1} << 31;

class tensor {
public:
  tensor() = default;

  /// A zero-filled tensor of the given shape.
  explicit tensor(tensor_shape shape);

  tensor(std::initializer_list<int64_t> shape) : tensor(tensor_shape(shape)) {
  }

  /// A tensor holding `values`; their count must match the shape
  /// (throws std::invalid_argument otherwise: a programming error).
  tensor(tensor_shape shape, std::vector<float> values);

  const tensor_shape& shape() const noexcept {
    return shape_;
  }

  int rank() const noexcept {
    return static_cast<int>(shape_.size());
  }

  int64_t dim(int i) const {
    return shape_.at(static_cast<size_t>(i));
  }

  int64_t size() const noexcept {
    return static_cast<int64_t>(values_.size());
  }

  bool empty() const noexcept {
    return values_.empty();
  }

  float* data() noexcept {
    return values_.data();
  }

  const float* data() const noexcept {
    return values_.data();
  }

  float& operator[](int64_t i) noexcept {
    return values_[static_cast<size_t>(i)];
  }

  float operator[](int64_t i) const noexcept {
    return values_[static_cast<size_t>(i)];
  }

  std::vector<float>& values() noexcept {
    return values_;
  }

  const std::vector<float>& values() const noexcept {
    return values_;
  }

  /// Gives the tensor `shape`, reusing its storage; the values are
  /// unspecified afterwards (kernels overwrite their outputs).
  void resize(const tensor_shape& shape);

  /// Changes the shape without touching the values (same element count,
  /// throws std::invalid_argument otherwise).
  void reshape(tensor_shape shape);

  void fill(float value);

  /// Whether every value is finite.
  bool all_finite() const noexcept;

  std::string shape_string() const {
    return to_string(shape_);
  }

  friend bool operator==(const tensor& x, const tensor& y) {
    return x.shape_ == y.shape_ && x.values_ == y.values_;
  }

  friend bool operator!=(const tensor& x, const tensor& y) {
    return !(x == y);
  }

  /// Loads a tensor from its wire form, refusing a shape with negative
  /// dimensions or more than max_wire_elements values.
  friend caf::error load_tensor(caf::deserializer& source, tensor& x);

  friend caf::error save_tensor(caf::serializer& sink, tensor& x);

private:
  tensor_shape shape_;
  std::vector<float> values_;
};

/// "tensor[2, 3]{1, 2, 3, 4, 5, 6}", eliding values past the first 8.
std::ostream& operator<<(std::ostream& out, const tensor& x);

/// Whether none of xs[0..n) is NaN or Inf (tensor::all_finite of a view).
bool all_finite(const float* xs, int64_t n) noexcept;

caf::error load_tensor(caf::deserializer& source, tensor& x);
caf::error save_tensor(caf::serializer& sink, tensor& x);

inline caf::error inspect(caf::serializer& f, tensor& x) {
  return save_tensor(f, x);
}

inline caf::error inspect(caf::deserializer& f, tensor& x) {
  return load_tensor(f, x);
}

/// Other inspectors (stringification) see the shape only.
template <class Inspector>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value
                          && !std::is_base_of<caf::deserializer,
                                              Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, tensor& x) {
  auto shape = x.shape();
  return f(caf::meta::type_name("tensor"), shape);
}

} // namespace syncfac
