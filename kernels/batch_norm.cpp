// Batch normalisation on the host: the defaults of backend's
// batch_norm_statistics, batch_norm_forward and batch_norm_backward
// (kernels/backend.hpp), for every backend. x is viewed as [M, C], C its
// last axis (NHWC's channels, or a dense layer's units), so one channel's
// values are every C-th float.
//
// Every pass runs over chunks of rows (host_chunks.hpp) through
// run_host_parts, on as many of the backend's threads as it has. A sum
// over M is taken per chunk (column_sums.hpp: float partials of a few
// rows, added into double in row order), and the chunks' sums are then
// added in chunk order: the chunks depend on M and C only,
// so a replica's statistics are the same bits however many threads run
// it. The activation's pass runs on each chunk while it is in cache, with
// the backend's elementwise loops (kernels/cpu/activation.hpp), so the
// values are those of batch_norm followed by activation_forward.

#include <cmath>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/column_sums.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/host_chunks.hpp"
#include "kernels/shape_checks.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

using column_sums::group;
using column_sums::load;
using shape_checks::channels_of;

namespace {

/// Per chunk, C sums in double: partial[chunk * c + k].
struct chunk_sums {
  std::vector<double> partial;
  int64_t c = 0;

  chunk_sums(int64_t chunks, int64_t channels)
    : partial(static_cast<size_t>(chunks * channels), 0.0), c(channels) {
  }

  double* of(int64_t chunk) {
    return partial.data() + chunk * c;
  }

  /// The chunks' sums added in chunk order.
  std::vector<double> total() const {
    std::vector<double> sum(static_cast<size_t>(c), 0.0);
    const auto chunks = static_cast<int64_t>(partial.size()) / c;
    for (int64_t i = 0; i < chunks; ++i)
      for (int64_t k = 0; k < c; ++k)
        sum[static_cast<size_t>(k)] += partial[static_cast<size_t>(i * c + k)];
    return sum;
  }
};

} // namespace

caf::error backend::batch_norm_statistics(const tensor& x, tensor& mean,
                                          tensor& variance) {
  if (auto err = shape_checks::check_input("batch_norm_statistics", x))
    return err;
  const auto c = channels_of(x);
  const auto rows = host_chunks::of(x.size() / c, c);
  const float* in = x.data();
  // One pass over x from memory: each chunk, while it is in cache, gives
  // its sum and then its squares centred on its own mean (two passes over
  // the chunk, never E[x²] - E[x]², which cancels badly when the mean is
  // large against the spread). The chunks are then combined in chunk
  // order as Chan, Golub and LeVeque combine partial variances; about the
  // chunk's centre z (its mean rounded to float), with the chunk's sum s,
  // count n and the whole mean mu:
  //   sum (x - mu)² = sum (x - z)² + 2 (z - mu)(s - n z) + n (z - mu)².
  chunk_sums sums{rows.count, c};
  chunk_sums squares{rows.count, c};
  // Per chunk, its c centres z.
  std::vector<float> centres(static_cast<size_t>(rows.count * c));
  run_host_parts(rows.count, x.size(), [&](int64_t i) {
    auto [first, last] = rows.range(i);
    double* const sum[1] = {sums.of(i)};
    column_sums::add(first, last, c, sum,
                     [&](int64_t r, int64_t k0, int64_t width, group* v) {
                       v[0] = load(in + r * c + k0, width);
                     });
    float* zk = centres.data() + i * c;
    const auto n = static_cast<double>(last - first);
    for (int64_t k = 0; k < c; ++k)
      zk[k] = static_cast<float>(sum[0][k] / n);
    double* const square[1] = {squares.of(i)};
    column_sums::add(first, last, c, square,
                     [&](int64_t r, int64_t k0, int64_t width, group* v) {
                       auto d = load(in + r * c + k0, width)
                                - load(zk + k0, width);
                       v[0] = d * d;
                     });
  });
  auto mu = sums.total();
  const auto m = static_cast<double>(rows.m);
  for (auto& v : mu)
    v /= m;
  std::vector<double> m2(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < rows.count; ++i) {
    auto [first, last] = rows.range(i);
    const auto n = static_cast<double>(last - first);
    const double* s = sums.of(i);
    const float* z = centres.data() + i * c;
    const double* q = squares.of(i);
    for (int64_t k = 0; k < c; ++k) {
      auto off = z[k] - mu[static_cast<size_t>(k)];
      m2[static_cast<size_t>(k)]
        += q[k] + 2.0 * off * (s[k] - n * z[k]) + n * off * off;
    }
  }
  mean.resize({c});
  variance.resize({c});
  for (int64_t k = 0; k < c; ++k) {
    mean[k] = static_cast<float>(mu[static_cast<size_t>(k)]);
    variance[k] = static_cast<float>(m2[static_cast<size_t>(k)] / m);
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
  // Per channel y = a x + b, with a = gamma inv_std, b = beta - a mean.
  std::vector<float> a(static_cast<size_t>(c));
  std::vector<float> b(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) {
    a[static_cast<size_t>(k)] = gamma[k] * inv_std[k];
    b[static_cast<size_t>(k)] = beta[k] - a[static_cast<size_t>(k)] * mean[k];
  }
  const auto rows = host_chunks::of(x.size() / c, c);
  // The last step's storage, written whole below (elementwise: y may be
  // x itself).
  y.resize(x.shape());
  const float* in = x.data();
  float* out = y.data();
  run_host_parts(rows.count, x.size(), [&](int64_t i) {
    auto [first, last] = rows.range(i);
    for (int64_t r = first; r < last; ++r)
      for (int64_t k = 0; k < c; ++k)
        out[r * c + k] = a[static_cast<size_t>(k)] * in[r * c + k]
                         + b[static_cast<size_t>(k)];
    if (act != activation::identity)
      cpu::apply_activation(act, out + first * c, (last - first) * c);
  });
  return caf::none;
}

caf::error backend::batch_norm_backward(const tensor& x, const tensor& gamma,
                                        const tensor& mean,
                                        const tensor& inv_std, const tensor& y,
                                        const tensor& dy, activation act,
                                        tensor& scratch, tensor& dgamma,
                                        tensor& dbeta, tensor* dx) {
  if (auto err = shape_checks::check_batch_norm_backward(
        "batch_norm_backward", x, gamma, mean, inv_std, y, dy))
    return err;
  const auto c = channels_of(x);
  const auto rows = host_chunks::of(x.size() / c, c);
  // Per channel values in plain arrays: a tensor's operator[] checks where
  // its current values are on every call.
  const float* mu = mean.data();
  const float* is = inv_std.data();
  const float* in = x.data();
  const float* out = y.data();
  const float* grad = dy.data();
  // ds = dy act'(y), whole in the caller's scratch, made chunk by chunk
  // and summed while the chunk is in cache; where act is the identity ds
  // is dy itself and nothing is copied (batch norm before a residual add).
  // Making ds again in the second pass from y and dy instead of keeping it
  // was measured no faster: activation_grad ran twice.
  const bool copies = act != activation::identity;
  float* kept = nullptr;
  if (copies) {
    scratch.resize(x.shape());
    kept = scratch.data();
  }
  const float* d = copies ? kept : grad;
  chunk_sums sum_ds{rows.count, c};
  chunk_sums sum_ds_xhat{rows.count, c};
  run_host_parts(rows.count, x.size(), [&](int64_t i) {
    auto [first, last] = rows.range(i);
    if (copies)
      cpu::activation_grad(act, out + first * c, grad + first * c,
                           kept + first * c, (last - first) * c);
    double* const sums[2] = {sum_ds.of(i), sum_ds_xhat.of(i)};
    column_sums::add(first, last, c, sums,
                     [&](int64_t r, int64_t k0, int64_t width, group* v) {
                       auto ds = load(d + r * c + k0, width);
                       auto xhat = (load(in + r * c + k0, width)
                                    - load(mu + k0, width))
                                   * load(is + k0, width);
                       v[0] = ds;
                       v[1] = ds * xhat;
                     });
  });
  auto total_ds = sum_ds.total();
  auto total_ds_xhat = sum_ds_xhat.total();
  dgamma.resize({c});
  dbeta.resize({c});
  float* dg = dgamma.data();
  float* db = dbeta.data();
  for (int64_t k = 0; k < c; ++k) {
    dg[k] = static_cast<float>(total_ds_xhat[static_cast<size_t>(k)]);
    db[k] = static_cast<float>(total_ds[static_cast<size_t>(k)]);
  }
  if (dx == nullptr)
    return caf::none;
  dx->resize(x.shape());
  float* o = dx->data();
  const auto count = static_cast<float>(rows.m);
  const float* g = gamma.data();
  std::vector<float> scale(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k)
    scale[static_cast<size_t>(k)] = g[k] * is[k] / count;
  run_host_parts(rows.count, x.size(), [&](int64_t i) {
    auto [first, last] = rows.range(i);
    for (int64_t r = first; r < last; ++r) {
      const float* xr = in + r * c;
      const float* dr = d + r * c;
      float* orow = o + r * c;
      for (int64_t k = 0; k < c; ++k) {
        auto xhat = (xr[k] - mu[k]) * is[k];
        orow[k] = scale[static_cast<size_t>(k)]
                  * (count * dr[k] - db[k] - xhat * dg[k]);
      }
    }
  });
  return caf::none;
}

} // namespace syncfac
