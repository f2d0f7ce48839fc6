#pragma once

// Internal to kernels/cuda/*.cu: the CUDA backend class, its device
// buffers and the status checks. Not included by anything outside.

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include "kernels/cpu/checks.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cuda {

/// "cudaErrorMemoryAllocation: out of memory".
std::string status_string(cudaError_t status);
std::string status_string(cublasStatus_t status);
std::string status_string(cusolverStatus_t status);

/// "3.0 GiB" style sizes for messages.
std::string bytes_string(int64_t bytes);

/// Grid size for a 1-d launch over n elements with `block` threads each,
/// capped so that grid-stride loops cover the rest.
inline unsigned grid_for(int64_t n, int block = 256) {
  auto blocks = (n + block - 1) / block;
  if (blocks < 1)
    blocks = 1;
  if (blocks > 65535 * 8)
    blocks = 65535 * 8;
  return static_cast<unsigned>(blocks);
}

/// Geometry of a convolution as plain integers for the kernels.
struct conv_dims {
  int64_t N, H, W, C, KH, KW, O, SH, SW, OH, OW, PT, PL;
};

conv_dims conv_dims_of(const conv2d_geometry& g);

/// Geometry of a pooling as plain integers for the kernels.
struct pool_dims {
  int64_t N, H, W, C, KH, KW, SH, SW, OH, OW, PT, PL;
};

inline pool_dims dims_of(const pool2d_geometry& g) {
  return {g.batch,    g.in_h,    g.in_w,   g.channels, g.k_h,  g.k_w,
          g.stride_h, g.stride_w, g.out_h, g.out_w,    g.pad_top, g.pad_left};
}

#define SYNCFAC_GRID_STRIDE(i, n)                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x)             \
                   + threadIdx.x;                                            \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__device__ inline float act_forward(activation act, float x) {
  switch (act) {
    case activation::identity: return x;
    case activation::relu: return (x > 0.0f || x != x) ? x : 0.0f;
    case activation::tanh: return tanhf(x);
    case activation::sigmoid: return 1.0f / (1.0f + expf(-x));
  }
  return x;
}

__device__ inline float act_grad(activation act, float y, float dy) {
  switch (act) {
    case activation::identity: return dy;
    case activation::relu: return y > 0.0f ? dy : 0.0f;
    case activation::tanh: return dy * (1.0f - y * y);
    case activation::sigmoid: return dy * y * (1.0f - y);
  }
  return dy;
}


/// Queues the im2col of `count` output rows into col [count, ld]: row r is
/// the patch of flat output row rows[first + r] (first + r when rows is
/// null), flat row = n * T + t; patches are ordered (kh, kw, c), padding
/// reads 0, and ld = P + 1 appends a 1 (the bias input).
void launch_im2col(cudaStream_t stream, const float* x, const conv_dims& d,
                   const int64_t* rows, int64_t first, int64_t count,
                   int64_t ld, float* col);

/// Queues x[0, n) = value.
void launch_fill(cudaStream_t stream, float* x, int64_t n, float value);

/// Makes `device` current on the calling thread for its scope and then
/// restores the device that was current before. For the CUDA calls a
/// device copy makes on its own (a fetch, the context's teardown): they can
/// run in the middle of another backend's kernel call on the same thread
/// (an input resident on another GPU, the last copy of another context
/// released by an output), and that backend's later launches, cuBLAS and
/// cuSOLVER calls need its own device to stay current.
class device_guard {
public:
  explicit device_guard(int device) noexcept : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device_)
      status_ = cudaSetDevice(device_);
  }

  ~device_guard() {
    if (previous_ >= 0 && previous_ != device_)
      cudaSetDevice(previous_);
  }

  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

  /// The status of selecting the device.
  cudaError_t status() const noexcept {
    return status_;
  }

private:
  int device_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

/// Device memory that grows to the largest size asked for and is reused.
template <class T>
class device_buffer {
public:
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  ~device_buffer() {
    if (ptr_ != nullptr)
      cudaFree(ptr_);
  }

  T* get() const noexcept {
    return ptr_;
  }

  int64_t capacity() const noexcept {
    return capacity_;
  }

  /// At least n elements; ec::unavailable naming `owner`, `what` and the
  /// bytes asked for when the device cannot provide them.
  caf::error reserve(int64_t n, const std::string& owner, const char* what) {
    if (n <= capacity_)
      return caf::none;
    if (ptr_ != nullptr) {
      cudaFree(ptr_);
      ptr_ = nullptr;
      capacity_ = 0;
    }
    auto bytes = static_cast<size_t>(n) * sizeof(T);
    void* p = nullptr;
    auto status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError(); // clear the sticky-free allocation error
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      std::string mem;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
        mem = " (free " + bytes_string(static_cast<int64_t>(free_bytes))
              + " of " + bytes_string(static_cast<int64_t>(total_bytes))
              + ")";
      return make_error(ec::unavailable,
                        owner + ": cannot allocate " + std::to_string(bytes)
                          + " bytes (" + bytes_string(static_cast<int64_t>(
                            bytes))
                          + ") for " + what + mem + ": "
                          + status_string(status));
    }
    ptr_ = static_cast<T*>(p);
    capacity_ = n;
    return caf::none;
  }

private:
  T* ptr_ = nullptr;
  int64_t capacity_ = 0;
};

/// One backend's device, stream and pool of device blocks, shared with the
/// device copies of tensors it made: a copy stays readable (copy_to_host)
/// and returns its block to the pool after the backend is gone.
class cuda_context {
public:
  cuda_context(int device, std::string name);
  ~cuda_context();
  cuda_context(const cuda_context&) = delete;
  cuda_context& operator=(const cuda_context&) = delete;

  int device;
  std::string name;
  cudaStream_t stream = nullptr;

  // Bytes copied between host and device (cuda::transfers): atomic, since
  // a tensor's fetch may run on any thread.
  std::atomic<int64_t> bytes_to_device{0};
  std::atomic<int64_t> bytes_to_host{0};

  /// A block of at least n floats: a free one of the pool (at most twice
  /// the size) or a new one; when the device is full, the pool's free
  /// blocks are given back first. ec::unavailable naming the device, the
  /// bytes and `what` when even that fails.
  caf::expected<float*> allocate(int64_t n, int64_t& capacity,
                                 const char* what);

  /// Returns a block to the pool. Freeing it (cudaFree) would wait for the
  /// whole device, and the next step asks for the same sizes again; the
  /// stream orders any queued use of it before its next user's.
  void release(float* block, int64_t capacity) noexcept;

private:
  void free_pool() noexcept;

  std::mutex mtx_;
  std::multimap<int64_t, float*> free_;
};

/// A tensor's values on a CUDA device (kernels/tensor.hpp).
class cuda_copy final : public device_copy {
public:
  cuda_copy(std::shared_ptr<cuda_context> ctx, float* block,
            int64_t capacity) noexcept
    : ctx_(std::move(ctx)), block_(block), capacity_(capacity) {
  }

  ~cuda_copy() override {
    ctx_->release(block_, capacity_);
  }

  void copy_to_host(float* dst, int64_t n) const override;

  int64_t capacity() const noexcept override {
    return capacity_;
  }

  float* data() const noexcept {
    return block_;
  }

  const cuda_context* context() const noexcept {
    return ctx_.get();
  }

private:
  std::shared_ptr<cuda_context> ctx_;
  float* block_;
  int64_t capacity_;
};

class cuda_backend final : public backend, public kfac_kernels {
public:
  explicit cuda_backend(int device);
  ~cuda_backend() override;

  /// Creates the stream and the handles; the constructor does nothing that
  /// can fail.
  caf::error init();

  std::string name() const override;
  int threads() const override;

  caf::error gemm(const tensor& a, bool trans_a, const tensor& b,
                  bool trans_b, float alpha, float beta,
                  tensor& c) override;
  caf::error gemm_batched(const tensor& a, bool trans_a, const tensor& b,
                          bool trans_b, float alpha, float beta,
                          tensor& c) override;
  caf::error dense_forward(const tensor& x, const tensor& w, const tensor& b,
                           activation act, tensor& y) override;
  caf::error dense_backward(const tensor& x, const tensor& w,
                            const tensor& y, const tensor& dy,
                            activation act, tensor& ds, tensor& dw,
                            tensor& db, tensor* dx) override;
  caf::error conv2d_forward(const conv2d_geometry& g, const tensor& x,
                            const tensor& w, const tensor& b, activation act,
                            tensor& y) override;
  caf::error conv2d_backward(const conv2d_geometry& g, const tensor& x,
                             const tensor& w, const tensor& y,
                             const tensor& dy, activation act, tensor& ds,
                             tensor& dw, tensor& db, tensor* dx) override;
  caf::error conv2d_backward_data(const conv2d_geometry& g, const tensor& x,
                                  const tensor& w, const tensor& y,
                                  const tensor& dy, activation act,
                                  tensor& ds, tensor* dx) override;
  caf::error activation_forward(activation act, const tensor& x,
                                tensor& y) override;
  caf::error activation_backward(activation act, const tensor& y,
                                 const tensor& dy, tensor& dx) override;
  caf::error max_pool_forward(const pool2d_geometry& g, const tensor& x,
                              tensor& y,
                              std::vector<int32_t>& argmax) override;
  caf::error max_pool_backward(const pool2d_geometry& g, const tensor& dy,
                               const std::vector<int32_t>& argmax,
                               tensor& dx) override;
  caf::error softmax_xent_forward(const tensor& logits,
                                  const label_vector& labels, tensor& probs,
                                  float& loss) override;
  caf::error softmax_xent_backward(const tensor& probs,
                                   const label_vector& labels,
                                   tensor& dlogits) override;
  caf::error sigmoid_xent_forward(const tensor& logits,
                                  const tensor& targets, tensor& probs,
                                  float& loss) override;
  caf::error sigmoid_xent_backward(const tensor& probs,
                                   const tensor& targets,
                                   tensor& dlogits) override;
  caf::expected<int64_t> count_correct(const tensor& logits,
                                       const label_vector& labels) override;
  caf::error make_resident(tensor& x) override;
  // Average pooling, batch normalisation and dropout's product
  // (kernels/cuda/normalisation.cu), the same values as the host defaults
  // up to float rounding: reductions run per channel in double.
  caf::error avg_pool_forward(const pool2d_geometry& g, const tensor& x,
                              tensor& y) override;
  caf::error avg_pool_backward(const pool2d_geometry& g, const tensor& dy,
                               tensor& dx) override;
  caf::error batch_norm_statistics(const tensor& x, tensor& mean,
                                   tensor& variance) override;
  caf::error batch_norm_forward(const tensor& x, const tensor& gamma,
                                const tensor& beta, const tensor& mean,
                                const tensor& inv_std, activation act,
                                tensor& y) override;
  caf::error batch_norm_backward(const tensor& x, const tensor& gamma,
                                 const tensor& mean, const tensor& inv_std,
                                 const tensor& y, const tensor& dy,
                                 activation act, tensor& scratch,
                                 tensor& dgamma, tensor& dbeta,
                                 tensor* dx) override;
  caf::error multiply(const tensor& x, const tensor& m, tensor& y) override;
  caf::error reshape_copy(const tensor& x, const tensor_shape& shape,
                          tensor& y) override;

  // kfac_kernels (kernels/cuda/kfac.cu)
  caf::error damped_inverse(const tensor& factor, float damping,
                            tensor& inverse) override;
  caf::error damped_cholesky(const tensor& factor, float damping,
                             tensor& lower) override;
  caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                             tensor& eigenvectors) override;
  caf::error precondition_factored(const tensor& grad, const tensor& A_inv,
                                   const tensor& G_inv, float scale,
                                   tensor& out) override;
  caf::error precondition_cholesky(const tensor& grad, const tensor& LA,
                                   const tensor& LG, float scale,
                                   tensor& out) override;
  caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                                const tensor& eA, const tensor& QG,
                                const tensor& eG, float lambda,
                                int64_t locations, tensor& out) override;
  caf::error dense_factors(const tensor& input, const tensor& ds,
                           bool with_bias, const factor_sampling& s,
                           int threads, tensor& A, tensor& G) override;
  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool with_bias,
                          const factor_sampling& s, int threads,
                          tensor& A, tensor& G) override;
  caf::error reserve_workspace(int64_t bytes) override;

  // Status checks: an error naming this device and `what`, or none.
  caf::error check(cudaError_t status, const char* what) const;
  caf::error check(cublasStatus_t status, const char* what) const;
  caf::error check(cusolverStatus_t status, const char* what) const;
  /// The launch status of the kernels queued last.
  caf::error check_launch(const char* what) const;

  /// Makes this backend's device current on the calling thread.
  caf::error select(const char* op) const;

  /// x's device copy if it is this device's and holds x's current values;
  /// nullptr otherwise.
  cuda_copy* resident(const tensor& x) const noexcept;

  /// x's values on this device: its resident copy, or else x's host values
  /// copied into `staging` (the first `count` of them when count >= 0:
  /// callers that read only a prefix).
  caf::error input(const tensor& x, device_buffer<float>& staging,
                   const char* what, const float*& values,
                   int64_t count = -1);

  /// Gives y `shape` and a device copy on this device (y's own when it is
  /// this device's and large enough) that the caller writes: y's current
  /// values are on the device afterwards. Call it after input() for every
  /// operand, as y may be one of them.
  caf::error output(tensor& y, const tensor_shape& shape, const char* what,
                    float*& values);

  /// y's device copy when it is this device's and holds n values, else a
  /// new one from the pool.
  caf::expected<std::shared_ptr<cuda_copy>>
  block_for(const tensor& y, int64_t n, const char* what);

  /// Copies x's current values (resident or on the host) to dst.
  caf::error copy_in(const tensor& x, float* dst, const char* what);

  /// Queues a copy of `bytes` between host and device on the stream,
  /// counted in the context's transfer totals.
  caf::error to_device(void* dst, const void* src, size_t bytes,
                       const char* what);
  caf::error to_host(void* dst, const void* src, size_t bytes,
                     const char* what);
  /// to_host of dst.size() doubles.
  caf::error to_host(std::vector<double>& dst, const double* src,
                     const char* what) {
    return to_host(dst.data(), src, dst.size() * sizeof(double), what);
  }
  caf::error transfer(void* dst, const void* src, size_t bytes,
                      cudaMemcpyKind kind, std::atomic<int64_t>& counter,
                      const char* what);

  /// Copies n floats between host and device on the stream.
  caf::error upload(float* dst, const float* src, int64_t n,
                    const char* what);
  caf::error download(float* dst, const float* src, int64_t n,
                      const char* what);
  caf::error sync(const char* what);

  /// Row-major C[m, n] = alpha op(A) op(B) + beta C, A [m, k] (or [k, m]
  /// when trans_a) with leading dimension lda, likewise B and C.
  caf::error gemm_rm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C,
                     int64_t ldc, const char* what);

  /// gemm_rm for `batch` entries: entry i reads A + i stride_a and
  /// B + i stride_b (0: one B for every entry) and writes C + i stride_c.
  caf::error gemm_batched_rm(bool trans_a, bool trans_b, int64_t batch,
                             int64_t m, int64_t n, int64_t k, float alpha,
                             const float* A, int64_t lda, int64_t stride_a,
                             const float* B, int64_t ldb, int64_t stride_b,
                             float beta, float* C, int64_t ldc,
                             int64_t stride_c, const char* what);

  /// gemm and gemm_batched after their checks (s): copies the operands to
  /// the device, runs the products and copies c back.
  caf::error run_gemm(const char* op, const cpu::gemm_sizes& s,
                      const tensor& a, bool trans_a, const tensor& b,
                      bool trans_b, float alpha, float beta, tensor& c);

  /// conv2d_backward, and without dw and db (both null) its _data form.
  caf::error conv_backward(const char* op, const conv2d_geometry& g,
                           const tensor& x, const tensor& w, const tensor& y,
                           const tensor& dy, activation act, tensor& ds,
                           tensor* dw, tensor* db, tensor* dx);

  /// db[cols] = column sums of a row-major [rows, cols] matrix.
  caf::error column_sums(const float* x, int64_t rows, int64_t cols,
                         float* db, const char* what);

  /// Upper triangle (column-major) of alpha Xᵀ X + beta C for a row-major
  /// X [rows, cols] = C [cols, cols]; then symmetrise() fills the rest.
  caf::error syrk_rm(const float* X, int64_t rows, int64_t cols, float alpha,
                     float beta, float* C, const char* what);
  caf::error symmetrise(float* C, int64_t n, const char* what);

  /// The damped symmetric part of a host factor in d_work_ (double),
  /// factorised by potrf (upper, column-major: lower L row-major), with
  /// the CPU's pivot checks.
  caf::error damped_potrf(const char* op, const tensor& factor,
                          float damping);

  /// damped_potrf, then use(n) for a factor [n, n] with n > 0; an empty
  /// factor gives an empty out [0, 0] (damped_inverse, damped_cholesky).
  template <class Use>
  caf::error with_potrf(const char* op, const tensor& factor, float damping,
                        tensor& out, Use use);

  /// Selects the device and leaves ½(F + Fᵀ) + damping·I of the host
  /// factor F [n, n] in d_work_ (double), with d_values_ [n] (named
  /// values_what) and info_ reserved: where potrf and syevd start.
  caf::error stage_symmetric(const char* op, const tensor& factor,
                             double damping, const char* values_what);

  /// A cuSOLVER routine with its workspace in d_solver_: size(&lwork) asks
  /// for the workspace (reported as routine + "_bufferSize"),
  /// run(workspace, lwork) runs it (reported as routine) and leaves its
  /// status in info_, whose copy to `info` (info_what) is queued: read it
  /// after the next sync.
  template <class Size, class Run>
  caf::error solve(const char* routine, const char* workspace_what,
                   Size size, Run run, int& info, const char* info_what);

  /// potrf and potri (and their _bufferSize): the same arguments.
  using upper_size_routine = cusolverStatus_t (*)(cusolverDnHandle_t,
                                                  cublasFillMode_t, int,
                                                  double*, int, int*);
  using upper_routine = cusolverStatus_t (*)(cusolverDnHandle_t,
                                             cublasFillMode_t, int, double*,
                                             int, double*, int, int*);

  /// solve() of `run` on the upper triangle of d_work_ [n, n].
  caf::error solve_upper(const char* routine, upper_size_routine size,
                         upper_routine run, const char* workspace_what,
                         int64_t n, int& info, const char* info_what);

  /// A kernel converting d_work_ [n, n] (double) into float.
  using work_kernel = void (*)(const double* d, int64_t n, float* out);

  /// out_a_ [n, n] (reserved as out_what) = convert(d_work_), queued.
  caf::error from_work(work_kernel convert, int64_t n, const char* out_what,
                       const char* launch_what);

  /// Selects the device and reserves out_b_ (an intermediate product) and
  /// out_a_ (the preconditioned gradient) of `size` floats.
  caf::error start_products(const char* op, int64_t size,
                            const char* intermediate_what);

  /// An operand copied from the host: `buffer` reserved for `values` (the
  /// reservation named `name`) and filled ("copy <name>").
  struct host_operand {
    device_buffer<float>* buffer;
    const tensor* values;
    const char* name;
  };
  caf::error upload_operands(std::initializer_list<host_operand> operands);

  /// n floats at src on the device once the stream is done (synchronised,
  /// naming op): a result the host receives.
  caf::expected<std::vector<float>> fetch(const float* src, int64_t n,
                                          const char* what, const char* op);

  /// fetch of a cuSOLVER routine's result, then its status (solve's
  /// info, read after the sync): failed(info) unless it is 0.
  template <class Failed>
  caf::expected<std::vector<float>>
  fetch_solved(const float* src, int64_t n, const char* what, const char* op,
               const int& info, Failed failed);

  /// fetch of `shape`'s values into out.
  caf::error fetch_into(const float* src, const tensor_shape& shape,
                        const char* what, const char* op, tensor& out);

  /// Mirrors the factors A [wa, wa] (out_a_) and G [wg, wg] (out_b_), whose
  /// upper triangles SYRK wrote, and fetches both.
  caf::error fetch_factors(const char* op, int64_t wa, int64_t wg, tensor& A,
                           tensor& G);

  int device_;
  std::string name_;
  std::shared_ptr<cuda_context> ctx_;
  cudaStream_t stream_ = nullptr; // ctx_'s
  cublasHandle_t blas_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;

  // Named workspaces, reused across calls.
  device_buffer<float> in_a_, in_b_, in_c_, in_d_, in_e_;
  device_buffer<float> out_a_, out_b_;
  device_buffer<float> col_, ones_, reserved_;
  device_buffer<double> d_work_, d_solver_, d_values_, row_loss_;
  device_buffer<int32_t> labels_, argmax_, info_;
  device_buffer<int64_t> rows_;
  device_buffer<unsigned long long> counter_;
  int64_t ones_filled_ = 0;
  std::vector<double> host_losses_;
  std::vector<double> host_diag_;
};

} // namespace syncfac::cuda
