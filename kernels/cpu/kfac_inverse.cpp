// K-FAC damped inverses, eigendecompositions and preconditioning; the
// equations are in the header.

#include "kernels/cpu/kfac_inverse.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/kfac_checks.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"
#include "kernels/damping_retry.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::cpu {

namespace {

// Factorisations run in double. The factors are Gram matrices that are
// rank-deficient whenever the batch has fewer rows than the layer has
// inputs (a dense layer with 785 inputs at batch 128), so the conditioning
// of F + d·I is about λ_max / d: 50 / 0.0023 ≈ 2e4 for the seed ConvNet's
// dense layer with conv-sized damping. Float Cholesky then leaves relative
// errors of 1e-4 in the inverse, and more as λ shrinks; double leaves
// 1e-13 at about twice the time (63 vs 34 ms at 785 x 785), and inverses
// are computed every few steps only. The results are stored as float.
using dmat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;

bool is_square(const tensor& x) {
  return x.rank() == 2 && x.dim(0) == x.dim(1);
}

// Square tiles of this many rows and columns keep both the row-major float
// side and the column-major double side of a copy in cache: element by
// element, one of the two goes with a stride of n, a cache miss per element
// at the dense layer's n = 785 (symmetric_part took 1.7 ms there, tiled
// 0.6 ms, beside an 8 ms factorisation).
constexpr Eigen::Index tile = 32;

// ½(F + Fᵀ) in double (or float, for damped_inverse_f32): Eigen's solvers
// read one triangle only, and the answer should not depend on which one a
// slightly asymmetric factor (EMA round-off) happens to store.
template <class Scalar = double>
Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>
symmetric_part(const tensor& factor) {
  auto n = static_cast<Eigen::Index>(factor.dim(0));
  Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic> m(n, n);
  const float* f = factor.data();
  const Scalar half{0.5};
  // m(i, j) = ½(f_ij + f_ji), column-major m: j outer, i inner per tile.
  for (Eigen::Index j0 = 0; j0 < n; j0 += tile)
    for (Eigen::Index i0 = 0; i0 < n; i0 += tile) {
      auto j1 = std::min(j0 + tile, n);
      auto i1 = std::min(i0 + tile, n);
      for (Eigen::Index j = j0; j < j1; ++j)
        for (Eigen::Index i = i0; i < i1; ++i)
          m(i, j) = half * (Scalar{f[i * n + j]} + Scalar{f[j * n + i]});
    }
  return m;
}

// Runs f on the calling thread with Eigen single-threaded: outside an
// OpenMP region Eigen's products would open a team of
// omp_get_max_threads() threads next to whatever the other actors run.
template <class F>
void on_this_thread(F&& f) {
  eigen_team(1, [&](int, int) { f(); });
}

// Writes a symmetric matrix to a float tensor, or fails if a value does
// not fit a float (an inverse of a nearly singular factor).
template <class Matrix>
caf::error store_symmetric(const char* op, const Matrix& m, tensor& out) {
  auto n = m.rows();
  std::vector<float> values(static_cast<size_t>(n * n));
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j) {
      auto v = static_cast<float>(m(i, j));
      if (!std::isfinite(v))
        return inverse_out_of_range(op, n, m(i, j), i, j);
      values[static_cast<size_t>(i * n + j)] = v;
    }
  out.resize({n, n});
  out.values() = std::move(values);
  return caf::none;
}

// Eigen's LLT fails only on a pivot <= 0. A pivot that survives only by
// round-off (a rank-deficient factor with damping 0 gives pivots of
// ±1e-16 · scale in double) would yield an inverse of noise, so pivots
// below n · ε · the largest diagonal entry count as zero too, ε the
// factorisation's own; they are indistinguishable from singular at its
// precision.
template <class Matrix>
caf::error check_pivots(const char* op, const Eigen::LLT<Matrix>& llt,
                        const Matrix& m, float damping) {
  using scalar = typename Matrix::Scalar;
  auto n = m.rows();
  if (llt.info() != Eigen::Success)
    return not_positive_definite(op, n, damping,
                                 "Cholesky met a pivot <= 0");
  if (n == 0)
    return caf::none;
  Eigen::VectorXd pivots = llt.matrixLLT().diagonal().template cast<double>();
  return check_round_off_pivots(op, n, damping, m.diagonal().maxCoeff(),
                                pivots.data(), 1,
                                std::numeric_limits<scalar>::epsilon());
}

matrix_operand operand(const float* data, int64_t rows, int64_t cols,
                       bool trans = false) {
  return {data, rows, cols, trans};
}

bool aliases(const tensor& out, std::initializer_list<const tensor*> inputs) {
  return std::any_of(inputs.begin(), inputs.end(),
                     [&](const tensor* x) { return x == &out; });
}

// out = alpha · lhs · rhs for row-major [m, k] · [k, n] on this thread.
void product(const float* lhs, bool trans_lhs, int64_t lhs_rows,
             int64_t lhs_cols, const float* rhs, bool trans_rhs,
             int64_t rhs_rows, int64_t rhs_cols, float alpha, float* out) {
  matmul(1, operand(lhs, lhs_rows, lhs_cols, trans_lhs),
         operand(rhs, rhs_rows, rhs_cols, trans_rhs), alpha, 0.0f, out);
}

// Writes values of shape [p, q] to out, reusing out's storage.
void store(std::vector<float>&& values, int64_t p, int64_t q, tensor& out) {
  out.resize({p, q});
  out.values() = std::move(values);
}

} // namespace

float pi_adjustment(const tensor& A, const tensor& G) {
  if (!is_square(A) || !is_square(G))
    return 1.0f;
  auto mean_diagonal = [](const tensor& x) {
    auto n = x.dim(0);
    double trace = 0.0;
    for (int64_t i = 0; i < n; ++i)
      trace += x[i * n + i];
    return n > 0 ? trace / static_cast<double>(n) : 0.0;
  };
  auto a = mean_diagonal(A);
  auto g = mean_diagonal(G);
  // !(x > 0) also catches NaN; a zero factor has no scale to balance.
  if (!(a > 0.0) || !(g > 0.0))
    return 1.0f;
  auto pi = static_cast<float>(std::sqrt(a / g));
  return std::isfinite(pi) && pi > 0.0f ? pi : 1.0f;
}

damping_plan factored_damping(const tensor& A, const tensor& G, float lambda,
                              int64_t locations) {
  if (!std::isfinite(lambda) || lambda < 0.0f || locations < 1) {
    auto nan = std::numeric_limits<float>::quiet_NaN();
    return {nan, nan};
  }
  double pi = pi_adjustment(A, G);
  auto root = std::sqrt(double{lambda} / static_cast<double>(locations));
  return {static_cast<float>(pi * root), static_cast<float>(root / pi)};
}

namespace {

/// The Cholesky factorisation of ½(F + Fᵀ) + damping·I in Scalar (double,
/// or float for damped_inverse_f32), after the checks every damped
/// factorisation makes; `use` turns the factorisation into the output.
template <class Scalar = double, class Use>
caf::error damped_llt(const char* op, const tensor& factor, float damping,
                      Use use) {
  using matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
  if (auto err = check_square(op, "factor", factor))
    return err;
  if (auto err = check_scalar(op, "damping", damping, true))
    return err;
  if (auto err = check_finite(op, "factor", factor))
    return err;
  auto m = symmetric_part<Scalar>(factor);
  m.diagonal().array() += Scalar{damping};
  caf::error err;
  on_this_thread([&] {
    Eigen::LLT<matrix> llt(m);
    err = check_pivots(op, llt, m, damping);
    if (!err)
      err = use(llt);
  });
  return err;
}

/// (½(F + Fᵀ) + damping·I)⁻¹ in Scalar, stored as float.
template <class Scalar>
caf::error damped_inverse_in(const char* op, const tensor& factor,
                             float damping, tensor& inverse) {
  using matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
  return damped_llt<Scalar>(op, factor, damping,
                            [&](const Eigen::LLT<matrix>& llt) {
    matrix x = llt.solve(matrix::Identity(llt.rows(), llt.cols()));
    // The two triangular solves leave X asymmetric at about 1e-15
    // relative (1e-7 in float). Rounding to float hides that except where
    // an entry pair straddles a rounding boundary; averaging first makes
    // the stored inverse exactly symmetric always, as the K-FAC algebra
    // assumes.
    // Into a new matrix: x = ½(x + xᵀ) in place would read entries
    // already averaged (Eigen does not guard a transpose's aliasing).
    matrix sym = Scalar{0.5} * (x + x.transpose());
    return store_symmetric(op, sym, inverse);
  });
}

} // namespace

caf::error damped_inverse(const tensor& factor, float damping,
                          tensor& inverse) {
  return damped_inverse_in<double>("damped_inverse", factor, damping,
                                   inverse);
}

caf::error damped_inverse_f32(const tensor& factor, float damping,
                              tensor& inverse) {
  return damped_inverse_in<float>("damped_inverse_f32", factor, damping,
                                  inverse);
}

caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                               float damping, int max_retries,
                                               tensor& inverse) {
  return retry_damping("damped_inverse_with_retry", factor, damping,
                       max_retries, [&](float d) {
                         return damped_inverse(factor, d, inverse);
                       });
}

caf::expected<float> damped_inverse_f32_with_retry(const tensor& factor,
                                                   float damping,
                                                   int max_retries,
                                                   tensor& inverse) {
  return retry_damping("damped_inverse_f32_with_retry", factor, damping,
                       max_retries, [&](float d) {
                         return damped_inverse_f32(factor, d, inverse);
                       });
}

caf::error damped_cholesky(const tensor& factor, float damping,
                           tensor& lower) {
  return damped_llt("damped_cholesky", factor, damping,
                    [&](const Eigen::LLT<dmat>& llt) {
                      // L's lower triangle, read in place by tiles (see
                      // symmetric_part); the upper one stays 0.
                      const dmat& l = llt.matrixLLT();
                      auto n = l.rows();
                      std::vector<float> values(static_cast<size_t>(n * n),
                                                0.0f);
                      for (Eigen::Index j0 = 0; j0 < n; j0 += tile)
                        for (Eigen::Index i0 = j0; i0 < n; i0 += tile) {
                          auto j1 = std::min(j0 + tile, n);
                          auto i1 = std::min(i0 + tile, n);
                          for (Eigen::Index j = j0; j < j1; ++j)
                            for (Eigen::Index i = std::max(i0, j); i < i1;
                                 ++i)
                              values[static_cast<size_t>(i * n + j)]
                                = static_cast<float>(l(i, j));
                        }
                      store(std::move(values), n, n, lower);
                      return caf::error{};
                    });
}

caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                float damping,
                                                int max_retries,
                                                tensor& lower) {
  return retry_damping("damped_cholesky_with_retry", factor, damping,
                       max_retries, [&](float d) {
                         return damped_cholesky(factor, d, lower);
                       });
}

caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                           tensor& eigenvectors) {
  const char* op = "symmetric_eigen";
  if (auto err = check_square(op, "factor", factor))
    return err;
  if (auto err = check_finite(op, "factor", factor))
    return err;
  auto m = symmetric_part(factor);
  auto n = m.rows();
  Eigen::SelfAdjointEigenSolver<dmat> solver;
  on_this_thread([&] { solver.compute(m, Eigen::ComputeEigenvectors); });
  if (solver.info() != Eigen::Success)
    return make_error(ec::numerical_failure,
                      std::string{op} + ": the eigensolver did not converge "
                                        "for a factor of dimension "
                        + std::to_string(n));
  Eigen::VectorXd e = solver.eigenvalues();
  // A factor is a second moment, positive semi-definite by construction.
  // Its null directions (a batch smaller than the layer's fan-in) come out
  // as eigenvalues of about ±ε·|F| from the float entries and float
  // accumulation; a negative one would shrink the divisor T·eA·eG + λ below
  // λ, or even below 0, so they are clamped to their true value 0. One far
  // beyond round-off means the factor itself is wrong (not a Gram matrix).
  if (auto err = clamp_eigenvalues(op, e.data(), n))
    return err;
  const dmat& q = solver.eigenvectors();
  std::vector<float> vectors(static_cast<size_t>(n * n));
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index k = 0; k < n; ++k)
      vectors[static_cast<size_t>(i * n + k)] = static_cast<float>(q(i, k));
  eigenvalues.resize({n});
  for (Eigen::Index k = 0; k < n; ++k)
    eigenvalues[k] = static_cast<float>(e(k));
  store(std::move(vectors), n, n, eigenvectors);
  return caf::none;
}

namespace {

/// scale · A_inv · grad · G_inv with `multiply(a, b, m, k, n, alpha, c)`
/// (c = alpha · a[m, k] · b[k, n]) for both products; out may alias an
/// input.
template <class Multiply>
void factored_products(const tensor& grad, const tensor& A_inv,
                       const tensor& G_inv, float scale, tensor& out,
                       Multiply multiply) {
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  std::vector<float> right(static_cast<size_t>(p * q));
  multiply(grad.data(), G_inv.data(), p, q, q, 1.0f, right.data());
  if (aliases(out, {&grad, &A_inv, &G_inv})) {
    std::vector<float> result(static_cast<size_t>(p * q));
    multiply(A_inv.data(), right.data(), p, p, q, scale, result.data());
    store(std::move(result), p, q, out);
    return;
  }
  out.resize({p, q});
  multiply(A_inv.data(), right.data(), p, p, q, scale, out.data());
}

} // namespace

caf::error precondition_factored(const tensor& grad, const tensor& A_inv,
                                 const tensor& G_inv, float scale,
                                 tensor& out) {
  const char* op = "precondition_factored";
  if (auto err = check_sided_operands(op, grad, "A_inv", A_inv, "G_inv",
                                      G_inv, scale, factor_scan::scan))
    return err;
  factored_products(grad, A_inv, G_inv, scale, out,
                    [](const float* a, const float* b, int64_t m, int64_t k,
                       int64_t n, float alpha, float* c) {
                      product(a, false, m, k, b, false, k, n, alpha, c);
                    });
  return caf::none;
}

caf::error precondition_factored_bf16(const tensor& grad, const tensor& A_inv,
                                      const tensor& G_inv, float scale,
                                      tensor& out, factor_scan scan) {
  const char* op = "precondition_factored_bf16";
  if (auto err = check_sided_operands(op, grad, "A_inv", A_inv, "G_inv",
                                      G_inv, scale, scan))
    return err;
  auto backend = bf16_products_backend();
  if (!backend)
    return with_context(backend.error(), op);
  factored_products(grad, A_inv, G_inv, scale, out,
                    [on = *backend](const float* a, const float* b, int64_t m,
                                    int64_t k, int64_t n, float alpha,
                                    float* c) {
                      matmul_bf16(on, a, b, m, k, n, alpha, c);
                    });
  return caf::none;
}

namespace {

// Few right-hand sides (the ConvNet's layers have 10 or 16 outputs): the
// gradient's columns, transposed into rows xt [q, p], are solved against LA
// by dot products along LA's contiguous rows (each row of LA is read once
// for up to rhs_block columns), where Eigen's blocked triangular solve
// spends most of its time packing. LG is small: its solves run along xt's
// rows, vectorised over p.
constexpr int64_t few_rhs_limit = 32;
constexpr int rhs_block = 8;

// Σ_j l[j] x_r[j] for j in [0, n) and up to rhs_block rows x_r (stride ld).
template <int R>
void dots(const float* l, const float* x, int64_t ld, int64_t n,
          float* out) {
  simd::vf acc[R];
  for (auto& a : acc)
    a = simd::zero();
  int64_t j = 0;
  for (; j + simd::width <= n; j += simd::width) {
    auto lv = simd::load(l + j);
    for (int r = 0; r < R; ++r)
      acc[r] = simd::fma(lv, simd::load(x + r * ld + j), acc[r]);
  }
  if (j < n) {
    auto m = simd::first_lanes(static_cast<int>(n - j));
    auto lv = simd::load(l + j, m);
    for (int r = 0; r < R; ++r)
      acc[r] = simd::fma(lv, simd::load(x + r * ld + j, m), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float lanes[simd::width];
    simd::store(lanes, acc[r]);
    float sum = 0.0f;
    for (float v : lanes)
      sum += v;
    out[r] = sum;
  }
}

// x_r[0, n) -= c_r l[0, n) for up to rhs_block rows x_r (stride ld).
template <int R>
void axpys(const float* l, const float* c, float* x, int64_t ld, int64_t n) {
  simd::vf cv[R];
  for (int r = 0; r < R; ++r)
    cv[r] = simd::broadcast(-c[r]);
  int64_t j = 0;
  for (; j + simd::width <= n; j += simd::width) {
    auto lv = simd::load(l + j);
    for (int r = 0; r < R; ++r) {
      float* xr = x + r * ld + j;
      simd::store(xr, simd::fma(cv[r], lv, simd::load(xr)));
    }
  }
  for (; j < n; ++j)
    for (int r = 0; r < R; ++r)
      x[r * ld + j] = std::fma(-c[r], l[j], x[r * ld + j]);
}

// xt [rows, p] := rows of (LA LAᵀ)⁻¹ applied to each row, LA [p, p] lower.
template <int R>
void solve_la(const float* la, int64_t p, float* xt) {
  float s[rhs_block];
  // LA z = x: z_i = (x_i - LA[i, :i] z[:i]) / LA[i, i].
  for (int64_t i = 0; i < p; ++i) {
    const float* row = la + i * p;
    dots<R>(row, xt, p, i, s);
    for (int r = 0; r < R; ++r)
      xt[r * p + i] = (xt[r * p + i] - s[r]) / row[i];
  }
  // LAᵀ w = z, column-oriented: w_i final once the rows below are done,
  // then it leaves its share LA[i, :i] w_i the rows above.
  for (int64_t i = p; i-- > 0;) {
    const float* row = la + i * p;
    for (int r = 0; r < R; ++r) {
      xt[r * p + i] /= row[i];
      s[r] = xt[r * p + i];
    }
    axpys<R>(row, s, xt, p, i);
  }
}

void solve_la_rows(const float* la, int64_t p, float* xt, int64_t rows) {
  for (int64_t r0 = 0; r0 < rows; r0 += rhs_block) {
    float* x = xt + r0 * p;
    switch (std::min<int64_t>(rhs_block, rows - r0)) {
      case 8: solve_la<8>(la, p, x); break;
      case 7: solve_la<7>(la, p, x); break;
      case 6: solve_la<6>(la, p, x); break;
      case 5: solve_la<5>(la, p, x); break;
      case 4: solve_la<4>(la, p, x); break;
      case 3: solve_la<3>(la, p, x); break;
      case 2: solve_la<2>(la, p, x); break;
      default: solve_la<1>(la, p, x);
    }
  }
}

// xt [q, p]: X := X (LG LGᵀ)⁻¹ with X = xtᵀ, i.e. per column i of xt the
// q-vector v := v LG⁻ᵀ LG⁻¹, vectorised over i.
void solve_lg(const float* lg, int64_t q, float* xt, int64_t p) {
  // u LGᵀ = v: LG uᵀ = vᵀ, forward over a.
  for (int64_t a = 0; a < q; ++a) {
    float* ua = xt + a * p;
    for (int64_t b = 0; b < a; ++b) {
      float c = lg[a * q + b];
      axpys<1>(xt + b * p, &c, ua, p, p);
    }
    auto inv = 1.0f / lg[a * q + a];
    for (int64_t i = 0; i < p; ++i)
      ua[i] *= inv;
  }
  // y LG = u: LGᵀ yᵀ = uᵀ, backward over a.
  for (int64_t a = q; a-- > 0;) {
    float* ya = xt + a * p;
    for (int64_t b = a + 1; b < q; ++b) {
      float c = lg[b * q + a];
      axpys<1>(xt + b * p, &c, ya, p, p);
    }
    auto inv = 1.0f / lg[a * q + a];
    for (int64_t i = 0; i < p; ++i)
      ya[i] *= inv;
  }
}

} // namespace

caf::error precondition_cholesky(const tensor& grad, const tensor& LA,
                                 const tensor& LG, float scale, tensor& out,
                                 factor_scan scan) {
  const char* op = "precondition_cholesky";
  if (auto err = check_sided_operands(op, grad, "LA", LA, "LG", LG, scale,
                                      scan))
    return err;
  using fmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic,
                             Eigen::RowMajor>;
  using cmap = Eigen::Map<const fmat>;
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  cmap la(LA.data(), p, p);
  cmap lg(LG.data(), q, q);
  fmat x = cmap(grad.data(), p, q);
  for (auto [what, L] : {std::pair{"LA", &LA}, std::pair{"LG", &LG}})
    if (auto err = check_positive_pivots(op, what, *L))
      return err;
  if (q <= few_rhs_limit) {
    std::vector<float> xt(static_cast<size_t>(p * q));
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = 0; j < q; ++j)
        xt[static_cast<size_t>(j * p + i)] = grad[i * q + j];
    solve_la_rows(LA.data(), p, xt.data(), q);
    solve_lg(LG.data(), q, xt.data(), p);
    std::vector<float> values(static_cast<size_t>(p * q));
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = 0; j < q; ++j)
        values[static_cast<size_t>(i * q + j)]
          = xt[static_cast<size_t>(j * p + i)] * scale;
    store(std::move(values), p, q, out);
    return caf::none;
  }
  on_this_thread([&] {
    // (LA LAᵀ)⁻¹ X = LA⁻ᵀ (LA⁻¹ X), and X (LG LGᵀ)⁻¹ = (X LG⁻ᵀ) LG⁻¹.
    // Each solve costs n² per column, where forming the inverses would
    // cost n³ on the inverse side.
    la.triangularView<Eigen::Lower>().solveInPlace(x);
    la.transpose().triangularView<Eigen::Upper>().solveInPlace(x);
    lg.transpose().triangularView<Eigen::Upper>()
      .solveInPlace<Eigen::OnTheRight>(x);
    lg.triangularView<Eigen::Lower>().solveInPlace<Eigen::OnTheRight>(x);
    x *= scale;
  });
  std::vector<float> values(x.data(), x.data() + p * q);
  store(std::move(values), p, q, out);
  return caf::none;
}

caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                              const tensor& eA, const tensor& QG,
                              const tensor& eG, float lambda,
                              int64_t locations, tensor& out,
                              factor_scan scan) {
  const char* op = "precondition_eigen";
  if (auto err = check_eigen_operands(op, grad, QA, eA, QG, eG, lambda,
                                      locations, scan))
    return err;
  auto T = static_cast<float>(locations);
  auto p = grad.dim(0);
  auto q = grad.dim(1);
  auto n = static_cast<size_t>(p * q);
  std::vector<float> left(n);
  std::vector<float> v(n);
  // V = QAᵀ · grad · QG: grad in the eigenbasis, where T·(A⊗G) + λI is the
  // diagonal T·eA_i·eG_j + λ.
  product(QA.data(), true, p, p, grad.data(), false, p, q, 1.0f, left.data());
  product(left.data(), false, p, q, QG.data(), false, q, q, 1.0f, v.data());
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j < q; ++j)
      v[static_cast<size_t>(i * q + j)] /= T * eA[i] * eG[j] + lambda;
  // Back: out = QA · V · QGᵀ.
  product(QA.data(), false, p, p, v.data(), false, p, q, 1.0f, left.data());
  product(left.data(), false, p, q, QG.data(), true, q, q, 1.0f, v.data());
  store(std::move(v), p, q, out);
  return caf::none;
}

double kl_clip_scale(double learning_rate, double kl_clip,
                     double grad_dot_preconditioned) {
  if (!(kl_clip > 0.0))
    return 1.0;
  auto denom = learning_rate * learning_rate * grad_dot_preconditioned;
  // !(x > 0) also catches NaN: no meaningful step size to clip.
  if (!(denom > 0.0))
    return 1.0;
  return std::min(1.0, std::sqrt(kl_clip / denom));
}

} // namespace syncfac::cpu
