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
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/kfac_checks.hpp"
#include "kernels/cuda/cuda_impl.cuh"

namespace syncfac::cuda {

namespace {

constexpr int block = 256;

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

bool fits_int(int64_t x) {
  return x >= 0 && x <= std::numeric_limits<int>::max();
}

// A factor for cuSOLVER: square, (when damping is given, a finite damping
// >= 0,) finite, and of a dimension whose n² fits its 32-bit sizes.
caf::error check_solver_factor(const std::string& dev, const char* op,
                               const tensor& factor, const float* damping) {
  if (auto err = cpu::check_square(op, "factor", factor))
    return err;
  if (damping != nullptr)
    if (auto err = cpu::check_scalar(op, "damping", *damping, true))
      return err;
  if (auto err = cpu::check_finite(op, "factor", factor))
    return err;
  auto n = factor.dim(0);
  if (fits_int(n) && fits_int(n * n))
    return caf::none;
  return make_error(ec::invalid_argument,
                    dev + ": " + op + ": dimension " + std::to_string(n)
                      + " exceeds cuSOLVER's 32-bit sizes");
}

// syevd's failure for a factor [n, n] with its status `info`.
caf::error not_converged(const char* op, int64_t n, int info) {
  return make_error(ec::numerical_failure,
                    std::string{op} + ": the eigensolver did not converge "
                                      "for a factor of dimension "
                      + std::to_string(n) + " (cusolverDnDsyevd info "
                      + std::to_string(info) + ")");
}

} // namespace

// -- host-side steps the kernels share --------------------------------------

namespace {

// Writes values of `shape` to out, reusing out's storage.
void store(std::vector<float>&& values, const tensor_shape& shape,
           tensor& out) {
  out.resize(shape);
  out.values() = std::move(values);
}

} // namespace

caf::expected<std::vector<float>>
cuda_backend::fetch(const float* src, int64_t n, const char* what,
                    const char* op) {
  std::vector<float> values(static_cast<size_t>(n));
  if (auto err = download(values.data(), src, n, what))
    return err;
  if (auto err = sync(op))
    return err;
  return values;
}

template <class Failed>
caf::expected<std::vector<float>>
cuda_backend::fetch_solved(const float* src, int64_t n, const char* what,
                           const char* op, const int& info, Failed failed) {
  auto values = fetch(src, n, what, op);
  if (values && info != 0)
    return failed(info);
  return values;
}

caf::error cuda_backend::fetch_into(const float* src,
                                    const tensor_shape& shape,
                                    const char* what, const char* op,
                                    tensor& out) {
  auto values = fetch(src, element_count(shape), what, op);
  if (!values)
    return std::move(values.error());
  store(std::move(*values), shape, out);
  return caf::none;
}

caf::error cuda_backend::upload_operands(
  std::initializer_list<host_operand> operands) {
  for (const auto& x : operands) {
    if (auto err = x.buffer->reserve(x.values->size(), name_, x.name))
      return err;
    if (auto err = upload(x.buffer->get(), x.values->data(),
                          x.values->size(),
                          ("copy " + std::string{x.name}).c_str()))
      return err;
  }
  return caf::none;
}

caf::error cuda_backend::stage_symmetric(const char* op, const tensor& factor,
                                         double damping,
                                         const char* values_what) {
  auto n = factor.dim(0);
  if (auto err = select(op))
    return err;
  if (auto err = d_work_.reserve(n * n, name_, "the factor in double"))
    return err;
  if (auto err = d_values_.reserve(n, name_, values_what))
    return err;
  if (auto err = info_.reserve(1, name_, "the cuSOLVER status"))
    return err;
  if (auto err = upload_operands({{&in_a_, &factor, "the factor"}}))
    return err;
  k_sym_damped<<<grid_for(n * n), block, 0, stream_>>>(in_a_.get(), n,
                                                       damping,
                                                       d_work_.get());
  return check_launch("symmetric part of the factor");
}

template <class Size, class Run>
caf::error cuda_backend::solve(const char* routine,
                               const char* workspace_what, Size size, Run run,
                               int& info, const char* info_what) {
  int lwork = 0;
  if (auto err = check(size(&lwork),
                       (std::string{routine} + "_bufferSize").c_str()))
    return err;
  if (auto err = d_solver_.reserve(std::max(lwork, 1), name_,
                                   workspace_what))
    return err;
  if (auto err = check(run(d_solver_.get(), lwork), routine))
    return err;
  return to_host(&info, info_.get(), sizeof(int), info_what);
}

caf::error cuda_backend::solve_upper(const char* routine,
                                     upper_size_routine size,
                                     upper_routine run,
                                     const char* workspace_what, int64_t n,
                                     int& info, const char* info_what) {
  auto in = static_cast<int>(n);
  return solve(
    routine, workspace_what,
    [&](int* lwork) {
      return size(solver_, CUBLAS_FILL_MODE_UPPER, in, d_work_.get(), in,
                  lwork);
    },
    [&](double* work, int lwork) {
      return run(solver_, CUBLAS_FILL_MODE_UPPER, in, d_work_.get(), in, work,
                 lwork, info_.get());
    },
    info, info_what);
}

caf::error cuda_backend::from_work(work_kernel convert, int64_t n,
                                   const char* out_what,
                                   const char* launch_what) {
  if (auto err = out_a_.reserve(n * n, name_, out_what))
    return err;
  convert<<<grid_for(n * n), block, 0, stream_>>>(d_work_.get(), n,
                                                  out_a_.get());
  return check_launch(launch_what);
}

caf::error cuda_backend::start_products(const char* op, int64_t size,
                                        const char* intermediate_what) {
  if (auto err = select(op))
    return err;
  if (auto err = out_b_.reserve(size, name_, intermediate_what))
    return err;
  return out_a_.reserve(size, name_, "the preconditioned gradient");
}

// -- factorisations ----------------------------------------------------------

caf::error cuda_backend::damped_potrf(const char* op, const tensor& factor,
                                      float damping) {
  if (auto err = check_solver_factor(name_, op, factor, &damping))
    return err;
  auto n = factor.dim(0);
  if (n == 0)
    return caf::none; // nothing to factorise (cuSOLVER wants lda >= 1)
  if (auto err = stage_symmetric(op, factor, static_cast<double>(damping),
                                 "the Cholesky pivots"))
    return err;
  int info = 0;
  if (auto err = solve_upper("cusolverDnDpotrf", cusolverDnDpotrf_bufferSize,
                             cusolverDnDpotrf, "the Cholesky workspace", n,
                             info, "copy the potrf status back"))
    return err;
  k_diagonal<<<grid_for(n), block, 0, stream_>>>(d_work_.get(), n,
                                                 d_values_.get());
  if (auto err = check_launch("Cholesky pivots"))
    return err;
  host_diag_.resize(static_cast<size_t>(n));
  if (auto err = to_host(host_diag_, d_values_.get(),
                         "copy the Cholesky pivots back"))
    return err;
  if (auto err = sync(op))
    return err;
  if (info < 0)
    return make_error(ec::internal, name_ + ": " + op
                                      + ": cusolverDnDpotrf rejected argument "
                                      + std::to_string(-info));
  if (info > 0)
    return cpu::not_positive_definite(
      op, n, damping,
      "Cholesky met a pivot <= 0 (leading minor " + std::to_string(info)
        + ")");
  // The CPU's round-off test: pivots below n·ε·max diagonal count as 0.
  double max_diag = 0.0;
  for (int64_t k = 0; k < n; ++k)
    max_diag = std::max(max_diag, static_cast<double>(factor[k * n + k])
                                    + static_cast<double>(damping));
  return cpu::check_round_off_pivots(op, n, damping, max_diag,
                                     host_diag_.data(), 1);
}

template <class Use>
caf::error cuda_backend::with_potrf(const char* op, const tensor& factor,
                                    float damping, tensor& out, Use use) {
  if (auto err = damped_potrf(op, factor, damping))
    return err;
  auto n = factor.dim(0);
  if (n == 0) {
    out.resize({0, 0});
    return caf::none;
  }
  return use(n);
}

caf::error cuda_backend::damped_inverse(const tensor& factor, float damping,
                                        tensor& inverse) {
  const char* op = "damped_inverse";
  return with_potrf(op, factor, damping, inverse, [&](int64_t n) {
    int info = 0;
    if (auto err = solve_upper("cusolverDnDpotri",
                               cusolverDnDpotri_bufferSize, cusolverDnDpotri,
                               "the inversion workspace", n, info,
                               "copy the potri status back"))
      return err;
    if (auto err = from_work(k_from_lower, n, "the inverse",
                             "symmetric inverse"))
      return err;
    auto values = fetch_solved(
      out_a_.get(), n * n, "copy the inverse back", op, info, [&](int code) {
        return cpu::not_positive_definite(op, n, damping,
                                          "cusolverDnDpotri reported info "
                                            + std::to_string(code));
      });
    if (!values)
      return std::move(values.error());
    for (int64_t idx = 0; idx < n * n; ++idx)
      if (!std::isfinite((*values)[static_cast<size_t>(idx)]))
        return cpu::inverse_out_of_range(
          op, n, (*values)[static_cast<size_t>(idx)], idx / n, idx % n);
    store(std::move(*values), {n, n}, inverse);
    return caf::error{};
  });
}

caf::error cuda_backend::damped_cholesky(const tensor& factor, float damping,
                                         tensor& lower) {
  const char* op = "damped_cholesky";
  return with_potrf(op, factor, damping, lower, [&](int64_t n) {
    if (auto err = from_work(k_lower_only, n, "the Cholesky factor",
                             "lower Cholesky factor"))
      return err;
    return fetch_into(out_a_.get(), {n, n}, "copy the Cholesky factor back",
                      op, lower);
  });
}

caf::error cuda_backend::symmetric_eigen(const tensor& factor,
                                         tensor& eigenvalues,
                                         tensor& eigenvectors) {
  const char* op = "symmetric_eigen";
  if (auto err = check_solver_factor(name_, op, factor, nullptr))
    return err;
  auto n = factor.dim(0);
  if (n == 0) {
    eigenvalues.resize({0});
    eigenvectors.resize({0, 0});
    return caf::none;
  }
  if (auto err = stage_symmetric(op, factor, 0.0, "the eigenvalues"))
    return err;
  auto in = static_cast<int>(n);
  int info = 0;
  if (auto err = solve(
        "cusolverDnDsyevd", "the eigensolver workspace",
        [&](int* lwork) {
          return cusolverDnDsyevd_bufferSize(
            solver_, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, in,
            d_work_.get(), in, d_values_.get(), lwork);
        },
        [&](double* work, int lwork) {
          return cusolverDnDsyevd(solver_, CUSOLVER_EIG_MODE_VECTOR,
                                  CUBLAS_FILL_MODE_LOWER, in, d_work_.get(),
                                  in, d_values_.get(), work, lwork,
                                  info_.get());
        },
        info, "copy the syevd status back"))
    return err;
  if (auto err = from_work(k_transpose, n, "the eigenvectors",
                           "eigenvectors"))
    return err;
  std::vector<double> e(static_cast<size_t>(n));
  if (auto err = to_host(e, d_values_.get(), "copy the eigenvalues back"))
    return err;
  auto vectors = fetch_solved(out_a_.get(), n * n,
                              "copy the eigenvectors back", op, info,
                              [&](int code) {
                                return not_converged(op, n, code);
                              });
  if (!vectors)
    return std::move(vectors.error());
  if (auto err = cpu::clamp_eigenvalues(op, e.data(), n))
    return err;
  eigenvalues.resize({n});
  for (int64_t k = 0; k < n; ++k)
    eigenvalues[k] = static_cast<float>(e[static_cast<size_t>(k)]);
  store(std::move(*vectors), {n, n}, eigenvectors);
  return caf::none;
}

// -- preconditioning ---------------------------------------------------------

caf::error cuda_backend::precondition_factored(const tensor& grad,
                                               const tensor& A_inv,
                                               const tensor& G_inv,
                                               float scale, tensor& out) {
  const char* op = "precondition_factored";
  if (auto err = cpu::check_sided_operands(op, grad, "A_inv", A_inv, "G_inv",
                                           G_inv, scale,
                                           cpu::factor_scan::scan))
    return err;
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (auto err = start_products(op, p * q, "grad G_inv"))
    return err;
  if (auto err = upload_operands({{&in_a_, &grad, "grad"},
                                  {&in_b_, &A_inv, "A_inv"},
                                  {&in_c_, &G_inv, "G_inv"}}))
    return err;
  struct product {
    int64_t k;
    float alpha;
    const float* A;
    int64_t lda;
    const float* B;
    float* C;
    const char* what;
  };
  // out = scale · A_inv (grad G_inv): both products [p, q], ldb = ldc = q.
  for (const auto& x :
       {product{q, 1.0f, in_a_.get(), q, in_c_.get(), out_b_.get(),
                "precondition_factored: grad G_inv"},
        product{p, scale, in_b_.get(), p, out_b_.get(), out_a_.get(),
                "precondition_factored: A_inv (grad G_inv)"}})
    if (auto err = gemm_rm(false, false, p, q, x.k, x.alpha, x.A, x.lda, x.B,
                           q, 0.0f, x.C, q, x.what))
      return err;
  return fetch_into(out_a_.get(), {p, q},
                    "copy the preconditioned gradient back", op, out);
}

caf::error cuda_backend::precondition_cholesky(const tensor& grad,
                                               const tensor& LA,
                                               const tensor& LG, float scale,
                                               tensor& out) {
  const char* op = "precondition_cholesky";
  if (auto err = cpu::check_sided_operands(op, grad, "LA", LA, "LG", LG,
                                           scale, cpu::factor_scan::scan))
    return err;
  for (auto [what, L] : {std::pair{"LA", &LA}, std::pair{"LG", &LG}})
    if (auto err = cpu::check_positive_pivots(op, what, *L))
      return err;
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (!fits_int(p) || !fits_int(q))
    return make_error(ec::invalid_argument,
                      name_ + ": " + op + ": grad " + grad.shape_string()
                        + " exceeds cuBLAS's 32-bit dimensions");
  if (auto err = select(op))
    return err;
  // The solves work in place on grad's copy in out_a_.
  if (auto err = out_a_.reserve(p * q, name_, "the preconditioned gradient"))
    return err;
  if (auto err = upload_operands({{&out_a_, &grad, "grad"},
                                  {&in_b_, &LA, "LA"},
                                  {&in_c_, &LG, "LG"}}))
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
  return fetch_into(out_a_.get(), {p, q},
                    "copy the preconditioned gradient back", op, out);
}

caf::error cuda_backend::precondition_eigen(const tensor& grad,
                                            const tensor& QA,
                                            const tensor& eA,
                                            const tensor& QG,
                                            const tensor& eG, float lambda,
                                            int64_t locations, tensor& out) {
  const char* op = "precondition_eigen";
  if (auto err = cpu::check_eigen_operands(op, grad, QA, eA, QG, eG, lambda,
                                           locations, cpu::factor_scan::scan))
    return err;
  auto T = static_cast<float>(locations);
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  if (auto err = start_products(op, p * q, "an eigenbasis product"))
    return err;
  if (auto err = upload_operands(
        {{&in_a_, &grad, "grad"}, {&in_b_, &QA, "QA"}, {&in_c_, &QG, "QG"},
         {&in_d_, &eA, "eA"}, {&in_e_, &eG, "eG"}}))
    return err;
  // out_a_ = QAᵀ x QG into the eigenbasis, QA x QGᵀ out of it (via
  // out_b_, both [p, q]).
  auto sandwich = [&](bool into_basis, const float* x, const char* left_what,
                      const char* right_what) {
    if (auto err = gemm_rm(into_basis, false, p, q, p, 1.0f, in_b_.get(), p,
                           x, q, 0.0f, out_b_.get(), q, left_what))
      return err;
    return gemm_rm(false, !into_basis, p, q, q, 1.0f, out_b_.get(), q,
                   in_c_.get(), q, 0.0f, out_a_.get(), q, right_what);
  };
  // V = QAᵀ grad QG, divided by T eA_i eG_j + λ, then QA V QGᵀ.
  if (auto err = sandwich(true, in_a_.get(), "precondition_eigen: QA^T grad",
                          "precondition_eigen: (QA^T grad) QG"))
    return err;
  if (p * q > 0) {
    k_divide_eigen<<<grid_for(p * q), block, 0, stream_>>>(
      out_a_.get(), in_d_.get(), in_e_.get(), p, q, T, lambda);
    if (auto err = check_launch("precondition_eigen: divide"))
      return err;
  }
  if (auto err = sandwich(false, out_a_.get(), "precondition_eigen: QA V",
                          "precondition_eigen: (QA V) QG^T"))
    return err;
  return fetch_into(out_a_.get(), {p, q},
                    "copy the preconditioned gradient back", op, out);
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

caf::error cuda_backend::fetch_factors(const char* op, int64_t wa,
                                       int64_t wg, tensor& A, tensor& G) {
  auto mirror = [&](const char* side) { return std::string{op} + side; };
  if (auto err = symmetrise(out_a_.get(), wa, mirror(": mirror A").c_str()))
    return err;
  if (auto err = symmetrise(out_b_.get(), wg, mirror(": mirror G").c_str()))
    return err;
  std::vector<float> a(static_cast<size_t>(wa * wa));
  if (auto err = download(a.data(), out_a_.get(), wa * wa, "copy A back"))
    return err;
  auto g = fetch(out_b_.get(), wg * wg, "copy G back", op);
  if (!g)
    return std::move(g.error());
  store(std::move(a), {wa, wa}, A);
  store(std::move(*g), {wg, wg}, G);
  return caf::none;
}

namespace {

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
  if (auto err = cpu::check_dense_factors(op, input, ds, s, threads))
    return err;
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
  return fetch_factors(op, wa, out, A, G);
}

caf::error cuda_backend::conv_factors(const conv2d_geometry& g,
                                      const tensor& x, const tensor& ds,
                                      bool with_bias,
                                      const factor_sampling& s,
                                      int threads, tensor& A, tensor& G) {
  const char* op = "conv_factors";
  if (auto err = cpu::check_conv_factors(op, g, x, ds, s, threads))
    return err;
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
  return fetch_factors(op, wa, O, A, G);
}

} // namespace syncfac::cuda
