// The Gram-matrix kernels of the K-FAC factors (kernels/cpu/kfac_factors.cpp),
// compiled once per instruction-set level (kernels/cpu/isa_kernels.hpp).
#include "kernels/cpu/isa_eigen.hpp"

#include <algorithm>

#include "kernels/cpu/isa_kernels.hpp"
#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

using row_matrix
  = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using stride = Eigen::OuterStride<>;
using const_strided = Eigen::Map<const row_matrix, 0, stride>;
using strided = Eigen::Map<row_matrix, 0, stride>;
using index = Eigen::Index;

constexpr int block_vecs = 3; // vectors per output row and call

// float(double(x) * scale) per lane, as kfac_factors.cpp's finish_row
// rounds, into dst[0, n).
inline void store_scaled(float* dst, simd::vf x, double scale, int n) {
#if defined(SYNCFAC_SIMD_AVX512)
  auto s = _mm512_set1_pd(scale);
  auto lo = _mm512_cvtpd_ps(
    _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), s));
  auto hi = _mm512_cvtpd_ps(
    _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), s));
  auto r = _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1);
  if (n == simd::width)
    simd::store(dst, r);
  else
    simd::store(dst, r, simd::first_lanes(n));
#elif defined(SYNCFAC_SIMD_AVX2)
  auto s = _mm256_set1_pd(scale);
  auto lo = _mm256_cvtpd_ps(_mm256_mul_pd(
    _mm256_cvtps_pd(_mm256_castps256_ps128(x)), s));
  auto hi = _mm256_cvtpd_ps(_mm256_mul_pd(
    _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), s));
  auto r = _mm256_set_m128(hi, lo);
  if (n == simd::width)
    simd::store(dst, r);
  else
    simd::store(dst, r, simd::first_lanes(n));
#else
  float tmp[simd::width];
  simd::store(tmp, x);
  for (int l = 0; l < n; ++l)
    dst[l] = static_cast<float>(double{tmp[l]} * scale);
#endif
}

int lanes_left(int64_t left, int v) {
  return static_cast<int>(
    std::clamp<int64_t>(left - v * simd::width, 0, simd::width));
}

template <int R>
void few_rows(const float* x, int64_t m, int64_t ld, int64_t cols,
              int64_t i0, double scale, float* out, int64_t stride) {
  constexpr int V = block_vecs;
  constexpr int64_t chunk = V * simd::width;
  for (int64_t j0 = 0; j0 < cols; j0 += chunk) {
    auto left = cols - j0;
    simd::vf acc[R][V];
    for (auto& row : acc)
      for (auto& v : row)
        v = simd::zero();
    if (left >= chunk) {
      for (int64_t k = 0; k < m; ++k) {
        const float* xk = x + k * ld;
        simd::vf c[V];
        for (int v = 0; v < V; ++v)
          c[v] = simd::load(xk + j0 + v * simd::width);
        for (int r = 0; r < R; ++r) {
          auto b = simd::broadcast(xk + i0 + r);
          for (int v = 0; v < V; ++v)
            acc[r][v] = simd::fma(b, c[v], acc[r][v]);
        }
      }
    } else {
      simd::lanes mask[V];
      for (int v = 0; v < V; ++v)
        mask[v] = simd::first_lanes(lanes_left(left, v));
      for (int64_t k = 0; k < m; ++k) {
        const float* xk = x + k * ld;
        simd::vf c[V];
        for (int v = 0; v < V; ++v)
          c[v] = simd::load(xk + j0 + v * simd::width, mask[v]);
        for (int r = 0; r < R; ++r) {
          auto b = simd::broadcast(xk + i0 + r);
          for (int v = 0; v < V; ++v)
            acc[r][v] = simd::fma(b, c[v], acc[r][v]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) {
        auto n = lanes_left(left, v);
        if (n > 0)
          store_scaled(out + (i0 + r) * stride + j0 + v * simd::width,
                       acc[r][v], scale, n);
      }
  }
}

} // namespace

void gram_lower_update(const float* x, int64_t m, int64_t n, int64_t ldx,
                       float* c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  const_strided in(x, static_cast<index>(m), static_cast<index>(n),
                   stride(static_cast<index>(ldx)));
  strided sum(c, static_cast<index>(n), static_cast<index>(n),
              stride(static_cast<index>(ldc)));
  sum.selfadjointView<Eigen::Lower>().rankUpdate(in.transpose());
}

void gram_cross(const float* a, int64_t lda, const float* b, int64_t ldb,
                int64_t m, int64_t p, int64_t q, float* c, int64_t ldc) {
  strided out(c, static_cast<index>(p), static_cast<index>(q),
              stride(static_cast<index>(ldc)));
  if (m == 0) {
    out.setZero();
    return;
  }
  const_strided lhs(a, static_cast<index>(m), static_cast<index>(p),
                    stride(static_cast<index>(lda)));
  const_strided rhs(b, static_cast<index>(m), static_cast<index>(q),
                    stride(static_cast<index>(ldb)));
  out.noalias() = lhs.transpose() * rhs;
}

void few_rows_block(const float* x, int64_t m, int64_t ld, int64_t cols,
                    int64_t i0, int count, double scale, float* out,
                    int64_t stride) {
  static_assert(few_rows_block_rows == 4, "one case per row count");
  switch (count) {
    case 4: few_rows<4>(x, m, ld, cols, i0, scale, out, stride); break;
    case 3: few_rows<3>(x, m, ld, cols, i0, scale, out, stride); break;
    case 2: few_rows<2>(x, m, ld, cols, i0, scale, out, stride); break;
    default: few_rows<1>(x, m, ld, cols, i0, scale, out, stride);
  }
}

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
