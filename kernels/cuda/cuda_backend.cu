// The CUDA backend: cuBLAS for every product (dense layers, im2col
// convolutions, gradients), small kernels for activations, pooling and the
// losses. Tensors are row-major; cuBLAS is column-major, so a row-major
// [r, c] matrix is passed as the column-major [c, r] matrix it is in memory
// and C = A B is computed as Cᵀ = Bᵀ Aᵀ (gemm_rm).

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/row_loss.hpp"
#include "kernels/cuda/cuda_impl.cuh"

namespace syncfac::cuda {

// -- status strings ----------------------------------------------------------

std::string status_string(cudaError_t status) {
  return std::string{cudaGetErrorName(status)} + ": "
         + cudaGetErrorString(status);
}

std::string status_string(cublasStatus_t status) {
  return std::string{"cuBLAS "} + cublasGetStatusName(status) + ": "
         + cublasGetStatusString(status);
}

std::string status_string(cusolverStatus_t status) {
  switch (status) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED (out of device memory)";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default: break;
  }
  return "cuSOLVER status " + std::to_string(static_cast<int>(status));
}

std::string bytes_string(int64_t bytes) {
  char buf[48];
  double x = static_cast<double>(bytes);
  if (x >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof(buf), "%.1f GiB", x / (1024.0 * 1024 * 1024));
  else if (x >= 1024.0 * 1024)
    std::snprintf(buf, sizeof(buf), "%.1f MiB", x / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  return buf;
}

// -- device queries ----------------------------------------------------------

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp prop{};
  auto status = cudaGetDeviceProperties(&prop, device);
  if (status != cudaSuccess)
    return "cuda:" + std::to_string(device) + " (" + status_string(status)
           + ")";
  return std::string{prop.name} + " ("
         + std::to_string(prop.multiProcessorCount)
         + " SMs, compute " + std::to_string(prop.major) + "."
         + std::to_string(prop.minor) + ", "
         + bytes_string(static_cast<int64_t>(prop.totalGlobalMem)) + ")";
}

double fp32_peak_tflops(int device) {
  int sms = 0;
  int clock_khz = 0;
  int major = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)
        != cudaSuccess
      || cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device)
           != cudaSuccess
      || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                device)
           != cudaSuccess) {
    cudaGetLastError();
    return 0.0;
  }
  // 128 FP32 lanes per SM on Ampere (8.x), Hopper (9.x) and Blackwell.
  int lanes = major >= 8 ? 128 : 64;
  return 2.0 * lanes * sms * (clock_khz * 1e3) / 1e12;
}

// -- kernels -----------------------------------------------------------------

namespace {

__global__ void k_fill(float* x, int64_t n, float value) {
  SYNCFAC_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void k_bias_act(float* y, const float* b, int64_t rows,
                           int64_t cols, activation act) {
  SYNCFAC_GRID_STRIDE(i, rows * cols) {
    y[i] = act_forward(act, y[i] + b[i % cols]);
  }
}

__global__ void k_act_forward(const float* x, float* y, int64_t n,
                              activation act) {
  SYNCFAC_GRID_STRIDE(i, n) y[i] = act_forward(act, x[i]);
}

__global__ void k_act_backward(const float* y, const float* dy, float* dx,
                               int64_t n, activation act) {
  SYNCFAC_GRID_STRIDE(i, n) dx[i] = act_grad(act, y[i], dy[i]);
}

/// See launch_im2col.
__global__ void k_im2col(const float* x, conv_dims d, const int64_t* rows,
                         int64_t first, int64_t count, int64_t ld,
                         float* col) {
  const int64_t P = d.KH * d.KW * d.C;
  const int64_t T = d.OH * d.OW;
  SYNCFAC_GRID_STRIDE(i, count * ld) {
    int64_t r = i / ld;
    int64_t k = i % ld;
    if (k == P) {
      col[i] = 1.0f;
      continue;
    }
    int64_t flat = rows != nullptr ? rows[first + r] : first + r;
    int64_t n = flat / T;
    int64_t t = flat % T;
    int64_t oh = t / d.OW;
    int64_t ow = t % d.OW;
    int64_t c = k % d.C;
    int64_t kw = (k / d.C) % d.KW;
    int64_t kh = k / (d.C * d.KW);
    int64_t ih = oh * d.SH - d.PT + kh;
    int64_t iw = ow * d.SW - d.PL + kw;
    col[i] = (ih >= 0 && ih < d.H && iw >= 0 && iw < d.W)
               ? x[((n * d.H + ih) * d.W + iw) * d.C + c]
               : 0.0f;
  }
}

/// dx of images [n0, n0 + images) from dcol [images * T, P]: every input
/// element gathers the patch entries that read it (deterministic, no
/// atomics).
__global__ void k_col2im(const float* dcol, conv_dims d, int64_t n0,
                         int64_t images, float* dx) {
  const int64_t P = d.KH * d.KW * d.C;
  const int64_t T = d.OH * d.OW;
  SYNCFAC_GRID_STRIDE(i, images * d.H * d.W * d.C) {
    int64_t c = i % d.C;
    int64_t iw = (i / d.C) % d.W;
    int64_t ih = (i / (d.C * d.W)) % d.H;
    int64_t n = i / (d.C * d.W * d.H); // local image
    float sum = 0.0f;
    for (int64_t kh = 0; kh < d.KH; ++kh) {
      int64_t hnum = ih + d.PT - kh;
      if (hnum < 0 || hnum % d.SH != 0)
        continue;
      int64_t oh = hnum / d.SH;
      if (oh >= d.OH)
        continue;
      for (int64_t kw = 0; kw < d.KW; ++kw) {
        int64_t wnum = iw + d.PL - kw;
        if (wnum < 0 || wnum % d.SW != 0)
          continue;
        int64_t ow = wnum / d.SW;
        if (ow >= d.OW)
          continue;
        sum += dcol[(n * T + oh * d.OW + ow) * P + (kh * d.KW + kw) * d.C
                    + c];
      }
    }
    dx[(n0 * d.H * d.W * d.C) + i] = sum;
  }
}

} // namespace

conv_dims conv_dims_of(const conv2d_geometry& g) {
  return {g.batch,    g.in_h,     g.in_w,     g.in_c,  g.k_h,
          g.k_w,      g.out_c,    g.stride_h, g.stride_w, g.out_h,
          g.out_w,    g.pad_top,  g.pad_left};
}

void launch_im2col(cudaStream_t stream, const float* x, const conv_dims& d,
                   const int64_t* rows, int64_t first, int64_t count,
                   int64_t ld, float* col) {
  if (count * ld > 0)
    k_im2col<<<grid_for(count * ld), 256, 0, stream>>>(x, d, rows, first,
                                                       count, ld, col);
}

void launch_fill(cudaStream_t stream, float* x, int64_t n, float value) {
  if (n > 0)
    k_fill<<<grid_for(n), 256, 0, stream>>>(x, n, value);
}

namespace {

__global__ void k_max_pool(const float* x, pool_dims d, float* y,
                           int32_t* argmax) {
  SYNCFAC_GRID_STRIDE(i, d.N * d.OH * d.OW * d.C) {
    int64_t c = i % d.C;
    int64_t ow = (i / d.C) % d.OW;
    int64_t oh = (i / (d.C * d.OW)) % d.OH;
    int64_t n = i / (d.C * d.OW * d.OH);
    int64_t h0 = oh * d.SH - d.PT;
    int64_t w0 = ow * d.SW - d.PL;
    int64_t h1 = min(h0 + d.KH, d.H);
    int64_t w1 = min(w0 + d.KW, d.W);
    h0 = max(h0, int64_t{0});
    w0 = max(w0, int64_t{0});
    int64_t base = n * d.H * d.W * d.C;
    int64_t best_at = base + (h0 * d.W + w0) * d.C + c;
    float best = x[best_at];
    // Ties go to the first element, a NaN never displaces a number (as on
    // the CPU).
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        int64_t pos = base + (ih * d.W + iw) * d.C + c;
        float v = x[pos];
        if (v > best) {
          best = v;
          best_at = pos;
        }
      }
    y[i] = best;
    argmax[i] = static_cast<int32_t>(best_at);
  }
}

__global__ void k_pool_scatter(const float* dy, const int32_t* argmax,
                               int64_t n, float* dx) {
  SYNCFAC_GRID_STRIDE(i, n) atomicAdd(dx + argmax[i], dy[i]);
}

__global__ void k_softmax_xent(const float* x, const int32_t* labels,
                               int64_t N, int64_t K, float* p,
                               double* row_loss) {
  SYNCFAC_GRID_STRIDE(r, N) {
    const float* xr = x + r * K;
    float* pr = p + r * K;
    float mx = xr[0];
    for (int64_t k = 1; k < K; ++k)
      if (mx < xr[k])
        mx = xr[k];
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      pr[k] = expf(xr[k] - mx);
      sum += pr[k];
    }
    float inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < K; ++k)
      pr[k] *= inv;
    row_loss[r] = log(sum) - static_cast<double>(xr[labels[r]] - mx);
  }
}

__global__ void k_softmax_back(const float* p, const int32_t* labels,
                               int64_t N, int64_t K, float scale, float* d) {
  SYNCFAC_GRID_STRIDE(i, N * K) {
    int64_t r = i / K;
    int64_t k = i % K;
    float v = p[i] * scale;
    d[i] = k == labels[r] ? v - scale : v;
  }
}

__global__ void k_sigmoid_xent(const float* x, const float* t, int64_t N,
                               int64_t D, float* p, double* row_loss) {
  SYNCFAC_GRID_STRIDE(r, N) {
    double sum = 0.0;
    for (int64_t j = r * D; j < (r + 1) * D; ++j) {
      float v = x[j];
      float e = expf(-fabsf(v));
      float inv = 1.0f / (1.0f + e);
      p[j] = v >= 0.0f ? inv : e * inv;
      sum += static_cast<double>(fmaxf(v, 0.0f) - v * t[j])
             + static_cast<double>(log1pf(e));
    }
    row_loss[r] = sum;
  }
}

__global__ void k_sigmoid_back(const float* p, const float* t, int64_t n,
                               float scale, float* d) {
  SYNCFAC_GRID_STRIDE(i, n) d[i] = (p[i] - t[i]) * scale;
}

__global__ void k_count_correct(const float* x, const int32_t* labels,
                                int64_t N, int64_t K,
                                unsigned long long* counter) {
  SYNCFAC_GRID_STRIDE(r, N) {
    const float* xr = x + r * K;
    int64_t best = 0;
    for (int64_t k = 1; k < K; ++k)
      if (xr[best] < xr[k])
        best = k;
    if (best == labels[r])
      atomicAdd(counter, 1ull);
  }
}

constexpr int block = 256;

// Patch matrices larger than this many floats (256 MiB) are built a chunk
// of images at a time.
constexpr int64_t col_budget = int64_t{64} << 20;

bool fits_int(int64_t x) {
  return x >= 0 && x <= INT_MAX;
}

} // namespace

// -- the backend: set-up and helpers -----------------------------------------

cuda_backend::cuda_backend(int device)
  : device_(device), name_("cuda:" + std::to_string(device)) {
  // nop
}

cuda_backend::~cuda_backend() {
  cudaSetDevice(device_); // the handles and buffers belong to this device
  if (stream_ != nullptr)
    cudaStreamSynchronize(stream_);
  if (solver_ != nullptr)
    cusolverDnDestroy(solver_);
  if (blas_ != nullptr)
    cublasDestroy(blas_);
  // The stream belongs to ctx_, which lives on while tensors hold copies.
}

caf::error cuda_backend::init() {
  if (auto err = select("init"))
    return err;
  ctx_ = std::make_shared<cuda_context>(device_, name_);
  if (auto err = check(cudaStreamCreateWithFlags(&ctx_->stream,
                                                 cudaStreamNonBlocking),
                       "cudaStreamCreate"))
    return err;
  stream_ = ctx_->stream;
  if (auto err = check(cublasCreate(&blas_), "cublasCreate"))
    return err;
  if (auto err = check(cublasSetStream(blas_, stream_), "cublasSetStream"))
    return err;
  // Plain FP32 products (no TF32): results comparable with the CPU's.
  if (auto err = check(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH),
                       "cublasSetMathMode"))
    return err;
  if (auto err = check(cusolverDnCreate(&solver_), "cusolverDnCreate"))
    return err;
  if (auto err = check(cusolverDnSetStream(solver_, stream_),
                       "cusolverDnSetStream"))
    return err;
  return caf::none;
}

std::string cuda_backend::name() const {
  return name_;
}

int cuda_backend::threads() const {
  return 1; // one stream
}

caf::error cuda_backend::check(cudaError_t status, const char* what) const {
  if (status == cudaSuccess)
    return caf::none;
  cudaGetLastError(); // clear a non-sticky error
  auto code = status == cudaErrorMemoryAllocation ? ec::unavailable
                                                  : ec::internal;
  return make_error(code, name_ + ": " + what + " failed: "
                            + status_string(status));
}

caf::error cuda_backend::check(cublasStatus_t status,
                               const char* what) const {
  if (status == CUBLAS_STATUS_SUCCESS)
    return caf::none;
  auto code = status == CUBLAS_STATUS_ALLOC_FAILED ? ec::unavailable
                                                   : ec::internal;
  return make_error(code, name_ + ": " + what + " failed: "
                            + status_string(status));
}

caf::error cuda_backend::check(cusolverStatus_t status,
                               const char* what) const {
  if (status == CUSOLVER_STATUS_SUCCESS)
    return caf::none;
  auto code = status == CUSOLVER_STATUS_ALLOC_FAILED ? ec::unavailable
                                                     : ec::internal;
  return make_error(code, name_ + ": " + what + " failed: "
                            + status_string(status));
}

caf::error cuda_backend::check_launch(const char* what) const {
  return check(cudaGetLastError(), what);
}

caf::error cuda_backend::select(const char* op) const {
  auto status = cudaSetDevice(device_);
  if (status == cudaSuccess)
    return caf::none;
  cudaGetLastError();
  return make_error(ec::unavailable, name_ + ": " + op
                                       + ": cannot select the device: "
                                       + status_string(status));
}

caf::error cuda_backend::upload(float* dst, const float* src, int64_t n,
                                const char* what) {
  return to_device(dst, src, static_cast<size_t>(n) * sizeof(float), what);
}

caf::error cuda_backend::download(float* dst, const float* src, int64_t n,
                                  const char* what) {
  return to_host(dst, src, static_cast<size_t>(n) * sizeof(float), what);
}

caf::error cuda_backend::to_device(void* dst, const void* src, size_t bytes,
                                   const char* what) {
  return transfer(dst, src, bytes, cudaMemcpyHostToDevice,
                  ctx_->bytes_to_device, what);
}

caf::error cuda_backend::to_host(void* dst, const void* src, size_t bytes,
                                 const char* what) {
  return transfer(dst, src, bytes, cudaMemcpyDeviceToHost,
                  ctx_->bytes_to_host, what);
}

caf::error cuda_backend::transfer(void* dst, const void* src, size_t bytes,
                                  cudaMemcpyKind kind,
                                  std::atomic<int64_t>& counter,
                                  const char* what) {
  if (bytes == 0)
    return caf::none;
  counter += static_cast<int64_t>(bytes);
  return check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), what);
}

caf::error cuda_backend::sync(const char* what) {
  return check(cudaStreamSynchronize(stream_), what);
}

// -- device copies of tensors -------------------------------------------------

cuda_context::cuda_context(int dev, std::string nm)
  : device(dev), name(std::move(nm)) {
  // nop
}

cuda_context::~cuda_context() {
  // The last copy may die on any thread, in the middle of another
  // backend's call: leave that thread's current device as it was.
  device_guard on{device};
  if (stream != nullptr)
    cudaStreamSynchronize(stream);
  free_pool();
  if (stream != nullptr)
    cudaStreamDestroy(stream);
}

void cuda_context::free_pool() noexcept {
  for (auto& [capacity, block] : free_)
    cudaFree(block);
  free_.clear();
}

caf::expected<float*> cuda_context::allocate(int64_t n, int64_t& capacity,
                                             const char* what) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = free_.lower_bound(n);
  if (i != free_.end() && i->first <= 2 * n + 1024) {
    capacity = i->first;
    auto* block = i->second;
    free_.erase(i);
    return block;
  }
  if (n == 0) {
    capacity = 0;
    return static_cast<float*>(nullptr);
  }
  device_guard on{device};
  auto bytes = static_cast<size_t>(n) * sizeof(float);
  void* p = nullptr;
  auto status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    cudaStreamSynchronize(stream);
    free_pool();
    status = cudaMalloc(&p, bytes);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    return make_error(ec::unavailable,
                      name + ": cannot allocate " + std::to_string(bytes)
                        + " bytes (" + bytes_string(static_cast<int64_t>(
                          bytes))
                        + ") for " + what + ": " + status_string(status));
  }
  capacity = n;
  return static_cast<float*>(p);
}

void cuda_context::release(float* block, int64_t capacity) noexcept {
  if (block == nullptr)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  free_.emplace(capacity, block);
}

void cuda_copy::copy_to_host(float* dst, int64_t n) const {
  if (n == 0)
    return;
  // Another thread may read a tensor its device actor handed over: select
  // the device here, and queue on the stream that wrote the values. A
  // backend of another GPU may be reading this tensor as its input: its
  // device is current again afterwards.
  ctx_->bytes_to_host += n * static_cast<int64_t>(sizeof(float));
  device_guard on{ctx_->device};
  auto status = on.status();
  if (status == cudaSuccess)
    status = cudaMemcpyAsync(dst, block_, static_cast<size_t>(n)
                                            * sizeof(float),
                             cudaMemcpyDeviceToHost, ctx_->stream);
  if (status == cudaSuccess)
    status = cudaStreamSynchronize(ctx_->stream);
  if (status != cudaSuccess)
    throw std::runtime_error(ctx_->name + ": copying a tensor of "
                             + std::to_string(n)
                             + " values to the host failed: "
                             + status_string(status));
}

cuda_copy* cuda_backend::resident(const tensor& x) const noexcept {
  if (x.where() == residency::host)
    return nullptr;
  auto* copy = dynamic_cast<cuda_copy*>(x.device().get());
  return copy != nullptr && copy->context() == ctx_.get() ? copy : nullptr;
}

caf::error cuda_backend::input(const tensor& x, device_buffer<float>& staging,
                               const char* what, const float*& values,
                               int64_t count) {
  if (auto* copy = resident(x)) {
    values = copy->data();
    return caf::none;
  }
  auto n = count >= 0 ? std::min(count, x.size()) : x.size();
  if (auto err = staging.reserve(n, name_, what))
    return err;
  if (auto err = upload(staging.get(), x.data(), n, what))
    return err;
  values = staging.get();
  return caf::none;
}

caf::expected<std::shared_ptr<cuda_copy>>
cuda_backend::block_for(const tensor& y, int64_t n, const char* what) {
  auto own = std::dynamic_pointer_cast<cuda_copy>(y.device());
  if (own != nullptr && own->context() == ctx_.get() && own->capacity() >= n)
    return own;
  int64_t capacity = 0;
  auto block = ctx_->allocate(n, capacity, what);
  if (!block)
    return block.error();
  return std::make_shared<cuda_copy>(ctx_, *block, capacity);
}

caf::error cuda_backend::output(tensor& y, const tensor_shape& shape,
                                const char* what, float*& values) {
  auto copy = block_for(y, element_count(shape), what);
  if (!copy)
    return copy.error();
  values = (*copy)->data();
  y.resize(shape);
  y.attach_device(std::move(*copy), residency::device);
  return caf::none;
}

caf::error cuda_backend::copy_in(const tensor& x, float* dst,
                                 const char* what) {
  if (x.size() == 0)
    return caf::none;
  if (auto* copy = resident(x))
    return check(cudaMemcpyAsync(dst, copy->data(),
                                 static_cast<size_t>(x.size()) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream_),
                 what);
  return upload(dst, x.data(), x.size(), what);
}

caf::error cuda_backend::make_resident(tensor& x) {
  if (resident(x) != nullptr)
    return caf::none;
  if (auto err = select("make_resident"))
    return err;
  auto copy = block_for(x, x.size(), "a resident tensor");
  if (!copy)
    return copy.error();
  // Read through const: the non-const accessor would mark a copy stale.
  const auto& values = static_cast<const tensor&>(x);
  if (auto err = upload((*copy)->data(), values.data(), x.size(),
                        "make_resident: copy values"))
    return err;
  x.attach_device(std::move(*copy), residency::both);
  return caf::none;
}

caf::error cuda_backend::reshape_copy(const tensor& x,
                                      const tensor_shape& shape, tensor& y) {
  // Host values, a reshape in place and a wrong count: the base class's.
  auto* src = resident(x);
  if (src == nullptr || &x == &y || element_count(shape) != x.size())
    return backend::reshape_copy(x, shape, y);
  if (auto err = select("reshape_copy"))
    return err;
  float* dst = nullptr;
  if (auto err = output(y, shape, "a reshaped copy", dst))
    return err;
  return check(cudaMemcpyAsync(dst, src->data(),
                               static_cast<size_t>(x.size()) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               "reshape_copy: device copy");
}

caf::error cuda_backend::gemm_rm(bool trans_a, bool trans_b, int64_t m,
                                 int64_t n, int64_t k, float alpha,
                                 const float* A, int64_t lda, const float* B,
                                 int64_t ldb, float beta, float* C,
                                 int64_t ldc, const char* what) {
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda)
      || !fits_int(ldb) || !fits_int(ldc))
    return make_error(ec::invalid_argument,
                      name_ + ": " + what + ": product [" + std::to_string(m)
                        + ", " + std::to_string(k) + "] x ["
                        + std::to_string(k) + ", " + std::to_string(n)
                        + "] exceeds cuBLAS's 32-bit dimensions");
  if (m == 0 || n == 0)
    return caf::none;
  // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, and the
  // column-major view of a row-major buffer is its transpose.
  return check(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m),
                           static_cast<int>(k), &alpha, B,
                           static_cast<int>(ldb), A, static_cast<int>(lda),
                           &beta, C, static_cast<int>(ldc)),
               what);
}

caf::error cuda_backend::gemm_batched_rm(
  bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
  int64_t stride_c, const char* what) {
  if (!fits_int(batch) || !fits_int(m) || !fits_int(n) || !fits_int(k)
      || !fits_int(lda) || !fits_int(ldb) || !fits_int(ldc))
    return make_error(ec::invalid_argument,
                      name_ + ": " + what + ": " + std::to_string(batch)
                        + " products [" + std::to_string(m) + ", "
                        + std::to_string(k) + "] x [" + std::to_string(k)
                        + ", " + std::to_string(n)
                        + "] exceed cuBLAS's 32-bit dimensions");
  if (batch == 0 || m == 0 || n == 0)
    return caf::none;
  // As in gemm_rm: each row-major entry is the column-major
  // Cᵀ = op(B)ᵀ op(A)ᵀ; a stride of 0 reads the same B for every entry.
  return check(cublasSgemmStridedBatched(
                 blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                 static_cast<int>(m), static_cast<int>(k), &alpha, B,
                 static_cast<int>(ldb), stride_b, A, static_cast<int>(lda),
                 stride_a, &beta, C, static_cast<int>(ldc), stride_c,
                 static_cast<int>(batch)),
               what);
}

caf::error cuda_backend::column_sums(const float* x, int64_t rows,
                                     int64_t cols, float* db,
                                     const char* what) {
  if (cols == 0)
    return caf::none;
  if (rows == 0) {
    k_fill<<<grid_for(cols), block, 0, stream_>>>(db, cols, 0.0f);
    return check_launch(what);
  }
  if (!fits_int(rows) || !fits_int(cols))
    return make_error(ec::invalid_argument,
                      name_ + ": " + what + ": [" + std::to_string(rows)
                        + ", " + std::to_string(cols)
                        + "] exceeds cuBLAS's 32-bit dimensions");
  // A reallocation (even one that failed: reserve frees the old block
  // first) leaves no ones behind.
  if (rows > ones_.capacity())
    ones_filled_ = 0;
  if (auto err = ones_.reserve(rows, name_, "a vector of ones"))
    return err;
  if (ones_filled_ < rows) {
    k_fill<<<grid_for(rows), block, 0, stream_>>>(ones_.get(), rows, 1.0f);
    if (auto err = check_launch(what))
      return err;
    ones_filled_ = rows;
  }
  float one = 1.0f;
  float zero = 0.0f;
  // The column-major view of x is xᵀ [cols, rows]: db = xᵀ · 1.
  return check(cublasSgemv(blas_, CUBLAS_OP_N, static_cast<int>(cols),
                           static_cast<int>(rows), &one, x,
                           static_cast<int>(cols), ones_.get(), 1, &zero, db,
                           1),
               what);
}

// -- the backend's kernels ---------------------------------------------------

caf::error cuda_backend::gemm(const tensor& a, bool trans_a, const tensor& b,
                              bool trans_b, float alpha, float beta,
                              tensor& c) {
  auto sizes = cpu::check_gemm("gemm", a, trans_a, b, trans_b, beta, c);
  if (!sizes)
    return std::move(sizes.error());
  return run_gemm("gemm", *sizes, a, trans_a, b, trans_b, alpha, beta, c);
}

caf::error cuda_backend::gemm_batched(const tensor& a, bool trans_a,
                                      const tensor& b, bool trans_b,
                                      float alpha, float beta, tensor& c) {
  auto sizes = cpu::check_gemm_batched("gemm_batched", a, trans_a, b,
                                       trans_b, beta, c);
  if (!sizes)
    return std::move(sizes.error());
  return run_gemm("gemm_batched", *sizes, a, trans_a, b, trans_b, alpha,
                  beta, c);
}

caf::error cuda_backend::run_gemm(const char* op, const cpu::gemm_sizes& s,
                                  const tensor& a, bool trans_a,
                                  const tensor& b, bool trans_b, float alpha,
                                  float beta, tensor& c) {
  auto what = [op](const char* step) { return std::string{op} + step; };
  auto c_size = s.batch * s.m * s.n;
  if (auto err = select(op))
    return err;
  if (s.k == 0) {
    // No products: c = beta c.
    if (beta == 0.0f) {
      c.resize(s.c_shape);
      c.fill(0.0f);
    } else {
      for (auto& v : c.values())
        v *= beta;
    }
    return caf::none;
  }
  const float* a_dev = nullptr;
  const float* b_dev = nullptr;
  if (auto err = input(a, in_a_, what(": copy a").c_str(), a_dev))
    return err;
  if (auto err = input(b, in_b_, what(": copy b").c_str(), b_dev))
    return err;
  // c may be a or b (gemm's contract): then the product goes to a
  // workspace and is copied into c afterwards.
  bool aliased = &c == &a || &c == &b;
  float* c_dev = nullptr;
  if (aliased) {
    if (auto err = out_a_.reserve(c_size, name_, what(" result c").c_str()))
      return err;
    c_dev = out_a_.get();
    if (beta != 0.0f)
      if (auto err = copy_in(c, c_dev, what(": copy c").c_str()))
        return err;
  } else {
    // With beta != 0, c's current values must be in its device copy.
    if (beta != 0.0f)
      if (auto err = make_resident(c))
        return err;
    if (auto err = output(c, s.c_shape, what(" result c").c_str(), c_dev))
      return err;
  }
  // Row-major operands: a's (and b's) leading dimension is its last one.
  auto lda = a.dim(a.rank() - 1);
  auto ldb = b.dim(b.rank() - 1);
  if (s.batch == 1 || (s.shared_b && !trans_a)) {
    // One entry, or untransposed entries of a stacked into one
    // [batch * m, k] matrix times the shared b: one SGEMM, faster than a
    // batch of small ones.
    if (auto err = gemm_rm(trans_a, trans_b, s.batch * s.m, s.n, s.k, alpha,
                           a_dev, lda, b_dev, ldb, beta, c_dev, s.n,
                           what(": cublasSgemm").c_str()))
      return err;
  } else if (auto err = gemm_batched_rm(
               trans_a, trans_b, s.batch, s.m, s.n, s.k, alpha, a_dev, lda,
               s.m * s.k, b_dev, ldb, s.shared_b ? 0 : s.k * s.n, beta, c_dev,
               s.n, s.m * s.n, what(": cublasSgemmStridedBatched").c_str())) {
    return err;
  }
  if (!aliased)
    return caf::none;
  float* dst = nullptr;
  if (auto err = output(c, s.c_shape, what(" result c").c_str(), dst))
    return err;
  return check(cudaMemcpyAsync(dst, c_dev,
                               static_cast<size_t>(c_size) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               what(": copy the product into c").c_str());
}

namespace {

/// Images per im2col chunk so that a chunk's patches stay within budget.
int64_t chunk_images(const conv2d_geometry& g) {
  auto per_image = std::max<int64_t>(1, g.locations() * g.patch_size());
  return std::max<int64_t>(1, std::min(g.batch, col_budget / per_image));
}

} // namespace

caf::error cuda_backend::dense_forward(const tensor& x, const tensor& w,
                                       const tensor& b, activation act,
                                       tensor& y) {
  const char* op = "dense_forward";
  if (auto err = cpu::check_dense_forward(op, x, w, b))
    return err;
  auto n = x.dim(0);
  auto in = w.dim(0);
  auto out = w.dim(1);
  if (auto err = select(op))
    return err;
  const float *xd = nullptr, *wd = nullptr, *bd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "dense_forward: copy x", xd))
    return err;
  if (auto err = input(w, in_b_, "dense_forward: copy w", wd))
    return err;
  if (auto err = input(b, in_c_, "dense_forward: copy b", bd))
    return err;
  if (auto err = output(y, {n, out}, "dense output", yd))
    return err;
  if (in == 0) {
    k_fill<<<grid_for(n * out), block, 0, stream_>>>(yd, n * out, 0.0f);
  } else if (auto err = gemm_rm(false, false, n, out, in, 1.0f, xd, in, wd,
                                out, 0.0f, yd, out,
                                "dense_forward: cublasSgemm")) {
    return err;
  }
  k_bias_act<<<grid_for(n * out), block, 0, stream_>>>(yd, bd, n, out, act);
  return check_launch("dense_forward: bias and activation");
}

caf::error cuda_backend::dense_backward(const tensor& x, const tensor& w,
                                        const tensor& y, const tensor& dy,
                                        activation act, tensor& ds,
                                        tensor& dw, tensor& db, tensor* dx) {
  const char* op = "dense_backward";
  if (auto err = cpu::check_dense_backward(op, x, w, y, dy))
    return err;
  auto n = x.dim(0);
  auto in = w.dim(0);
  auto out = w.dim(1);
  if (auto err = select(op))
    return err;
  const float *xd = nullptr, *wd = nullptr, *yd = nullptr, *dyd = nullptr;
  float *dsd = nullptr, *dwd = nullptr, *dbd = nullptr, *dxd = nullptr;
  if (auto err = input(x, in_a_, "dense_backward: copy x", xd))
    return err;
  if (auto err = input(w, in_b_, "dense_backward: copy w", wd))
    return err;
  if (auto err = input(y, in_c_, "dense_backward: copy y", yd))
    return err;
  if (auto err = input(dy, in_d_, "dense_backward: copy dy", dyd))
    return err;
  if (auto err = output(ds, {n, out}, "dense ds", dsd))
    return err;
  if (auto err = output(dw, {in, out}, "dense dw", dwd))
    return err;
  if (auto err = output(db, {out}, "dense db", dbd))
    return err;
  if (dx != nullptr)
    if (auto err = output(*dx, {n, in}, "dense dx", dxd))
      return err;
  k_act_backward<<<grid_for(n * out), block, 0, stream_>>>(yd, dyd, dsd,
                                                           n * out, act);
  if (auto err = check_launch("dense_backward: activation gradient"))
    return err;
  if (n == 0) {
    k_fill<<<grid_for(in * out), block, 0, stream_>>>(dwd, in * out, 0.0f);
  } else if (auto err = gemm_rm(true, false, in, out, n, 1.0f, xd, in, dsd,
                                out, 0.0f, dwd, out,
                                "dense_backward: dw = x^T ds")) {
    return err;
  }
  if (auto err = column_sums(dsd, n, out, dbd, "dense_backward: db"))
    return err;
  if (dx != nullptr) {
    if (out == 0) {
      k_fill<<<grid_for(n * in), block, 0, stream_>>>(dxd, n * in, 0.0f);
    } else if (auto err = gemm_rm(false, true, n, in, out, 1.0f, dsd, out, wd,
                                  out, 0.0f, dxd, in,
                                  "dense_backward: dx = ds w^T")) {
      return err;
    }
  }
  return check_launch("dense_backward");
}

caf::error cuda_backend::conv2d_forward(const conv2d_geometry& g,
                                        const tensor& x, const tensor& w,
                                        const tensor& b, activation act,
                                        tensor& y) {
  const char* op = "conv2d_forward";
  if (auto err = cpu::check_conv_forward(op, g, x, w, b))
    return err;
  if (auto err = select(op))
    return err;
  auto T = g.locations();
  auto P = g.patch_size();
  auto O = g.out_c;
  auto rows = g.batch * T;
  auto chunk = chunk_images(g);
  if (auto err = col_.reserve(chunk * T * P, name_, "conv2d im2col patches"))
    return err;
  const float *xd = nullptr, *wd = nullptr, *bd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "conv2d_forward: copy x", xd))
    return err;
  if (auto err = input(w, in_b_, "conv2d_forward: copy w", wd))
    return err;
  if (auto err = input(b, in_c_, "conv2d_forward: copy b", bd))
    return err;
  if (auto err = output(y, g.output_shape(), "conv2d output", yd))
    return err;
  auto d = conv_dims_of(g);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    auto images = std::min(chunk, g.batch - n0);
    auto count = images * T;
    launch_im2col(stream_, xd, d, nullptr, n0 * T, count, P, col_.get());
    if (auto err = check_launch("conv2d_forward: im2col"))
      return err;
    if (P == 0) {
      k_fill<<<grid_for(count * O), block, 0, stream_>>>(yd + n0 * T * O,
                                                         count * O, 0.0f);
    } else if (auto err = gemm_rm(false, false, count, O, P, 1.0f, col_.get(),
                                  P, wd, O, 0.0f, yd + n0 * T * O, O,
                                  "conv2d_forward: patches x kernel")) {
      return err;
    }
  }
  k_bias_act<<<grid_for(rows * O), block, 0, stream_>>>(yd, bd, rows, O, act);
  return check_launch("conv2d_forward: bias and activation");
}

caf::error cuda_backend::conv2d_backward(const conv2d_geometry& g,
                                         const tensor& x, const tensor& w,
                                         const tensor& y, const tensor& dy,
                                         activation act, tensor& ds,
                                         tensor& dw, tensor& db, tensor* dx) {
  return conv_backward("conv2d_backward", g, x, w, y, dy, act, ds, &dw, &db,
                       dx);
}

caf::error cuda_backend::conv2d_backward_data(const conv2d_geometry& g,
                                              const tensor& x,
                                              const tensor& w,
                                              const tensor& y,
                                              const tensor& dy,
                                              activation act, tensor& ds,
                                              tensor* dx) {
  return conv_backward("conv2d_backward_data", g, x, w, y, dy, act, ds,
                       nullptr, nullptr, dx);
}

caf::error cuda_backend::conv_backward(const char* op,
                                       const conv2d_geometry& g,
                                       const tensor& x, const tensor& w,
                                       const tensor& y, const tensor& dy,
                                       activation act, tensor& ds,
                                       tensor* dw, tensor* db, tensor* dx) {
  // Without dw (and db) only ds and dx: no patches, no weight product.
  bool params = dw != nullptr && db != nullptr;
  if (auto err = cpu::check_conv_backward(op, g, x, w, y, dy))
    return err;
  if (auto err = select(op))
    return err;
  auto T = g.locations();
  auto P = g.patch_size();
  auto O = g.out_c;
  auto rows = g.batch * T;
  auto chunk = chunk_images(g);
  if (auto err = col_.reserve(params || dx != nullptr ? chunk * T * P : 0,
                              name_, "conv2d im2col patches"))
    return err;
  const float *xd = nullptr, *wd = nullptr, *yd = nullptr, *dyd = nullptr;
  float *dsd = nullptr, *dwd = nullptr, *dbd = nullptr, *dxd = nullptr;
  if (auto err = input(x, in_a_, "conv2d_backward: copy x", xd))
    return err;
  if (auto err = input(w, in_b_, "conv2d_backward: copy w", wd))
    return err;
  if (auto err = input(y, in_c_, "conv2d_backward: copy y", yd))
    return err;
  if (auto err = input(dy, in_d_, "conv2d_backward: copy dy", dyd))
    return err;
  if (auto err = output(ds, g.output_shape(), "conv2d ds", dsd))
    return err;
  if (params) {
    if (auto err = output(*dw, g.kernel_shape(), "conv2d dw", dwd))
      return err;
    if (auto err = output(*db, {O}, "conv2d db", dbd))
      return err;
  }
  if (dx != nullptr)
    if (auto err = output(*dx, g.input_shape(), "conv2d dx", dxd))
      return err;
  k_act_backward<<<grid_for(rows * O), block, 0, stream_>>>(yd, dyd, dsd,
                                                            rows * O, act);
  if (auto err = check_launch("conv2d_backward: activation gradient"))
    return err;
  if (params) {
    if (auto err = column_sums(dsd, rows, O, dbd, "conv2d_backward: db"))
      return err;
    if (g.batch == 0 || P == 0)
      launch_fill(stream_, dwd, P * O, 0.0f);
  }
  auto d = conv_dims_of(g);
  for (int64_t n0 = 0; n0 < g.batch && (params || dx != nullptr);
       n0 += chunk) {
    auto images = std::min(chunk, g.batch - n0);
    auto count = images * T;
    const float* ds_chunk = dsd + n0 * T * O;
    if (params) {
      launch_im2col(stream_, xd, d, nullptr, n0 * T, count, P, col_.get());
      if (auto err = check_launch("conv2d_backward: im2col"))
        return err;
      if (P > 0 && count > 0)
        if (auto err = gemm_rm(true, false, P, O, count, 1.0f, col_.get(), P,
                               ds_chunk, O, n0 == 0 ? 0.0f : 1.0f, dwd, O,
                               "conv2d_backward: dw = patches^T ds"))
          return err;
    }
    if (dx == nullptr)
      continue;
    // The patch gradients reuse the patch buffer (stream order keeps the
    // dw product ahead of the overwrite).
    if (O == 0) {
      k_fill<<<grid_for(count * P), block, 0, stream_>>>(col_.get(),
                                                         count * P, 0.0f);
    } else if (auto err = gemm_rm(false, true, count, P, O, 1.0f, ds_chunk,
                                  O, wd, O, 0.0f, col_.get(), P,
                                  "conv2d_backward: dpatches = ds w^T")) {
      return err;
    }
    k_col2im<<<grid_for(images * g.in_h * g.in_w * g.in_c), block, 0,
               stream_>>>(col_.get(), d, n0, images, dxd);
    if (auto err = check_launch("conv2d_backward: col2im"))
      return err;
  }
  // An empty batch queues only the fills above: check them too.
  return check_launch(op);
}

caf::error cuda_backend::activation_forward(activation act, const tensor& x,
                                            tensor& y) {
  const char* op = "activation_forward";
  if (auto err = select(op))
    return err;
  auto n = x.size();
  const float* xd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "activation_forward: copy x", xd))
    return err;
  if (auto err = output(y, x.shape(), "activation output", yd))
    return err;
  k_act_forward<<<grid_for(n), block, 0, stream_>>>(xd, yd, n, act);
  return check_launch(op);
}

caf::error cuda_backend::activation_backward(activation act, const tensor& y,
                                             const tensor& dy, tensor& dx) {
  const char* op = "activation_backward";
  if (auto err = cpu::expect_shape(op, "output gradient", dy.shape(),
                                   "output", y.shape()))
    return err;
  if (auto err = select(op))
    return err;
  auto n = y.size();
  const float *yd = nullptr, *dyd = nullptr;
  float* dxd = nullptr;
  if (auto err = input(y, in_a_, "activation_backward: copy y", yd))
    return err;
  if (auto err = input(dy, in_b_, "activation_backward: copy dy", dyd))
    return err;
  if (auto err = output(dx, y.shape(), "activation input gradient", dxd))
    return err;
  k_act_backward<<<grid_for(n), block, 0, stream_>>>(yd, dyd, dxd, n, act);
  return check_launch(op);
}

caf::error cuda_backend::max_pool_forward(const pool2d_geometry& g,
                                          const tensor& x, tensor& y,
                                          std::vector<int32_t>& argmax) {
  const char* op = "max_pool_forward";
  if (auto err = cpu::check_pool_forward(op, g, x))
    return err;
  if (auto err = select(op))
    return err;
  auto out = element_count(g.output_shape());
  if (auto err = argmax_.reserve(out, name_, "pooling argmax"))
    return err;
  const float* xd = nullptr;
  float* yd = nullptr;
  if (auto err = input(x, in_a_, "max_pool_forward: copy x", xd))
    return err;
  if (auto err = output(y, g.output_shape(), "pooling output", yd))
    return err;
  if (out > 0) {
    k_max_pool<<<grid_for(out), block, 0, stream_>>>(xd, dims_of(g), yd,
                                                     argmax_.get());
    if (auto err = check_launch(op))
      return err;
  }
  // The interface hands argmax to the host (the layer keeps it for the
  // backward pass); y stays on the device.
  std::vector<int32_t> args(static_cast<size_t>(out));
  if (out > 0)
    if (auto err = to_host(args.data(), argmax_.get(),
                           static_cast<size_t>(out) * sizeof(int32_t),
                           "max_pool_forward: copy argmax back"))
      return err;
  if (auto err = sync(op))
    return err;
  argmax = std::move(args);
  return caf::none;
}

caf::error cuda_backend::max_pool_backward(const pool2d_geometry& g,
                                           const tensor& dy,
                                           const std::vector<int32_t>& argmax,
                                           tensor& dx) {
  const char* op = "max_pool_backward";
  if (auto err = cpu::check_pool_backward(op, g, dy,
                                          static_cast<int64_t>(argmax.size())))
    return err;
  auto in_size = g.in_h * g.in_w * g.channels;
  auto out_size = g.out_h * g.out_w * g.channels;
  // Every index must stay inside its own image, as on the CPU (a stray
  // index would write out of bounds on the device).
  for (int64_t i = 0; i < dy.size(); ++i) {
    auto n = out_size > 0 ? i / out_size : 0;
    auto a = argmax[static_cast<size_t>(i)];
    if (a < n * in_size || a >= (n + 1) * in_size)
      return cpu::pool_index_outside(op, g, i, a);
  }
  if (auto err = select(op))
    return err;
  auto total = element_count(g.input_shape());
  if (auto err = argmax_.reserve(dy.size(), name_, "pooling argmax"))
    return err;
  const float* dyd = nullptr;
  float* dxd = nullptr;
  if (auto err = input(dy, in_a_, "max_pool_backward: copy dy", dyd))
    return err;
  if (auto err = output(dx, g.input_shape(), "pooling input gradient", dxd))
    return err;
  if (dy.size() > 0)
    if (auto err = to_device(argmax_.get(), argmax.data(),
                             argmax.size() * sizeof(int32_t),
                             "max_pool_backward: copy argmax"))
      return err;
  if (total > 0)
    if (auto err = check(cudaMemsetAsync(dxd, 0,
                                         static_cast<size_t>(total)
                                           * sizeof(float),
                                         stream_),
                         "max_pool_backward: clear dx"))
      return err;
  if (dy.size() > 0) {
    k_pool_scatter<<<grid_for(dy.size()), block, 0, stream_>>>(
      dyd, argmax_.get(), dy.size(), dxd);
    if (auto err = check_launch(op))
      return err;
  }
  return caf::none;
}

caf::error cuda_backend::softmax_xent_forward(const tensor& logits,
                                              const label_vector& labels,
                                              tensor& probs, float& loss) {
  const char* op = "softmax_xent_forward";
  if (auto err = cpu::check_labels(op, "logits", logits.shape(), labels))
    return err;
  if (auto err = select(op))
    return err;
  auto N = logits.dim(0);
  auto K = logits.dim(1);
  if (auto err = labels_.reserve(N, name_, "labels"))
    return err;
  if (auto err = row_loss_.reserve(N, name_, "per-row losses"))
    return err;
  const float* xd = nullptr;
  float* pd = nullptr;
  if (auto err = input(logits, in_a_, "softmax_xent_forward: copy logits",
                       xd))
    return err;
  if (auto err = output(probs, logits.shape(), "softmax probabilities", pd))
    return err;
  if (N > 0)
    if (auto err = to_device(labels_.get(), labels.data(),
                             labels.size() * sizeof(int32_t),
                             "softmax_xent_forward: copy labels"))
      return err;
  host_losses_.resize(static_cast<size_t>(N));
  if (N > 0 && K > 0) {
    k_softmax_xent<<<grid_for(N, 128), 128, 0, stream_>>>(
      xd, labels_.get(), N, K, pd, row_loss_.get());
    if (auto err = check_launch(op))
      return err;
    if (auto err = to_host(host_losses_, row_loss_.get(),
                           "softmax_xent_forward: copy losses back"))
      return err;
  }
  if (auto err = sync(op))
    return err;
  // Summed in row order on the host: the CPU's order.
  loss = cpu::mean_row_loss(host_losses_);
  return caf::none;
}

caf::error cuda_backend::softmax_xent_backward(const tensor& probs,
                                               const label_vector& labels,
                                               tensor& dlogits) {
  const char* op = "softmax_xent_backward";
  if (auto err = cpu::check_labels(op, "probs", probs.shape(), labels))
    return err;
  if (auto err = select(op))
    return err;
  auto N = probs.dim(0);
  auto K = probs.dim(1);
  if (auto err = labels_.reserve(N, name_, "labels"))
    return err;
  const float* pd = nullptr;
  float* gd = nullptr;
  if (auto err = input(probs, in_a_, "softmax_xent_backward: copy probs",
                       pd))
    return err;
  if (auto err = output(dlogits, probs.shape(), "logit gradients", gd))
    return err;
  if (N > 0)
    if (auto err = to_device(labels_.get(), labels.data(),
                             labels.size() * sizeof(int32_t),
                             "softmax_xent_backward: copy labels"))
      return err;
  auto scale = N > 0 ? 1.0f / static_cast<float>(N) : 0.0f;
  if (N * K > 0) {
    k_softmax_back<<<grid_for(N * K), block, 0, stream_>>>(
      pd, labels_.get(), N, K, scale, gd);
    if (auto err = check_launch(op))
      return err;
  }
  return caf::none;
}

caf::error cuda_backend::sigmoid_xent_forward(const tensor& logits,
                                              const tensor& targets,
                                              tensor& probs, float& loss) {
  const char* op = "sigmoid_xent_forward";
  if (auto err = cpu::check_sigmoid_pair(op, "logits", logits, targets))
    return err;
  if (auto err = select(op))
    return err;
  auto N = logits.dim(0);
  auto D = logits.dim(1);
  if (auto err = row_loss_.reserve(N, name_, "per-row losses"))
    return err;
  const float *xd = nullptr, *td = nullptr;
  float* pd = nullptr;
  if (auto err = input(logits, in_a_, "sigmoid_xent_forward: copy logits",
                       xd))
    return err;
  if (auto err = input(targets, in_b_, "sigmoid_xent_forward: copy targets",
                       td))
    return err;
  if (auto err = output(probs, logits.shape(), "sigmoid probabilities", pd))
    return err;
  host_losses_.resize(static_cast<size_t>(N));
  if (N > 0) {
    k_sigmoid_xent<<<grid_for(N, 128), 128, 0, stream_>>>(
      xd, td, N, D, pd, row_loss_.get());
    if (auto err = check_launch(op))
      return err;
    if (auto err = to_host(host_losses_, row_loss_.get(),
                           "sigmoid_xent_forward: copy losses back"))
      return err;
  }
  if (auto err = sync(op))
    return err;
  loss = cpu::mean_row_loss(host_losses_);
  return caf::none;
}

caf::error cuda_backend::sigmoid_xent_backward(const tensor& probs,
                                               const tensor& targets,
                                               tensor& dlogits) {
  const char* op = "sigmoid_xent_backward";
  if (auto err = cpu::check_sigmoid_pair(op, "probs", probs, targets))
    return err;
  if (auto err = select(op))
    return err;
  auto N = probs.dim(0);
  auto n = probs.size();
  const float *pd = nullptr, *td = nullptr;
  float* gd = nullptr;
  if (auto err = input(probs, in_a_, "sigmoid_xent_backward: copy probs", pd))
    return err;
  if (auto err = input(targets, in_b_, "sigmoid_xent_backward: copy targets",
                       td))
    return err;
  if (auto err = output(dlogits, probs.shape(), "logit gradients", gd))
    return err;
  auto scale = N > 0 ? 1.0f / static_cast<float>(N) : 0.0f;
  k_sigmoid_back<<<grid_for(n), block, 0, stream_>>>(pd, td, n, scale, gd);
  return check_launch(op);
}

caf::expected<int64_t>
cuda_backend::count_correct(const tensor& logits, const label_vector& labels) {
  const char* op = "count_correct";
  if (auto err = cpu::check_labels(op, "logits", logits.shape(), labels))
    return err;
  auto N = logits.dim(0);
  auto K = logits.dim(1);
  if (N == 0 || K == 0)
    return int64_t{0};
  if (auto err = select(op))
    return err;
  if (auto err = labels_.reserve(N, name_, "labels"))
    return err;
  if (auto err = counter_.reserve(1, name_, "a counter"))
    return err;
  const float* xd = nullptr;
  if (auto err = input(logits, in_a_, "count_correct: copy logits", xd))
    return err;
  if (auto err = to_device(labels_.get(), labels.data(),
                           labels.size() * sizeof(int32_t),
                           "count_correct: copy labels"))
    return err;
  if (auto err = check(cudaMemsetAsync(counter_.get(), 0,
                                       sizeof(unsigned long long), stream_),
                       "count_correct: clear the counter"))
    return err;
  k_count_correct<<<grid_for(N, 128), 128, 0, stream_>>>(
    xd, labels_.get(), N, K, counter_.get());
  if (auto err = check_launch(op))
    return err;
  unsigned long long correct = 0;
  if (auto err = to_host(&correct, counter_.get(), sizeof(correct),
                         "count_correct: copy the count back"))
    return err;
  if (auto err = sync(op))
    return err;
  return static_cast<int64_t>(correct);
}

caf::error cuda_backend::reserve_workspace(int64_t bytes) {
  if (bytes < 0)
    return make_error(ec::invalid_argument,
                      name_ + ": reserve_workspace: negative size "
                        + std::to_string(bytes));
  if (auto err = select("reserve_workspace"))
    return err;
  return reserved_.reserve((bytes + 3) / 4, name_, "the reserved workspace");
}

// -- benchmark helper --------------------------------------------------------

caf::expected<double> device_sgemm_seconds(int device, int64_t n, int reps,
                                           int64_t batch) {
  if (n < 1 || n > 32768 || reps < 1 || batch < 1
      || batch * n * n > (int64_t{1} << 31))
    return make_error(ec::invalid_argument,
                      "device_sgemm_seconds: n " + std::to_string(n)
                        + " (1..32768), reps " + std::to_string(reps)
                        + " (>= 1) or batch " + std::to_string(batch)
                        + " (>= 1, batch n² <= 2^31) out of range");
  auto made = make_cuda_backend(device);
  if (!made)
    return made.error();
  auto& dev = static_cast<cuda_backend&>(**made);
  const char* op = "device_sgemm_seconds";
  auto size = batch * n * n;
  if (auto err = dev.in_a_.reserve(size, dev.name_, "benchmark operand a"))
    return err;
  if (auto err = dev.in_b_.reserve(size, dev.name_, "benchmark operand b"))
    return err;
  if (auto err = dev.out_a_.reserve(size, dev.name_, "benchmark result"))
    return err;
  launch_fill(dev.stream_, dev.in_a_.get(), size, 0.5f);
  launch_fill(dev.stream_, dev.in_b_.get(), size, 0.25f);
  if (auto err = dev.check_launch(op))
    return err;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  if (auto err = dev.check(cudaEventCreate(&start), "cudaEventCreate"))
    return err;
  if (auto err = dev.check(cudaEventCreate(&stop), "cudaEventCreate")) {
    cudaEventDestroy(start);
    return err;
  }
  auto product = [&] {
    if (batch > 1)
      return dev.gemm_batched_rm(false, false, batch, n, n, n, 1.0f,
                                 dev.in_a_.get(), n, n * n, dev.in_b_.get(),
                                 n, n * n, 0.0f, dev.out_a_.get(), n, n * n,
                                 "benchmark cublasSgemmStridedBatched");
    return dev.gemm_rm(false, false, n, n, n, 1.0f, dev.in_a_.get(), n,
                       dev.in_b_.get(), n, 0.0f, dev.out_a_.get(), n,
                       "benchmark cublasSgemm");
  };
  double best = -1.0;
  caf::error err = product(); // warm-up
  for (int r = 0; r < reps && !err; ++r) {
    err = dev.check(cudaEventRecord(start, dev.stream_), "cudaEventRecord");
    if (!err)
      err = product();
    if (!err)
      err = dev.check(cudaEventRecord(stop, dev.stream_), "cudaEventRecord");
    if (!err)
      err = dev.check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    if (!err)
      err = dev.check(cudaEventElapsedTime(&ms, start, stop),
                      "cudaEventElapsedTime");
    if (!err && (best < 0.0 || ms * 1e-3 < best))
      best = ms * 1e-3;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (err)
    return err;
  return best;
}

// -- factory -----------------------------------------------------------------

caf::expected<std::unique_ptr<backend>> make_cuda_backend(int device) {
  int count = 0;
  auto status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return make_error(ec::unavailable,
                      "device gpu:" + std::to_string(device)
                        + " is not available: no usable CUDA device ("
                        + status_string(status) + ")");
  }
  if (device < 0 || device >= count)
    return make_error(ec::unavailable,
                      "device gpu:" + std::to_string(device)
                        + " is not available: this machine has "
                        + std::to_string(count) + " CUDA device"
                        + (count == 1 ? "" : "s"));
  auto result = std::make_unique<cuda_backend>(device);
  if (auto err = result->init())
    return make_error(ec::unavailable,
                      "device gpu:" + std::to_string(device)
                        + " could not be initialised: " + render(err));
  return std::unique_ptr<backend>{std::move(result)};
}

transfer_totals transfers(const backend& dev) noexcept {
  auto* cuda = dynamic_cast<const cuda_backend*>(&dev);
  if (cuda == nullptr || cuda->ctx_ == nullptr)
    return {};
  return {cuda->ctx_->bytes_to_device.load(),
          cuda->ctx_->bytes_to_host.load()};
}

kfac_kernels* kfac_of(backend& dev) noexcept {
  return dynamic_cast<cuda_backend*>(&dev);
}

} // namespace syncfac::cuda
