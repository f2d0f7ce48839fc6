// K-FAC on a CUDA device: damped Cholesky factors and inverses (cuSOLVER
// potrf/potri in double), eigendecompositions (syevd in double),
// preconditioning products (cuBLAS GEMM and TRSM) and the factor
// statistics (im2col + SYRK). Checks and errors follow the CPU functions in
// kernels/cpu/kfac_inverse.cpp and kfac_factors.cpp.
//
// Layout: a symmetric matrix is its own transpose, so a row-major factor is
// handed to cuSOLVER as is. potrf with the upper triangle gives column-major
// U with F = Uᵀ U; read row-major, that buffer holds L = Uᵀ in its lower
// triangle, which is the CPU's lower Cholesky factor.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/checks.hpp"
#include "kernels/cuda/cuda_impl.cuh"

namespace syncfac::cuda {

namespace {

constexpr int block = 256;

// As on the CPU: a negative eigenvalue beyond this fraction of the largest
// magnitude means the factor is not positive semi-definite.
constexpr double max_negative_eigen_ratio = 1e-3;

#define SYNCFAC_GRID_STRIDE(i, n)                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x)             \
                   + threadIdx.x;                                            \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

/// d = ½(F + Fᵀ) + damping·I in double.
__global__ void k_sym_damped(const float* f, int64_t n, double damping,
                             double* d) {
  SYNCFAC_GRID_STRIDE(idx, n * n) {
    int64_t i = idx / n;
    int64_t j = idx % n;
    double v = 0.5 * (static_cast<double>(f[i * n + j])
                      + static_cast<double>(f[j * n + i]));
    d[idx] = i == j ? v + damping : v;
  }
}

/// diag[k] = d[k, k].
__global__ void k_diagonal(const double* d, int64_t n, double* diag) {
  SYNCFAC_GRID_STRIDE(k, n) diag[k] = d[k * n + k];
}

/// Row-major symmetric float from the row-major lower triangle of d
/// (column-major upper, where potri leaves the inverse).
__global__ void k_from_lower(const double* d, int64_t n, float* out) {
  SYNCFAC_GRID_STRIDE(idx, n * n) {
    int64_t i = idx / n;
    int64_t j = idx % n;
    out[idx] = static_cast<float>(j <= i ? d[i * n + j] : d[j * n + i]);
  }
}

/// Row-major lower triangle of d as float, zeros above the diagonal.
__global__ void k_lower_only(const double* d, int64_t n, float* out) {
  SYNCFAC_GRID_STRIDE(idx, n * n) {
    int64_t i = idx / n;
    int64_t j = idx % n;
    out[idx] = j <= i ? static_cast<float>(d[idx]) : 0.0f;
  }
}

/// out (row-major) = transpose of d as float: column-major eigenvectors
/// (vector k in column k) become row-major with vector k in column k.
__global__ void k_transpose(const double* d, int64_t n, float* out) {
  SYNCFAC_GRID_STRIDE(idx, n * n) {
    int64_t i = idx / n;
    int64_t k = idx % n;
    out[idx] = static_cast<float>(d[k * n + i]);
  }
}

__global__ void k_divide_eigen(float* v, const float* eA, const float* eG,
                               int64_t p, int64_t q, float T, float lambda) {
  SYNCFAC_GRID_STRIDE(idx, p * q) {
    int64_t i = idx / q;
    int64_t j = idx % q;
    v[idx] /= T * eA[i] * eG[j] + lambda;
  }
}

/// Fills the lower triangle (row-major upper) of a column-major n x n
/// matrix whose upper triangle SYRK wrote.
__global__ void k_mirror_upper(float* c, int64_t n) {
  SYNCFAC_GRID_STRIDE(idx, n * n) {
    int64_t col = idx / n; // column-major: idx = col * n + row
    int64_t row = idx % n;
    if (row > col)
      c[idx] = c[row * n + col];
  }
}

/// dst [count, ld] = rows of src [*, cols] (rows[first + r], or first + r
/// without a list), with a trailing 1 when ld > cols.
__global__ void k_gather_rows(const float* src, int64_t cols,
                              const int64_t* rows, int64_t first,
                              int64_t count, int64_t ld, float* dst) {
  SYNCFAC_GRID_STRIDE(idx, count * ld) {
    int64_t r = idx / ld;
    int64_t k = idx % ld;
    if (k >= cols) {
      dst[idx] = 1.0f;
      continue;
    }
    int64_t row = rows != nullptr ? rows[first + r] : first + r;
    dst[idx] = src[row * cols + k];
  }
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

caf::error check_square(const char* op, const char* what, const tensor& x) {
  if (x.rank() == 2 && x.dim(0) == x.dim(1))
    return caf::none;
  auto n = x.rank() >= 1 ? x.dim(0) : 0;
  return cpu::mismatch(op, what, x.shape(), "a square matrix", {n, n},
                       "factors are [n, n]");
}

caf::error check_finite(const char* op, const char* what, const tensor& x) {
  for (int64_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      return make_error(ec::non_finite,
                        std::string{op} + ": " + what + " " + x.shape_string()
                          + " holds " + std::to_string(x[i]) + " at index "
                          + std::to_string(i));
  return caf::none;
}

caf::error check_scalar(const char* op, const char* what, double x,
                        bool non_negative) {
  if (!std::isfinite(x))
    return make_error(ec::non_finite, std::string{op} + ": " + what + " is "
                                        + std::to_string(x));
  if (non_negative && x < 0)
    return make_error(ec::invalid_argument, std::string{op} + ": " + what
                                              + " " + std::to_string(x)
                                              + " is negative");
  return caf::none;
}

caf::error not_positive_definite(const char* op, int64_t n, float damping,
                                 const std::string& detail) {
  return make_error(ec::numerical_failure,
                    std::string{op} + ": factor [" + std::to_string(n) + ", "
                      + std::to_string(n) + "] (dimension "
                      + std::to_string(n) + ") + damping " + num(damping)
                      + " * I is not positive definite: " + detail);
}

caf::error check_sides(const char* op, const tensor& grad,
                       const char* left_what, const tensor& left,
                       const char* right_what, const tensor& right) {
  if (grad.rank() != 2)
    return cpu::mismatch(op, "grad", grad.shape(), left_what, left.shape(),
                         "grad must be a matrix [in+1, out]");
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (left.shape() != tensor_shape{p, p})
    return cpu::mismatch(op, left_what, left.shape(), "grad", grad.shape(),
                         std::string{left_what} + " must be ["
                           + std::to_string(p) + ", " + std::to_string(p)
                           + "] (rows of grad)");
  if (right.shape() != tensor_shape{q, q})
    return cpu::mismatch(op, right_what, right.shape(), "grad", grad.shape(),
                         std::string{right_what} + " must be ["
                           + std::to_string(q) + ", " + std::to_string(q)
                           + "] (columns of grad)");
  return caf::none;
}

caf::error check_eigenvalues(const char* op, const char* what,
                             const tensor& e, const char* q_what,
                             const tensor& q) {
  auto n = q.dim(0);
  if (e.shape() == tensor_shape{n})
    return caf::none;
  return cpu::mismatch(op, what, e.shape(), q_what, q.shape(),
                       "one eigenvalue per eigenvector column");
}

bool fits_int(int64_t x) {
  return x >= 0 && x <= std::numeric_limits<int>::max();
}

caf::error check_solver_size(const std::string& dev, const char* op,
                             int64_t n) {
  if (fits_int(n) && fits_int(n * n))
    return caf::none;
  return make_error(ec::invalid_argument,
                    dev + ": " + op + ": dimension " + std::to_string(n)
                      + " exceeds cuSOLVER's 32-bit sizes");
}

} // namespace

// -- factorisations ----------------------------------------------------------

caf::error cuda_backend::damped_potrf(const char* op, const tensor& factor,
                                      float damping) {
  if (auto err = check_square(op, "factor", factor))
    return err;
  if (auto err = check_scalar(op, "damping", damping, true))
    return err;
  if (auto err = check_finite(op, "factor", factor))
    return err;
  auto n = factor.dim(0);
  if (auto err = check_solver_size(name_, op, n))
    return err;
  if (n == 0)
    return caf::none; // nothing to factorise (cuSOLVER wants lda >= 1)
  if (auto err = select(op))
    return err;
  if (auto err = in_a_.reserve(n * n, name_, "the factor"))
    return err;
  if (auto err = d_work_.reserve(n * n, name_, "the factor in double"))
    return err;
  if (auto err = d_values_.reserve(n, name_, "the Cholesky pivots"))
    return err;
  if (auto err = info_.reserve(1, name_, "the cuSOLVER status"))
    return err;
  if (auto err = upload(in_a_.get(), factor.data(), n * n,
                        "copy the factor"))
    return err;
  k_sym_damped<<<grid_for(n * n), block, 0, stream_>>>(
    in_a_.get(), n, static_cast<double>(damping), d_work_.get());
  if (auto err = check_launch("symmetric part of the factor"))
    return err;
  int lwork = 0;
  if (auto err = check(cusolverDnDpotrf_bufferSize(
                         solver_, CUBLAS_FILL_MODE_UPPER, static_cast<int>(n),
                         d_work_.get(), static_cast<int>(n), &lwork),
                       "cusolverDnDpotrf_bufferSize"))
    return err;
  if (auto err = d_solver_.reserve(std::max(lwork, 1), name_,
                                   "the Cholesky workspace"))
    return err;
  if (auto err = check(cusolverDnDpotrf(solver_, CUBLAS_FILL_MODE_UPPER,
                                        static_cast<int>(n), d_work_.get(),
                                        static_cast<int>(n), d_solver_.get(),
                                        lwork, info_.get()),
                       "cusolverDnDpotrf"))
    return err;
  k_diagonal<<<grid_for(n), block, 0, stream_>>>(d_work_.get(), n,
                                                 d_values_.get());
  if (auto err = check_launch("Cholesky pivots"))
    return err;
  int info = 0;
  host_diag_.resize(static_cast<size_t>(n));
  if (auto err = to_host(&info, info_.get(), sizeof(int),
                         "copy the potrf status back"))
    return err;
  if (auto err = to_host(host_diag_.data(), d_values_.get(),
                         static_cast<size_t>(n) * sizeof(double),
                         "copy the Cholesky pivots back"))
    return err;
  if (auto err = sync(op))
    return err;
  if (info < 0)
    return make_error(ec::internal, name_ + ": " + op
                                      + ": cusolverDnDpotrf rejected argument "
                                      + std::to_string(-info));
  if (info > 0)
    return not_positive_definite(op, n, damping,
                                 "Cholesky met a pivot <= 0 (leading minor "
                                   + std::to_string(info) + ")");
  // The CPU's round-off test: pivots below n·ε·max diagonal count as 0.
  double max_diag = 0.0;
  for (int64_t k = 0; k < n; ++k)
    max_diag = std::max(max_diag, static_cast<double>(factor[k * n + k])
                                    + static_cast<double>(damping));
  auto tol = static_cast<double>(n) * std::numeric_limits<double>::epsilon()
             * max_diag;
  for (int64_t k = 0; k < n; ++k) {
    auto u = host_diag_[static_cast<size_t>(k)];
    auto pivot = u * u;
    if (!(pivot > tol))
      return not_positive_definite(op, n, damping,
                                   "Cholesky pivot " + std::to_string(k)
                                     + " is " + num(pivot)
                                     + ", at most the round-off level "
                                     + num(tol));
  }
  return caf::none;
}

caf::error cuda_backend::damped_inverse(const tensor& factor, float damping,
                                        tensor& inverse) {
  const char* op = "damped_inverse";
  if (auto err = damped_potrf(op, factor, damping))
    return err;
  auto n = factor.dim(0);
  if (n == 0) {
    inverse.resize({0, 0});
    return caf::none;
  }
  int lwork = 0;
  if (auto err = check(cusolverDnDpotri_bufferSize(
                         solver_, CUBLAS_FILL_MODE_UPPER, static_cast<int>(n),
                         d_work_.get(), static_cast<int>(n), &lwork),
                       "cusolverDnDpotri_bufferSize"))
    return err;
  if (auto err = d_solver_.reserve(std::max(lwork, 1), name_,
                                   "the inversion workspace"))
    return err;
  if (auto err = check(cusolverDnDpotri(solver_, CUBLAS_FILL_MODE_UPPER,
                                        static_cast<int>(n), d_work_.get(),
                                        static_cast<int>(n), d_solver_.get(),
                                        lwork, info_.get()),
                       "cusolverDnDpotri"))
    return err;
  if (auto err = out_a_.reserve(n * n, name_, "the inverse"))
    return err;
  k_from_lower<<<grid_for(n * n), block, 0, stream_>>>(d_work_.get(), n,
                                                       out_a_.get());
  if (auto err = check_launch("symmetric inverse"))
    return err;
  int info = 0;
  std::vector<float> values(static_cast<size_t>(n * n));
  if (auto err = to_host(&info, info_.get(), sizeof(int),
                         "copy the potri status back"))
    return err;
  if (auto err = download(values.data(), out_a_.get(), n * n,
                          "copy the inverse back"))
    return err;
  if (auto err = sync(op))
    return err;
  if (info != 0)
    return not_positive_definite(op, n, damping,
                                 "cusolverDnDpotri reported info "
                                   + std::to_string(info));
  for (int64_t idx = 0; idx < n * n; ++idx)
    if (!std::isfinite(values[static_cast<size_t>(idx)]))
      return make_error(ec::numerical_failure,
                        std::string{op} + ": inverse of dimension "
                          + std::to_string(n) + " has "
                          + num(values[static_cast<size_t>(idx)]) + " at ["
                          + std::to_string(idx / n) + ", "
                          + std::to_string(idx % n)
                          + "], outside float range");
  inverse.resize({n, n});
  inverse.values() = std::move(values);
  return caf::none;
}

caf::error cuda_backend::damped_cholesky(const tensor& factor, float damping,
                                         tensor& lower) {
  const char* op = "damped_cholesky";
  if (auto err = damped_potrf(op, factor, damping))
    return err;
  auto n = factor.dim(0);
  if (auto err = out_a_.reserve(n * n, name_, "the Cholesky factor"))
    return err;
  std::vector<float> values(static_cast<size_t>(n * n));
  if (n > 0) {
    k_lower_only<<<grid_for(n * n), block, 0, stream_>>>(d_work_.get(), n,
                                                         out_a_.get());
    if (auto err = check_launch("lower Cholesky factor"))
      return err;
    if (auto err = download(values.data(), out_a_.get(), n * n,
                            "copy the Cholesky factor back"))
      return err;
    if (auto err = sync(op))
      return err;
  }
  lower.resize({n, n});
  lower.values() = std::move(values);
  return caf::none;
}

caf::error cuda_backend::symmetric_eigen(const tensor& factor,
                                         tensor& eigenvalues,
                                         tensor& eigenvectors) {
  const char* op = "symmetric_eigen";
  if (auto err = check_square(op, "factor", factor))
    return err;
  if (auto err = check_finite(op, "factor", factor))
    return err;
  auto n = factor.dim(0);
  if (auto err = check_solver_size(name_, op, n))
    return err;
  if (n == 0) {
    eigenvalues.resize({0});
    eigenvectors.resize({0, 0});
    return caf::none;
  }
  if (auto err = select(op))
    return err;
  if (auto err = in_a_.reserve(n * n, name_, "the factor"))
    return err;
  if (auto err = d_work_.reserve(n * n, name_, "the factor in double"))
    return err;
  if (auto err = d_values_.reserve(n, name_, "the eigenvalues"))
    return err;
  if (auto err = info_.reserve(1, name_, "the cuSOLVER status"))
    return err;
  if (auto err = out_a_.reserve(n * n, name_, "the eigenvectors"))
    return err;
  if (auto err = upload(in_a_.get(), factor.data(), n * n,
                        "copy the factor"))
    return err;
  k_sym_damped<<<grid_for(n * n), block, 0, stream_>>>(in_a_.get(), n, 0.0,
                                                       d_work_.get());
  if (auto err = check_launch("symmetric part of the factor"))
    return err;
  int lwork = 0;
  if (auto err = check(cusolverDnDsyevd_bufferSize(
                         solver_, CUSOLVER_EIG_MODE_VECTOR,
                         CUBLAS_FILL_MODE_LOWER, static_cast<int>(n),
                         d_work_.get(), static_cast<int>(n), d_values_.get(),
                         &lwork),
                       "cusolverDnDsyevd_bufferSize"))
    return err;
  if (auto err = d_solver_.reserve(std::max(lwork, 1), name_,
                                   "the eigensolver workspace"))
    return err;
  if (auto err = check(cusolverDnDsyevd(solver_, CUSOLVER_EIG_MODE_VECTOR,
                                        CUBLAS_FILL_MODE_LOWER,
                                        static_cast<int>(n), d_work_.get(),
                                        static_cast<int>(n), d_values_.get(),
                                        d_solver_.get(), lwork, info_.get()),
                       "cusolverDnDsyevd"))
    return err;
  k_transpose<<<grid_for(n * n), block, 0, stream_>>>(d_work_.get(), n,
                                                      out_a_.get());
  if (auto err = check_launch("eigenvectors"))
    return err;
  int info = 0;
  std::vector<double> e(static_cast<size_t>(n));
  std::vector<float> vectors(static_cast<size_t>(n * n));
  if (auto err = to_host(&info, info_.get(), sizeof(int),
                         "copy the syevd status back"))
    return err;
  if (auto err = to_host(e.data(), d_values_.get(),
                         static_cast<size_t>(n) * sizeof(double),
                         "copy the eigenvalues back"))
    return err;
  if (auto err = download(vectors.data(), out_a_.get(), n * n,
                          "copy the eigenvectors back"))
    return err;
  if (auto err = sync(op))
    return err;
  if (info != 0)
    return make_error(ec::numerical_failure,
                      std::string{op} + ": the eigensolver did not converge "
                                        "for a factor of dimension "
                        + std::to_string(n) + " (cusolverDnDsyevd info "
                        + std::to_string(info) + ")");
  double largest = 0.0;
  for (auto v : e)
    largest = std::max(largest, std::abs(v));
  for (auto& v : e) {
    if (v < -max_negative_eigen_ratio * largest)
      return make_error(ec::numerical_failure,
                        std::string{op} + ": factor of dimension "
                          + std::to_string(n)
                          + " is not positive semi-definite: eigenvalue "
                          + num(v) + " against largest magnitude "
                          + num(largest));
    v = std::max(v, 0.0);
  }
  eigenvalues.resize({n});
  for (int64_t k = 0; k < n; ++k)
    eigenvalues[k] = static_cast<float>(e[static_cast<size_t>(k)]);
  eigenvectors.resize({n, n});
  eigenvectors.values() = std::move(vectors);
  return caf::none;
}

// -- preconditioning ---------------------------------------------------------

caf::error cuda_backend::precondition_factored(const tensor& grad,
                                               const tensor& A_inv,
                                               const tensor& G_inv,
                                               float scale, tensor& out) {
  const char* op = "precondition_factored";
  if (auto err = check_sides(op, grad, "A_inv", A_inv, "G_inv", G_inv))
    return err;
  if (auto err = check_scalar(op, "scale", scale, false))
    return err;
  for (auto [what, x] : {std::pair{"grad", &grad}, std::pair{"A_inv", &A_inv},
                         std::pair{"G_inv", &G_inv}})
    if (auto err = check_finite(op, what, *x))
      return err;
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (auto err = select(op))
    return err;
  for (auto [buf, size, what] :
       {std::tuple{&in_a_, p * q, "grad"}, std::tuple{&in_b_, p * p, "A_inv"},
        std::tuple{&in_c_, q * q, "G_inv"},
        std::tuple{&out_b_, p * q, "grad G_inv"},
        std::tuple{&out_a_, p * q, "the preconditioned gradient"}})
    if (auto err = buf->reserve(size, name_, what))
      return err;
  if (auto err = upload(in_a_.get(), grad.data(), p * q, "copy grad"))
    return err;
  if (auto err = upload(in_b_.get(), A_inv.data(), p * p, "copy A_inv"))
    return err;
  if (auto err = upload(in_c_.get(), G_inv.data(), q * q, "copy G_inv"))
    return err;
  if (auto err = gemm_rm(false, false, p, q, q, 1.0f, in_a_.get(), q,
                         in_c_.get(), q, 0.0f, out_b_.get(), q,
                         "precondition_factored: grad G_inv"))
    return err;
  if (auto err = gemm_rm(false, false, p, q, p, scale, in_b_.get(), p,
                         out_b_.get(), q, 0.0f, out_a_.get(), q,
                         "precondition_factored: A_inv (grad G_inv)"))
    return err;
  std::vector<float> values(static_cast<size_t>(p * q));
  if (auto err = download(values.data(), out_a_.get(), p * q,
                          "copy the preconditioned gradient back"))
    return err;
  if (auto err = sync(op))
    return err;
  out.resize({p, q});
  out.values() = std::move(values);
  return caf::none;
}

caf::error cuda_backend::precondition_cholesky(const tensor& grad,
                                               const tensor& LA,
                                               const tensor& LG, float scale,
                                               tensor& out) {
  const char* op = "precondition_cholesky";
  if (auto err = check_sides(op, grad, "LA", LA, "LG", LG))
    return err;
  if (auto err = check_scalar(op, "scale", scale, false))
    return err;
  for (auto [what, x] : {std::pair{"grad", &grad}, std::pair{"LA", &LA},
                         std::pair{"LG", &LG}})
    if (auto err = check_finite(op, what, *x))
      return err;
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  for (int64_t i = 0; i < p; ++i)
    if (!(LA[i * p + i] > 0))
      return make_error(ec::numerical_failure,
                        std::string{op} + ": LA has pivot "
                          + num(LA[i * p + i]) + " at " + std::to_string(i));
  for (int64_t i = 0; i < q; ++i)
    if (!(LG[i * q + i] > 0))
      return make_error(ec::numerical_failure,
                        std::string{op} + ": LG has pivot "
                          + num(LG[i * q + i]) + " at " + std::to_string(i));
  if (!fits_int(p) || !fits_int(q))
    return make_error(ec::invalid_argument,
                      name_ + ": " + op + ": grad " + grad.shape_string()
                        + " exceeds cuBLAS's 32-bit dimensions");
  if (auto err = select(op))
    return err;
  if (auto err = out_a_.reserve(p * q, name_, "the preconditioned gradient"))
    return err;
  if (auto err = in_b_.reserve(p * p, name_, "LA"))
    return err;
  if (auto err = in_c_.reserve(q * q, name_, "LG"))
    return err;
  if (auto err = upload(out_a_.get(), grad.data(), p * q, "copy grad"))
    return err;
  if (auto err = upload(in_b_.get(), LA.data(), p * p, "copy LA"))
    return err;
  if (auto err = upload(in_c_.get(), LG.data(), q * q, "copy LG"))
    return err;
  if (p > 0 && q > 0) {
    // X is row-major [p, q], i.e. column-major Xc = Xᵀ [q, p]; the
    // column-major view of a row-major lower L is the upper Lᵀ.
    auto ip = static_cast<int>(p);
    auto iq = static_cast<int>(q);
    float one = 1.0f;
    struct solve {
      cublasSideMode_t side;
      cublasOperation_t trans;
      const float* tri;
      int ld;
      const float* alpha;
      const char* what;
    };
    // X ← LA⁻¹ X  ⇔ Xc ← Xc LA⁻ᵀ;   X ← LA⁻ᵀ X  ⇔ Xc ← Xc LA⁻¹;
    // X ← X LG⁻ᵀ  ⇔ Xc ← LG⁻¹ Xc;   X ← X LG⁻¹  ⇔ Xc ← LG⁻ᵀ Xc.
    for (const auto& s :
         {solve{CUBLAS_SIDE_RIGHT, CUBLAS_OP_N, in_b_.get(), ip, &scale,
                "cublasStrsm LA^-1 grad"},
          solve{CUBLAS_SIDE_RIGHT, CUBLAS_OP_T, in_b_.get(), ip, &one,
                "cublasStrsm LA^-T"},
          solve{CUBLAS_SIDE_LEFT, CUBLAS_OP_T, in_c_.get(), iq, &one,
                "cublasStrsm LG^-T"},
          solve{CUBLAS_SIDE_LEFT, CUBLAS_OP_N, in_c_.get(), iq, &one,
                "cublasStrsm LG^-1"}})
      if (auto err = check(cublasStrsm(blas_, s.side, CUBLAS_FILL_MODE_UPPER,
                                       s.trans, CUBLAS_DIAG_NON_UNIT, iq, ip,
                                       s.alpha, s.tri, s.ld, out_a_.get(),
                                       iq),
                           s.what))
        return err;
  }
  std::vector<float> values(static_cast<size_t>(p * q));
  if (auto err = download(values.data(), out_a_.get(), p * q,
                          "copy the preconditioned gradient back"))
    return err;
  if (auto err = sync(op))
    return err;
  out.resize({p, q});
  out.values() = std::move(values);
  return caf::none;
}

caf::error cuda_backend::precondition_eigen(const tensor& grad,
                                            const tensor& QA,
                                            const tensor& eA,
                                            const tensor& QG,
                                            const tensor& eG, float lambda,
                                            int64_t locations, tensor& out) {
  const char* op = "precondition_eigen";
  if (auto err = check_sides(op, grad, "QA", QA, "QG", QG))
    return err;
  if (auto err = check_eigenvalues(op, "eA", eA, "QA", QA))
    return err;
  if (auto err = check_eigenvalues(op, "eG", eG, "QG", QG))
    return err;
  if (auto err = check_scalar(op, "lambda", lambda, true))
    return err;
  if (locations < 1)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": locations "
                        + std::to_string(locations) + " must be >= 1");
  for (auto [what, x] :
       {std::pair{"grad", &grad}, std::pair{"QA", &QA}, std::pair{"eA", &eA},
        std::pair{"QG", &QG}, std::pair{"eG", &eG}})
    if (auto err = check_finite(op, what, *x))
      return err;
  auto T = static_cast<float>(locations);
  for (int64_t i = 0; i < eA.size(); ++i)
    for (int64_t j = 0; j < eG.size(); ++j) {
      auto d = T * eA[i] * eG[j] + lambda;
      if (!(d > 0.0f) || !std::isfinite(d))
        return make_error(ec::numerical_failure,
                          std::string{op} + ": divisor T*eA["
                            + std::to_string(i) + "]*eG[" + std::to_string(j)
                            + "] + lambda = " + num(T) + " * " + num(eA[i])
                            + " * " + num(eG[j]) + " + " + num(lambda)
                            + " = " + num(d) + " is not positive");
    }
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (auto err = select(op))
    return err;
  for (auto [buf, size, what] :
       {std::tuple{&in_a_, p * q, "grad"}, std::tuple{&in_b_, p * p, "QA"},
        std::tuple{&in_c_, q * q, "QG"}, std::tuple{&in_d_, p, "eA"},
        std::tuple{&in_e_, q, "eG"},
        std::tuple{&out_b_, p * q, "an eigenbasis product"},
        std::tuple{&out_a_, p * q, "the preconditioned gradient"}})
    if (auto err = buf->reserve(size, name_, what))
      return err;
  if (auto err = upload(in_a_.get(), grad.data(), p * q, "copy grad"))
    return err;
  if (auto err = upload(in_b_.get(), QA.data(), p * p, "copy QA"))
    return err;
  if (auto err = upload(in_c_.get(), QG.data(), q * q, "copy QG"))
    return err;
  if (auto err = upload(in_d_.get(), eA.data(), p, "copy eA"))
    return err;
  if (auto err = upload(in_e_.get(), eG.data(), q, "copy eG"))
    return err;
  // V = QAᵀ grad QG, divided by T eA_i eG_j + λ, then QA V QGᵀ.
  if (auto err = gemm_rm(true, false, p, q, p, 1.0f, in_b_.get(), p,
                         in_a_.get(), q, 0.0f, out_b_.get(), q,
                         "precondition_eigen: QA^T grad"))
    return err;
  if (auto err = gemm_rm(false, false, p, q, q, 1.0f, out_b_.get(), q,
                         in_c_.get(), q, 0.0f, out_a_.get(), q,
                         "precondition_eigen: (QA^T grad) QG"))
    return err;
  if (p * q > 0) {
    k_divide_eigen<<<grid_for(p * q), block, 0, stream_>>>(
      out_a_.get(), in_d_.get(), in_e_.get(), p, q, T, lambda);
    if (auto err = check_launch("precondition_eigen: divide"))
      return err;
  }
  if (auto err = gemm_rm(false, false, p, q, p, 1.0f, in_b_.get(), p,
                         out_a_.get(), q, 0.0f, out_b_.get(), q,
                         "precondition_eigen: QA V"))
    return err;
  if (auto err = gemm_rm(false, true, p, q, q, 1.0f, out_b_.get(), q,
                         in_c_.get(), q, 0.0f, out_a_.get(), q,
                         "precondition_eigen: (QA V) QG^T"))
    return err;
  std::vector<float> values(static_cast<size_t>(p * q));
  if (auto err = download(values.data(), out_a_.get(), p * q,
                          "copy the preconditioned gradient back"))
    return err;
  if (auto err = sync(op))
    return err;
  out.resize({p, q});
  out.values() = std::move(values);
  return caf::none;
}

// -- factor statistics -------------------------------------------------------

caf::error cuda_backend::syrk_rm(const float* X, int64_t rows, int64_t cols,
                                 float alpha, float beta, float* C,
                                 const char* what) {
  if (!fits_int(rows) || !fits_int(cols))
    return make_error(ec::invalid_argument,
                      name_ + ": " + what + ": [" + std::to_string(rows)
                        + ", " + std::to_string(cols)
                        + "] exceeds cuBLAS's 32-bit dimensions");
  // C [0, 0] has nothing to compute, and cuBLAS refuses its lda 0
  // (it wants lda >= max(1, n)).
  if (cols == 0)
    return caf::none;
  // Column-major view of row-major X [rows, cols] is Xᵀ [cols, rows]:
  // C = alpha (Xᵀ)(Xᵀ)ᵀ + beta C, upper triangle.
  return check(cublasSsyrk(blas_, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                           static_cast<int>(cols), static_cast<int>(rows),
                           &alpha, X, static_cast<int>(cols), &beta, C,
                           static_cast<int>(cols)),
               what);
}

caf::error cuda_backend::symmetrise(float* C, int64_t n, const char* what) {
  if (n == 0)
    return caf::none;
  k_mirror_upper<<<grid_for(n * n), block, 0, stream_>>>(C, n);
  return check_launch(what);
}

namespace {

caf::error check_common(const char* op, const factor_sampling& s,
                        int threads) {
  if (threads < 1)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": threads must be >= 1, got "
                        + std::to_string(threads));
  if (s.max_examples < 0 || s.max_locations < 0)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": sampling counts must be >= 0, got"
                        + " max_examples " + std::to_string(s.max_examples)
                        + " and max_locations "
                        + std::to_string(s.max_locations));
  return caf::none;
}

// Rows per SYRK chunk so that a gathered chunk stays within 128 MiB.
int64_t chunk_rows(int64_t width) {
  return std::max<int64_t>(1, (int64_t{32} << 20) / std::max<int64_t>(1,
                                                                  width));
}

} // namespace

caf::error cuda_backend::dense_factors(const tensor& input, const tensor& ds,
                                       bool with_bias,
                                       const factor_sampling& s,
                                       int threads, tensor& A, tensor& G) {
  const char* op = "dense_factors";
  if (auto err = check_common(op, s, threads))
    return err;
  if (input.rank() != 2 || ds.rank() != 2)
    return cpu::mismatch(op, "input", input.shape(), "preactivation gradient",
                         ds.shape(), "both must have rank 2");
  if (input.dim(0) != ds.dim(0))
    return cpu::mismatch(op, "input", input.shape(), "preactivation gradient",
                         ds.shape(),
                         "examples " + std::to_string(input.dim(0)) + " vs "
                           + std::to_string(ds.dim(0)));
  if (input.dim(0) == 0)
    return cpu::mismatch(op, "input", input.shape(), "preactivation gradient",
                         ds.shape(), "the batch is empty");
  if (auto err = select(op))
    return err;
  auto batch = input.dim(0);
  auto in = input.dim(1);
  auto out = ds.dim(1);
  auto m = s.max_examples > 0 ? std::min(batch, s.max_examples) : batch;
  auto wa = in + (with_bias ? 1 : 0);
  auto inv_m = 1.0 / static_cast<double>(m);
  auto nn = static_cast<double>(batch) * static_cast<double>(batch);
  for (auto [buf, size, what] :
       {std::tuple{&col_, m * wa, "the input rows with their bias 1"},
        std::tuple{&out_a_, wa * wa, "the factor A"},
        std::tuple{&out_b_, out * out, "the factor G"}})
    if (auto err = buf->reserve(size, name_, what))
      return err;
  // The sampled examples are the first m rows; a layer's input and ds are
  // usually still on the device from the passes that made them.
  const float* x_dev = nullptr;
  const float* ds_dev = nullptr;
  // (`input` names the parameter here.)
  if (auto err = this->input(input, in_a_, "dense_factors: copy the input",
                             x_dev, m * in))
    return err;
  if (auto err = this->input(ds, in_b_, "dense_factors: copy ds", ds_dev,
                             m * out))
    return err;
  const float* a_rows = x_dev;
  if (with_bias) {
    k_gather_rows<<<grid_for(m * wa), block, 0, stream_>>>(
      x_dev, in, nullptr, 0, m, wa, col_.get());
    if (auto err = check_launch("dense_factors: append the bias 1"))
      return err;
    a_rows = col_.get();
  }
  if (auto err = syrk_rm(a_rows, m, wa, static_cast<float>(inv_m), 0.0f,
                         out_a_.get(), "dense_factors: A by cublasSsyrk"))
    return err;
  if (auto err = syrk_rm(ds_dev, m, out, static_cast<float>(nn * inv_m),
                         0.0f, out_b_.get(), "dense_factors: G by cublasSsyrk"))
    return err;
  if (auto err = symmetrise(out_a_.get(), wa, "dense_factors: mirror A"))
    return err;
  if (auto err = symmetrise(out_b_.get(), out, "dense_factors: mirror G"))
    return err;
  std::vector<float> a(static_cast<size_t>(wa * wa));
  std::vector<float> g(static_cast<size_t>(out * out));
  if (auto err = download(a.data(), out_a_.get(), wa * wa, "copy A back"))
    return err;
  if (auto err = download(g.data(), out_b_.get(), out * out, "copy G back"))
    return err;
  if (auto err = sync(op))
    return err;
  A.resize({wa, wa});
  A.values() = std::move(a);
  G.resize({out, out});
  G.values() = std::move(g);
  return caf::none;
}

caf::error cuda_backend::conv_factors(const conv2d_geometry& g,
                                      const tensor& x, const tensor& ds,
                                      bool with_bias,
                                      const factor_sampling& s,
                                      int threads, tensor& A, tensor& G) {
  const char* op = "conv_factors";
  if (auto err = check_common(op, s, threads))
    return err;
  if (auto err = cpu::check_geometry(op, g))
    return err;
  if (auto err = cpu::expect_shape(op, "input", x.shape(), "geometry input",
                                   g.input_shape()))
    return err;
  if (ds.shape() != g.output_shape())
    return cpu::mismatch(op, "preactivation gradient", ds.shape(), "input",
                         x.shape(),
                         "the geometry's output is "
                           + to_string(g.output_shape()));
  if (g.batch == 0)
    return cpu::mismatch(op, "input", x.shape(), "preactivation gradient",
                         ds.shape(), "the batch is empty");
  if (auto err = select(op))
    return err;
  auto rows = cpu::sampled_rows(s, g.batch, g.locations());
  auto m = static_cast<int64_t>(rows.size());
  auto P = g.patch_size();
  auto O = g.out_c;
  auto wa = P + (with_bias ? 1 : 0);
  auto inv_m = 1.0 / static_cast<double>(m);
  auto nn = static_cast<double>(g.batch) * static_cast<double>(g.batch);
  auto chunk = std::min(m, chunk_rows(std::max(wa, O)));
  for (auto [buf, size, what] :
       {std::tuple{&col_, chunk * std::max(wa, O), "a chunk of patches"},
        std::tuple{&out_a_, wa * wa, "the factor A"},
        std::tuple{&out_b_, O * O, "the factor G"}})
    if (auto err = buf->reserve(size, name_, what))
      return err;
  if (auto err = rows_.reserve(m, name_, "the sampled rows"))
    return err;
  const float* x_dev = nullptr;
  const float* ds_dev = nullptr;
  if (auto err = input(x, in_a_, "conv_factors: copy the input", x_dev))
    return err;
  if (auto err = input(ds, in_b_, "conv_factors: copy ds", ds_dev))
    return err;
  if (m > 0)
    if (auto err = to_device(rows_.get(), rows.data(),
                             static_cast<size_t>(m) * sizeof(int64_t),
                             "conv_factors: copy the sampled rows"))
      return err;
  if (m == 0) {
    // Nothing sampled (max_locations 0 is all, so only an empty output):
    // zeros, as the CPU's empty sums give.
    launch_fill(stream_, out_a_.get(), wa * wa, 0.0f);
    launch_fill(stream_, out_b_.get(), O * O, 0.0f);
  }
  auto d = conv_dims_of(g);
  for (int64_t first = 0; first < m; first += chunk) {
    auto count = std::min(chunk, m - first);
    float beta = first == 0 ? 0.0f : 1.0f;
    launch_im2col(stream_, x_dev, d, rows_.get(), first, count, wa,
                  col_.get());
    if (auto err = check_launch("conv_factors: patches"))
      return err;
    if (auto err = syrk_rm(col_.get(), count, wa, static_cast<float>(inv_m),
                           beta, out_a_.get(),
                           "conv_factors: A by cublasSsyrk"))
      return err;
    k_gather_rows<<<grid_for(count * O), block, 0, stream_>>>(
      ds_dev, O, rows_.get(), first, count, O, col_.get());
    if (auto err = check_launch("conv_factors: gather ds rows"))
      return err;
    if (auto err = syrk_rm(col_.get(), count, O,
                           static_cast<float>(nn * inv_m), beta, out_b_.get(),
                           "conv_factors: G by cublasSsyrk"))
      return err;
  }
  if (auto err = symmetrise(out_a_.get(), wa, "conv_factors: mirror A"))
    return err;
  if (auto err = symmetrise(out_b_.get(), O, "conv_factors: mirror G"))
    return err;
  std::vector<float> a(static_cast<size_t>(wa * wa));
  std::vector<float> gg(static_cast<size_t>(O * O));
  if (auto err = download(a.data(), out_a_.get(), wa * wa, "copy A back"))
    return err;
  if (auto err = download(gg.data(), out_b_.get(), O * O, "copy G back"))
    return err;
  if (auto err = sync(op))
    return err;
  A.resize({wa, wa});
  A.values() = std::move(a);
  G.resize({O, O});
  G.values() = std::move(gg);
  return caf::none;
}

} // namespace syncfac::cuda
