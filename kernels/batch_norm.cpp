// Batch normalisation on the host: the defaults of backend's
// batch_norm_statistics, batch_norm_forward and batch_norm_backward
// (kernels/backend.hpp), for every backend. x is viewed as [M, C], C its
// last axis (NHWC's channels, or a dense layer's units), so one channel's
// values are every C-th float; sums run over M in double, in one order,
// which makes a replica's statistics the same bits however it is run.

#include <cmath>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/shape_checks.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

using shape_checks::channels_of;

caf::error backend::batch_norm_statistics(const tensor& x, tensor& mean,
                                          tensor& variance) {
  if (auto err = shape_checks::check_input("batch_norm_statistics", x))
    return err;
  const auto c = channels_of(x);
  const auto m = x.size() / c;
  std::vector<double> sum(static_cast<size_t>(c), 0.0);
  const float* in = x.data();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k = 0; k < c; ++k)
      sum[static_cast<size_t>(k)] += in[r * c + k];
  std::vector<double> squares(static_cast<size_t>(c), 0.0);
  for (int64_t k = 0; k < c; ++k)
    sum[static_cast<size_t>(k)] /= static_cast<double>(m);
  // Two passes: the centred squares, not E[x²] - E[x]², which cancels
  // badly when the mean is large against the spread.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k = 0; k < c; ++k) {
      auto d = in[r * c + k] - sum[static_cast<size_t>(k)];
      squares[static_cast<size_t>(k)] += d * d;
    }
  mean.resize({c});
  variance.resize({c});
  for (int64_t k = 0; k < c; ++k) {
    mean[k] = static_cast<float>(sum[static_cast<size_t>(k)]);
    variance[k] = static_cast<float>(squares[static_cast<size_t>(k)]
                                     / static_cast<double>(m));
  }
  return caf::none;
}

caf::error backend::batch_norm_forward(const tensor& x, const tensor& gamma,
                                       const tensor& beta, const tensor& mean,
                                       const tensor& inv_std, activation act,
                                       tensor& y) {
  if (auto err = shape_checks::check_batch_norm_forward(
        "batch_norm_forward", x, gamma, beta, mean, inv_std))
    return err;
  const auto c = channels_of(x);
  const auto m = x.size() / c;
  // Per channel y = a x + b, with a = gamma inv_std, b = beta - a mean.
  std::vector<float> a(static_cast<size_t>(c));
  std::vector<float> b(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) {
    a[static_cast<size_t>(k)] = gamma[k] * inv_std[k];
    b[static_cast<size_t>(k)] = beta[k] - a[static_cast<size_t>(k)] * mean[k];
  }
  tensor z{x.shape()};
  const float* in = x.data();
  float* out = z.data();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k = 0; k < c; ++k)
      out[r * c + k] = a[static_cast<size_t>(k)] * in[r * c + k]
                       + b[static_cast<size_t>(k)];
  if (act == activation::identity) {
    y = std::move(z);
    return caf::none;
  }
  return activation_forward(act, z, y);
}

caf::error backend::batch_norm_backward(const tensor& x, const tensor& gamma,
                                        const tensor& mean,
                                        const tensor& inv_std, const tensor& y,
                                        const tensor& dy, activation act,
                                        tensor& ds, tensor& dgamma,
                                        tensor& dbeta, tensor* dx) {
  if (auto err = shape_checks::check_batch_norm_backward(
        "batch_norm_backward", x, gamma, mean, inv_std, y, dy))
    return err;
  if (auto err = activation_backward(act, y, dy, ds))
    return err;
  const auto c = channels_of(x);
  const auto m = x.size() / c;
  // Per channel values in plain arrays: a tensor's operator[] checks where
  // its current values are on every call.
  const float* mu = mean.data();
  const float* is = inv_std.data();
  const float* in = x.data();
  const float* d = ds.data();
  std::vector<double> sum_ds(static_cast<size_t>(c), 0.0);
  std::vector<double> sum_ds_xhat(static_cast<size_t>(c), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = in + r * c;
    const float* dr = d + r * c;
    for (int64_t k = 0; k < c; ++k) {
      auto xhat = (xr[k] - mu[k]) * is[k];
      sum_ds[static_cast<size_t>(k)] += dr[k];
      sum_ds_xhat[static_cast<size_t>(k)] += static_cast<double>(dr[k]) * xhat;
    }
  }
  dgamma.resize({c});
  dbeta.resize({c});
  float* dg = dgamma.data();
  float* db = dbeta.data();
  for (int64_t k = 0; k < c; ++k) {
    dg[k] = static_cast<float>(sum_ds_xhat[static_cast<size_t>(k)]);
    db[k] = static_cast<float>(sum_ds[static_cast<size_t>(k)]);
  }
  if (dx == nullptr)
    return caf::none;
  dx->resize(x.shape());
  float* out = dx->data();
  const auto count = static_cast<float>(m);
  const float* g = gamma.data();
  std::vector<float> scale(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k)
    scale[static_cast<size_t>(k)] = g[k] * is[k] / count;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = in + r * c;
    const float* dr = d + r * c;
    float* o = out + r * c;
    for (int64_t k = 0; k < c; ++k) {
      auto xhat = (xr[k] - mu[k]) * is[k];
      o[k] = scale[static_cast<size_t>(k)]
             * (count * dr[k] - db[k] - xhat * dg[k]);
    }
  }
  return caf::none;
}

} // namespace syncfac
