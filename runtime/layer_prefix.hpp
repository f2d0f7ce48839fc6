#pragma once

// What the layers' adopt_prefix (runtime/layers.hpp) share: the first n
// examples of a tensor, and the source layer checked to be of the same
// kind with n examples to give.

#include <algorithm>
#include <string>

#include <caf/expected.hpp>

#include "runtime/base/error.hpp"
#include "runtime/layers.hpp"

namespace syncfac {

/// dst = the first n examples (rows of dimension 0) of src.
inline void copy_prefix(const tensor& src, int64_t n, tensor& dst) {
  auto shape = src.shape();
  auto per_example = shape[0] > 0 ? src.size() / shape[0] : 0;
  shape[0] = n;
  dst.resize(shape);
  std::copy(src.data(), src.data() + n * per_example, dst.data());
}

/// Refused unless `source` is of `self`'s kind (`same_kind`) and its last
/// forward pass has at least n examples to give.
inline caf::error check_prefix_source(const layer& self, const layer& source,
                                      bool same_kind, int64_t n) {
  if (!same_kind)
    return make_error(ec::invalid_argument,
                      self.name() + ": cannot adopt the state of layer '"
                        + source.name() + "' (a different kind)");
  const auto& out = source.output();
  if (out.rank() < 1 || n < 1 || n > out.dim(0))
    return make_error(ec::invalid_argument,
                      self.name() + ": cannot adopt " + std::to_string(n)
                        + " examples of a forward pass whose output is "
                        + out.shape_string());
  return caf::none;
}

/// The layer as the type T that adopt_prefix needs, and a check that n
/// examples fit its last forward and x.
template <class T>
caf::expected<const T*> prefix_source(const layer& self, const layer& source,
                                      const tensor& x, int64_t n) {
  auto cast = dynamic_cast<const T*>(&source);
  if (auto err = check_prefix_source(self, source, cast != nullptr, n))
    return err;
  if (x.rank() < 1 || x.dim(0) != n)
    return make_error(ec::shape_mismatch,
                      self.name() + ": adopted input " + x.shape_string()
                        + " does not hold " + std::to_string(n)
                        + " examples");
  return cast;
}

} // namespace syncfac
