// The CUDA backend's average pooling, batch normalisation and dropout's
// product (kernels/backend.hpp): the host defaults' values (kernels/
// average_pool.cpp, kernels/batch_norm.cpp) on the device, their outputs
// staying there. A channel's sums run in one block, in double; the pooling
// gradient gathers (no atomics), so every result replays bit for bit.

#include "kernels/shape_checks.hpp"
#include "kernels/cuda/cuda_impl.cuh"
#include "runtime/base/error.hpp"

namespace syncfac::cuda {

namespace {

constexpr int block = 256;

/// Rows [begin, end) of the window of output index o along one axis.
__device__ inline void window_rows(int64_t o, int64_t stride, int64_t pad,
                                   int64_t k, int64_t in, int64_t& begin,
                                   int64_t& end) {
  begin = o * stride - pad;
  end = min(begin + k, in);
  begin = max(begin, int64_t{0});
}

__global__ void k_avg_pool(const float* x, pool_dims d, float* y) {
  SYNCFAC_GRID_STRIDE(i, d.N * d.OH * d.OW * d.C) {
    int64_t c = i % d.C;
    int64_t ow = (i / d.C) % d.OW;
    int64_t oh = (i / (d.C * d.OW)) % d.OH;
    int64_t n = i / (d.C * d.OW * d.OH);
    int64_t h0, h1, w0, w1;
    window_rows(oh, d.SH, d.PT, d.KH, d.H, h0, h1);
    window_rows(ow, d.SW, d.PL, d.KW, d.W, w0, w1);
    float sum = 0.0f;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        sum += x[((n * d.H + ih) * d.W + iw) * d.C + c];
    y[i] = sum * (1.0f / static_cast<float>((h1 - h0) * (w1 - w0)));
  }
}

/// dx of each input: the shares of the outputs whose windows hold it.
__global__ void k_avg_pool_back(const float* dy, pool_dims d, float* dx) {
  SYNCFAC_GRID_STRIDE(i, d.N * d.H * d.W * d.C) {
    int64_t c = i % d.C;
    int64_t iw = (i / d.C) % d.W;
    int64_t ih = (i / (d.C * d.W)) % d.H;
    int64_t n = i / (d.C * d.W * d.H);
    // Outputs o with o * S - P <= in < o * S - P + K.
    int64_t oh_lo = max(int64_t{0}, (ih + d.PT - d.KH + d.SH) / d.SH);
    int64_t oh_hi = min(d.OH - 1, (ih + d.PT) / d.SH);
    int64_t ow_lo = max(int64_t{0}, (iw + d.PL - d.KW + d.SW) / d.SW);
    int64_t ow_hi = min(d.OW - 1, (iw + d.PL) / d.SW);
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        int64_t h0, h1, w0, w1;
        window_rows(oh, d.SH, d.PT, d.KH, d.H, h0, h1);
        window_rows(ow, d.SW, d.PL, d.KW, d.W, w0, w1);
        if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1)
          continue;
        sum += dy[((n * d.OH + oh) * d.OW + ow) * d.C + c]
               * (1.0f / static_cast<float>((h1 - h0) * (w1 - w0)));
      }
    dx[i] = sum;
  }
}

/// The block's sum of `value` (every thread's), in thread 0.
__device__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  double result = shared[0];
  __syncthreads();
  return result;
}

/// One block per channel: the mean and the biased variance (two passes).
__global__ void k_bn_statistics(const float* x, int64_t rows, int64_t cols,
                                float* mean, float* variance) {
  __shared__ double shared[block];
  int64_t c = blockIdx.x;
  double sum = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += x[r * cols + c];
  double mu = block_sum(sum, shared) / static_cast<double>(rows);
  double squares = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    double d = x[r * cols + c] - mu;
    squares += d * d;
  }
  double var = block_sum(squares, shared) / static_cast<double>(rows);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<float>(mu);
    variance[c] = static_cast<float>(var);
  }
}

__global__ void k_bn_forward(const float* x, const float* gamma,
                             const float* beta, const float* mean,
                             const float* inv_std, int64_t n, int64_t cols,
                             activation act, float* y) {
  SYNCFAC_GRID_STRIDE(i, n) {
    int64_t c = i % cols;
    float a = gamma[c] * inv_std[c];
    float b = beta[c] - a * mean[c];
    y[i] = act_forward(act, a * x[i] + b);
  }
}

/// One block per channel: dgamma = sum ds x̂, dbeta = sum ds.
__global__ void k_bn_backward_sums(const float* x, const float* ds,
                                   const float* mean, const float* inv_std,
                                   int64_t rows, int64_t cols, float* dgamma,
                                   float* dbeta) {
  __shared__ double shared[block];
  int64_t c = blockIdx.x;
  double sum_ds = 0;
  double sum_ds_xhat = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    int64_t i = r * cols + c;
    float xhat = (x[i] - mean[c]) * inv_std[c];
    sum_ds += ds[i];
    sum_ds_xhat += static_cast<double>(ds[i]) * xhat;
  }
  double dg = block_sum(sum_ds_xhat, shared);
  double db = block_sum(sum_ds, shared);
  if (threadIdx.x == 0) {
    dgamma[c] = static_cast<float>(dg);
    dbeta[c] = static_cast<float>(db);
  }
}

__global__ void k_bn_backward_dx(const float* x, const float* ds,
                                 const float* gamma, const float* mean,
                                 const float* inv_std, const float* dgamma,
                                 const float* dbeta, int64_t n, int64_t cols,
                                 float* dx) {
  const float count = static_cast<float>(n / cols);
  SYNCFAC_GRID_STRIDE(i, n) {
    int64_t c = i % cols;
    float xhat = (x[i] - mean[c]) * inv_std[c];
    dx[i] = gamma[c] * inv_std[c] / count
            * (count * ds[i] - dbeta[c] - xhat * dgamma[c]);
  }
}

__global__ void k_multiply(const float* a, const float* b, int64_t n,
                           float* y) {
  SYNCFAC_GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

} // namespace

caf::error cuda_backend::avg_pool_forward(const pool2d_geometry& g,
                                          const tensor& x, tensor& y) {
  const char* op = "avg_pool_forward";
  if (auto err = shape_checks::check_pool_operand(op, "input", x,
                                                  g.input_shape(), "input"))
    return err;
  if (auto err = select(op))
    return err;
  const float* xd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "avg_pool_forward: copy x", xd))
    return err;
  if (auto err = output(y, g.output_shape(), "pooling output", yd))
    return err;
  auto out = element_count(g.output_shape());
  if (out > 0) {
    k_avg_pool<<<grid_for(out), block, 0, stream_>>>(xd, dims_of(g), yd);
    return check_launch(op);
  }
  return caf::none;
}

caf::error cuda_backend::avg_pool_backward(const pool2d_geometry& g,
                                           const tensor& dy, tensor& dx) {
  const char* op = "avg_pool_backward";
  if (auto err = shape_checks::check_pool_operand(op, "gradient", dy,
                                                  g.output_shape(), "output"))
    return err;
  if (auto err = select(op))
    return err;
  const float* dyd = nullptr;
  float* dxd = nullptr;
  if (auto err = input(dy, in_a_, "avg_pool_backward: copy dy", dyd))
    return err;
  if (auto err = output(dx, g.input_shape(), "pooling input gradient", dxd))
    return err;
  auto total = element_count(g.input_shape());
  if (total > 0) {
    k_avg_pool_back<<<grid_for(total), block, 0, stream_>>>(dyd, dims_of(g),
                                                            dxd);
    return check_launch(op);
  }
  return caf::none;
}

caf::error cuda_backend::batch_norm_statistics(const tensor& x, tensor& mean,
                                               tensor& variance) {
  using namespace shape_checks;
  const char* op = "batch_norm_statistics";
  if (auto err = check_input(op, x))
    return err;
  if (auto err = select(op))
    return err;
  const auto c = channels_of(x);
  const float* xd = nullptr;
  float* md = nullptr;
  float* vd = nullptr;
  if (auto err = input(x, in_a_, "batch_norm_statistics: copy x", xd))
    return err;
  if (auto err = output(mean, {c}, "batch mean", md))
    return err;
  if (auto err = output(variance, {c}, "batch variance", vd))
    return err;
  k_bn_statistics<<<static_cast<unsigned>(c), block, 0, stream_>>>(
    xd, x.size() / c, c, md, vd);
  return check_launch(op);
}

caf::error cuda_backend::batch_norm_forward(const tensor& x,
                                            const tensor& gamma,
                                            const tensor& beta,
                                            const tensor& mean,
                                            const tensor& inv_std,
                                            activation act, tensor& y) {
  using namespace shape_checks;
  const char* op = "batch_norm_forward";
  if (auto err = check_batch_norm_forward(op, x, gamma, beta, mean, inv_std))
    return err;
  if (auto err = select(op))
    return err;
  const float *xd = nullptr, *gd = nullptr, *bd = nullptr, *md = nullptr,
              *sd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "batch_norm_forward: copy x", xd))
    return err;
  if (auto err = input(gamma, in_b_, "batch_norm_forward: copy gamma", gd))
    return err;
  if (auto err = input(beta, in_c_, "batch_norm_forward: copy beta", bd))
    return err;
  if (auto err = input(mean, in_d_, "batch_norm_forward: copy mean", md))
    return err;
  if (auto err = input(inv_std, in_e_, "batch_norm_forward: copy inv_std",
                       sd))
    return err;
  if (auto err = output(y, x.shape(), "batch_norm output", yd))
    return err;
  k_bn_forward<<<grid_for(x.size()), block, 0, stream_>>>(
    xd, gd, bd, md, sd, x.size(), channels_of(x), act, yd);
  return check_launch(op);
}

caf::error cuda_backend::batch_norm_backward(
  const tensor& x, const tensor& gamma, const tensor& mean,
  const tensor& inv_std, const tensor& y, const tensor& dy, activation act,
  tensor& scratch, tensor& dgamma, tensor& dbeta, tensor* dx) {
  using namespace shape_checks;
  const char* op = "batch_norm_backward";
  if (auto err = check_batch_norm_backward(op, x, gamma, mean, inv_std, y,
                                           dy))
    return err;
  // ds = dy act'(y) whole, in the caller's scratch on the device (the
  // activation's own kernel).
  tensor& ds = scratch;
  if (auto err = activation_backward(act, y, dy, ds))
    return err;
  if (auto err = select(op))
    return err;
  const auto c = channels_of(x);
  const float *xd = nullptr, *dsd = nullptr, *gd = nullptr, *md = nullptr,
              *sd = nullptr;
  float* dgd = nullptr;
  float* dbd = nullptr;
  if (auto err = input(x, in_a_, "batch_norm_backward: copy x", xd))
    return err;
  if (auto err = input(ds, in_b_, "batch_norm_backward: ds", dsd))
    return err;
  if (auto err = input(gamma, in_c_, "batch_norm_backward: copy gamma", gd))
    return err;
  if (auto err = input(mean, in_d_, "batch_norm_backward: copy mean", md))
    return err;
  if (auto err = input(inv_std, in_e_, "batch_norm_backward: copy inv_std",
                       sd))
    return err;
  if (auto err = output(dgamma, {c}, "batch_norm gamma gradient", dgd))
    return err;
  if (auto err = output(dbeta, {c}, "batch_norm beta gradient", dbd))
    return err;
  k_bn_backward_sums<<<static_cast<unsigned>(c), block, 0, stream_>>>(
    xd, dsd, md, sd, x.size() / c, c, dgd, dbd);
  if (auto err = check_launch(op))
    return err;
  if (dx == nullptr)
    return caf::none;
  float* dxd = nullptr;
  if (auto err = output(*dx, x.shape(), "batch_norm input gradient", dxd))
    return err;
  k_bn_backward_dx<<<grid_for(x.size()), block, 0, stream_>>>(
    xd, dsd, gd, md, sd, dgd, dbd, x.size(), c, dxd);
  return check_launch(op);
}

caf::error cuda_backend::multiply(const tensor& x, const tensor& m,
                                  tensor& y) {
  const char* op = "multiply";
  if (x.shape() != m.shape())
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": " + x.shape_string() + " times "
                        + m.shape_string());
  if (auto err = select(op))
    return err;
  const float* xd = nullptr;
  const float* md = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "multiply: copy x", xd))
    return err;
  if (auto err = input(m, in_b_, "multiply: copy mask", md))
    return err;
  if (auto err = output(y, x.shape(), "product", yd))
    return err;
  if (x.size() > 0) {
    k_multiply<<<grid_for(x.size()), block, 0, stream_>>>(xd, md, x.size(),
                                                          yd);
    return check_launch(op);
  }
  return caf::none;
}

} // namespace syncfac::cuda
