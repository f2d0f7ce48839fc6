#include "kernels/cpu/activation.hpp"

#include <algorithm>

#include <Eigen/Core>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu {

namespace {

using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

void relu(const float* x, float* y, int64_t n) {
  auto zero = simd::zero();
  int64_t i = 0;
  for (; i + simd::width <= n; i += simd::width)
    simd::store(y + i, simd::max(zero, simd::load(x + i)));
  for (; i < n; ++i)
    y[i] = x[i] > 0.0f || x[i] != x[i] ? x[i] : 0.0f;
}

} // namespace

void apply_activation(activation act, const float* x, float* y, int64_t n) {
  switch (act) {
    case activation::identity:
      if (x != y)
        std::copy(x, x + n, y);
      return;
    case activation::relu:
      relu(x, y, n);
      return;
    case activation::tanh:
      // Eigen's vectorised rational tanh: a few ulp, far faster than std.
      array_map(y, n) = const_array_map(x, n).tanh();
      return;
    case activation::sigmoid:
      array_map(y, n) = const_array_map(x, n).logistic();
      return;
  }
}

void apply_activation(activation act, float* y, int64_t n) {
  apply_activation(act, y, y, n);
}

void activation_grad(activation act, const float* y, const float* dy,
                     float* ds, int64_t n) {
  switch (act) {
    case activation::identity:
      if (dy != ds)
        std::copy(dy, dy + n, ds);
      return;
    case activation::relu:
      for (int64_t i = 0; i < n; ++i)
        ds[i] = relu_grad(y[i], dy[i]);
      return;
    case activation::tanh:
      for (int64_t i = 0; i < n; ++i)
        ds[i] = tanh_grad(y[i], dy[i]);
      return;
    case activation::sigmoid:
      for (int64_t i = 0; i < n; ++i)
        ds[i] = sigmoid_grad(y[i], dy[i]);
      return;
  }
}

} // namespace syncfac::cpu

namespace syncfac::cpu {

namespace {

// Elementwise work is memory-bound: split only ranges long enough to pay
// for waking a second thread (n elements seen as n rows of one).
template <class F>
void for_parts(int threads, int64_t n, F&& f) {
  for_row_parts(threads, n, 1, [&](range r) { f(r.begin, r.end - r.begin); });
}

} // namespace

caf::error cpu_backend::activation_forward(activation act, const tensor& x,
                                           tensor& y) {
  y.resize(x.shape());
  const float* in = x.data();
  float* out = y.data();
  for_parts(threads_, x.size(), [&](int64_t first, int64_t n) {
    apply_activation(act, in + first, out + first, n);
  });
  return caf::none;
}

caf::error cpu_backend::activation_backward(activation act, const tensor& y,
                                            const tensor& dy, tensor& dx) {
  if (auto err = expect_shape("activation_backward", "output gradient",
                              dy.shape(), "output", y.shape()))
    return err;
  dx.resize(y.shape());
  for_parts(threads_, y.size(), [&](int64_t first, int64_t n) {
    activation_grad(act, y.data() + first, dy.data() + first,
                    dx.data() + first, n);
  });
  return caf::none;
}

} // namespace syncfac::cpu
