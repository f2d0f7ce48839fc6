#pragma once

// Helpers shared by the kernel suites: random tensors, tolerant comparison,
// error checks and central finite differences of a scalar probe loss.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ios>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"

namespace syncfac::test {

#define SYNCFAC_REQUIRE_OK(expr)                                              \
  do {                                                                        \
    auto syncfac_err_ = (expr);                                               \
    BOOST_REQUIRE_MESSAGE(!syncfac_err_, ::syncfac::render(syncfac_err_));    \
  } while (false)

inline tensor random_tensor(const tensor_shape& shape, std::mt19937& rng,
                            float lo = -1.0f, float hi = 1.0f) {
  tensor result(shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& v : result.values())
    v = dist(rng);
  return result;
}

/// A convolution of the kernel suites (conv2d, kfac_factors): x [n, h, w,
/// c], a kh x kw kernel to o channels, strides sh and sw, and the padding.
struct conv_case {
  int64_t n, h, w, c, kh, kw, o, sh, sw;
  padding pad;

  std::string str() const {
    return "x " + to_string(tensor_shape{n, h, w, c}) + " kernel "
           + to_string(tensor_shape{kh, kw, c, o}) + " stride "
           + std::to_string(sh) + "/" + std::to_string(sw) + " "
           + to_string(pad);
  }

  conv2d_geometry geometry() const {
    auto g = conv2d_geometry::make({n, h, w, c}, {kh, kw, c, o}, sh, sw, pad);
    // Boost renders the message even when g holds a geometry.
    BOOST_REQUIRE_MESSAGE(g, str() << ": "
                                   << (g ? std::string{} : render(g.error())));
    return *g;
  }
};

/// The factor statistics suites' layers (kfac_inverter, cuda_kfac): a
/// dense layer's input [37, 23] and ds [37, 11], and a conv layer's (6
/// examples of 14 x 14 x 8, a 5 x 5 x 8 x 16 kernel: A is 201 wide).
struct layer_inputs {
  tensor input;
  tensor ds;
  conv2d_geometry geometry;
  tensor x;
  tensor conv_ds;

  explicit layer_inputs(std::mt19937& rng) {
    input = random_tensor({37, 23}, rng);
    ds = random_tensor({37, 11}, rng, -0.01f, 0.01f);
    auto g = conv2d_geometry::make({6, 14, 14, 8}, {5, 5, 8, 16}, 1, 1,
                                   padding::same);
    BOOST_REQUIRE(g);
    geometry = *g;
    x = random_tensor(geometry.input_shape(), rng);
    conv_ds = random_tensor(geometry.output_shape(), rng, -0.01f, 0.01f);
  }
};

/// Checks |a - b| <= atol + rtol * |b| elementwise and equal shapes; reports
/// the worst element.
inline void check_close(const tensor& a, const tensor& b, double atol,
                        double rtol, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape(),
                        what << ": shape " << a.shape_string() << " vs "
                             << b.shape_string());
  int64_t worst = -1;
  double worst_excess = 0.0;
  for (int64_t i = 0; i < a.size(); ++i) {
    double diff = std::abs(double{a[i]} - double{b[i]});
    double excess = diff - (atol + rtol * std::abs(double{b[i]}));
    if (!(excess <= worst_excess) || std::isnan(diff)) {
      worst_excess = std::isnan(diff) ? 1e300 : excess;
      worst = i;
    }
  }
  BOOST_CHECK_MESSAGE(worst < 0, what << ": element " << worst << " is "
                                      << (worst < 0 ? 0.0f : a[worst])
                                      << ", expected "
                                      << (worst < 0 ? 0.0f : b[worst]));
}

/// Whether a and b have one shape and the same bits in every element (a
/// NaN equals only the same NaN; 0 and -0 differ): what a fused kernel
/// must give against the passes it replaces. Reports the first element
/// that differs (or the shapes).
inline boost::test_tools::predicate_result same_bits(const tensor& a,
                                                     const tensor& b) {
  boost::test_tools::predicate_result result(false);
  if (a.shape() != b.shape()) {
    result.message() << "shape " << a.shape_string() << " vs "
                     << b.shape_string();
    return result;
  }
  const float* x = a.data();
  const float* y = b.data();
  for (int64_t i = 0; i < a.size(); ++i)
    if (std::memcmp(x + i, y + i, sizeof(float)) != 0) {
      result.message() << "element " << i << " is " << std::hexfloat
                       << x[i] << ", expected " << y[i];
      return result;
    }
  return true;
}

/// The probe loss L = sum_i y_i r_i, in double.
inline double probe(const tensor& y, const tensor& r) {
  double sum = 0.0;
  for (int64_t i = 0; i < y.size(); ++i)
    sum += double{y[i]} * double{r[i]};
  return sum;
}

/// Compares an analytic gradient with central differences of loss() with
/// respect to each element of param (perturbed in place and restored).
/// valid() may veto an element whose perturbation crossed a kink (ReLU
/// switching, a max-pool winner changing); at least half must be checked.
struct fd_options {
  float eps = 1e-2f;
  double atol = 2e-3;
  double rtol = 2e-2;
  int64_t max_elements = 400;
};

inline void check_gradient(
  const std::string& what, tensor& param, const tensor& analytic,
  const std::function<double()>& loss,
  const std::function<bool()>& valid = [] { return true; },
  fd_options opt = {}) {
  BOOST_REQUIRE_MESSAGE(param.shape() == analytic.shape(),
                        what << ": gradient shape "
                             << analytic.shape_string() << " vs parameter "
                             << param.shape_string());
  auto n = param.size();
  auto step = std::max<int64_t>(1, n / opt.max_elements);
  int64_t checked = 0;
  int64_t skipped = 0;
  for (int64_t i = 0; i < n; i += step) {
    auto saved = param[i];
    param[i] = saved + opt.eps;
    auto plus = loss();
    auto ok_plus = valid();
    param[i] = saved - opt.eps;
    auto minus = loss();
    auto ok_minus = valid();
    param[i] = saved;
    if (!ok_plus || !ok_minus) {
      ++skipped;
      continue;
    }
    ++checked;
    auto numeric = (plus - minus) / (2.0 * opt.eps);
    auto diff = std::abs(numeric - double{analytic[i]});
    BOOST_CHECK_MESSAGE(diff <= opt.atol + opt.rtol * std::abs(numeric),
                        what << "[" << i << "]: analytic " << analytic[i]
                             << " vs numeric " << numeric);
  }
  BOOST_CHECK_MESSAGE(checked >= skipped || checked + skipped < 4,
                      what << ": only " << checked << " elements checked, "
                           << skipped << " skipped at kinks");
}

/// Whether two tensors have the same sign pattern (y > 0), i.e. no ReLU
/// switched between them.
inline bool same_signs(const tensor& a, const tensor& b) {
  if (a.size() != b.size())
    return false;
  for (int64_t i = 0; i < a.size(); ++i)
    if ((a[i] > 0) != (b[i] > 0))
      return false;
  return true;
}

/// Checks a layer's analytic gradients dx, dw and db against central
/// differences of the probe loss sum(y r), where forward(y) computes the
/// layer's output from x, w and b as they are (perturbed in place); `y`
/// is the unperturbed output: with ReLU an element whose perturbation
/// switched a unit is skipped.
inline void check_layer_gradients(
  const std::function<caf::error(tensor& y)>& forward, activation act,
  const tensor& y, const tensor& r, tensor& x, const tensor& dx, tensor& w,
  const tensor& dw, tensor& b, const tensor& db) {
  tensor probe_y;
  auto loss = [&] {
    SYNCFAC_REQUIRE_OK(forward(probe_y));
    return probe(probe_y, r);
  };
  auto unswitched = [&] {
    return act != activation::relu || same_signs(probe_y, y);
  };
  check_gradient("dx", x, dx, loss, unswitched);
  check_gradient("dw", w, dw, loss, unswitched);
  check_gradient("db", b, db, loss, unswitched);
}

/// Calls f(kh, kw, ih, iw) for each tap (kh, kw) of the window of output
/// position (oh, ow) that falls inside the input (ih, iw): padding taps
/// are skipped. For conv2d and pool2d geometries alike.
template <class Geometry, class F>
void for_each_input_tap(const Geometry& g, int64_t oh, int64_t ow, F f) {
  for (int64_t kh = 0; kh < g.k_h; ++kh)
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      auto ih = oh * g.stride_h + kh - g.pad_top;
      auto iw = ow * g.stride_w + kw - g.pad_left;
      if (ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w)
        f(kh, kw, ih, iw);
    }
}

/// The activation `act` of `s`, in double: the reference the kernels'
/// float results are compared with.
inline double act_ref(activation act, double s) {
  switch (act) {
    case activation::identity: return s;
    case activation::relu: return s > 0 ? s : 0;
    case activation::tanh: return std::tanh(s);
    case activation::sigmoid: return 1.0 / (1.0 + std::exp(-s));
  }
  return s;
}

inline const std::vector<activation>& all_activations() {
  static const std::vector<activation> result{
    activation::identity, activation::relu, activation::tanh,
    activation::sigmoid};
  return result;
}

} // namespace syncfac::test
