#pragma once

// A dense float32 tensor: a shape plus contiguous row-major storage (NHWC for
// images, as in the seeds). On the wire it is the shape followed by the
// values as one raw little-endian byte block: CAF 0.17 would otherwise
// serialise a std::vector<float> element by element (~70 MB/s instead of
// ~1.4 GB/s over loopback).
//
// A GPU backend keeps a tensor's values in device memory between kernel
// calls (a device copy, attached by the backend): a layer's output stays
// on the GPU as the next layer's input, and parameters are copied to the
// GPU once per change instead of once per use. The host values are brought
// up to date only when host code reads them, so every accessor below
// returns current values whatever the device did. Only the thread that
// owns a tensor may read it while its newest values are on the device: a
// device actor hands tensors to others as copies (the copy reads them) or
// after host code has read them.

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
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

/// A tensor's values in an accelerator's memory, owned by the backend of
/// that device (kernels/cuda); the tensor only holds it.
class device_copy {
public:
  virtual ~device_copy() = default;

  /// Copies the first n values to host memory once the device work queued
  /// before has finished. Throws std::runtime_error naming the device when
  /// the device fails (the host cannot carry on with stale values).
  virtual void copy_to_host(float* dst, int64_t n) const = 0;

  /// Values it can hold.
  virtual int64_t capacity() const noexcept = 0;
};

/// Which of a tensor's copies hold its current values. Not a char type:
/// float stores cannot alias it, so loops over a tensor's values can keep
/// it in a register.
enum class residency : uint32_t {
  host,   ///< the host values; a device copy, if any, is stale
  both,   ///< host and device copy agree
  device, ///< the device copy; the host values are stale
};

class tensor {
public:
  tensor() = default;

  /// Copies the current values (reading them from the device if need be);
  /// the copy lives on the host.
  tensor(const tensor& other);
  tensor& operator=(const tensor& other);
  tensor(tensor&& other) noexcept;
  tensor& operator=(tensor&& other) noexcept;
  ~tensor() = default;

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

  // Host access. Reading brings the host values up to date; writing access
  // (the non-const overloads) also marks a device copy stale.

  float* data() {
    write_on_host();
    return values_.data();
  }

  const float* data() const {
    read_on_host();
    return values_.data();
  }

  float& operator[](int64_t i) {
    write_on_host();
    return values_[static_cast<size_t>(i)];
  }

  float operator[](int64_t i) const {
    read_on_host();
    return values_[static_cast<size_t>(i)];
  }

  std::vector<float>& values() {
    write_on_host();
    return values_;
  }

  const std::vector<float>& values() const {
    read_on_host();
    return values_;
  }

  // Device copies, for backends.

  residency where() const noexcept {
    return where_;
  }

  const std::shared_ptr<device_copy>& device() const noexcept {
    return device_;
  }

  /// Attaches `copy` (capacity >= size()) and records where the current
  /// values are; `r` must not be residency::host.
  void attach_device(std::shared_ptr<device_copy> copy, residency r);

  /// Gives the tensor `shape`, reusing its storage (a device copy too); the
  /// values are unspecified afterwards (kernels overwrite their outputs).
  void resize(const tensor_shape& shape);

  /// Changes the shape without touching the values (same element count,
  /// throws std::invalid_argument otherwise).
  void reshape(tensor_shape shape);

  void fill(float value);

  /// Whether every value is finite.
  bool all_finite() const;

  std::string shape_string() const {
    return to_string(shape_);
  }

  friend bool operator==(const tensor& x, const tensor& y) {
    return x.shape_ == y.shape_ && x.values() == y.values();
  }

  friend bool operator!=(const tensor& x, const tensor& y) {
    return !(x == y);
  }

  /// Loads a tensor from its wire form, refusing a shape with negative
  /// dimensions or more than max_wire_elements values.
  friend caf::error load_tensor(caf::deserializer& source, tensor& x);

  friend caf::error save_tensor(caf::serializer& sink, tensor& x);

private:
  void read_on_host() const {
    if (where_ == residency::device)
      fetch_from_device();
  }

  void write_on_host() {
    read_on_host();
    where_ = residency::host;
  }

  /// Copies the device values to the host: where_ becomes both.
  void fetch_from_device() const;

  tensor_shape shape_;
  // Mutable: reading a tensor whose newest values are on the device
  // refreshes the host copy, which does not change the tensor's value.
  mutable std::vector<float> values_;
  std::shared_ptr<device_copy> device_;
  mutable residency where_ = residency::host;
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
