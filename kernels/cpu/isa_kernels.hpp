#pragma once

// The hot CPU kernels compiled once per instruction-set level, and the
// table through which the rest of the library calls them (docs/kernels.md,
// "Instruction-set levels"). Each level's objects are the same sources
// (conv_kernels.cpp, winograd_kernels.cpp, matmul_kernel.cpp, gram_kernels.cpp, pool_kernels.cpp,
// isa_table.cpp)
// compiled with that level's flags and SYNCFAC_KERNEL_ISA set to the
// level's namespace:
//   base    the build's own flags (Release: -march=x86-64-v3, AVX2/FMA)
//   avx512  + -mavx512f -mavx512bw -mavx512vl -mavx512dq, where the
//           compiler and target allow (SYNCFAC_HAVE_AVX512_KERNELS)
// kernels/cpu/isa.hpp picks one table at start-up from the CPU's features.
//
// Nothing a level's objects define may be shared with other objects under
// the same name: an inline function or template instantiated in two
// objects is one symbol to the linker, which keeps either copy, so an
// AVX-512 copy could run on an AVX2-only CPU. Hence the level namespaces,
// simd.hpp's inline namespaces, and Eigen renamed in the AVX-512 objects
// (isa_eigen.hpp); tests/kernels/isa_symbols.sh checks the objects.

#include <cstdint>

#include "kernels/cpu/conv_kernels.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/pool_kernels.hpp"
#include "kernels/cpu/winograd_kernels.hpp"

namespace syncfac::cpu {

/// matmul.hpp's matmul_block.
using matmul_block_fn = decltype(matmul_block);

/// The lower triangle of c [n, n] (row stride ldc) += x^T x, x [m, n]
/// with row stride ldx: a symmetric rank-m update (SYRK); the strict
/// upper triangle is not touched.
using gram_lower_update_fn = void(const float* x, int64_t m, int64_t n,
                                  int64_t ldx, float* c, int64_t ldc);
/// c [p, q] (row stride ldc) = a^T b for a [m, p] (row stride lda) and
/// b [m, q] (row stride ldb).
using gram_cross_fn = void(const float* a, int64_t lda, const float* b,
                           int64_t ldb, int64_t m, int64_t p, int64_t q,
                           float* c, int64_t ldc);
/// Output rows [i0, i0 + count), count <= 4, all columns [0, cols), of
/// scale * x^T x for x [m, cols] (row stride ld), into out (row stride
/// `stride`), each element rounded as float(double(sum) * scale); the
/// same FMA chain for (i, j) and (j, i), so the result is exactly
/// symmetric.
using few_rows_block_fn = void(const float* x, int64_t m, int64_t ld,
                               int64_t cols, int64_t i0, int count,
                               double scale, float* out, int64_t stride);

/// One level's kernels. The conv entries are conv_kernels.hpp's functions,
/// matmul_block is matmul.hpp's; the Gram entries serve kfac_factors.cpp.
struct isa_kernels {
  /// The level's name as --isa spells it.
  const char* name;
  /// Floats per vector register (8 or 16): documentation and tests only;
  /// buffers stay padded to 8 at every level.
  int vector_floats;

  conv_forward_rows_fn* conv_forward_rows;
  conv_weight_grad_fn* conv_weight_grad;
  conv_input_grad_fn* conv_input_grad;
  conv_winograd_tiles_fn* conv_winograd_tiles;
  conv_winograd_dw_tiles_fn* conv_winograd_dw_tiles;
  matmul_block_fn* matmul_block;
  gram_lower_update_fn* gram_lower_update;
  gram_cross_fn* gram_cross;
  few_rows_block_fn* few_rows_block;
  max_pool_image_fn* max_pool_image;
};

/// Output rows per few_rows_block call (its `count` is at most this).
inline constexpr int few_rows_block_rows = 4;

#define SYNCFAC_DECLARE_ISA_TABLE(level)                                    \
  namespace level {                                                         \
  extern const isa_kernels table;                                           \
  }

SYNCFAC_DECLARE_ISA_TABLE(base)
#ifdef SYNCFAC_HAVE_AVX512_KERNELS
SYNCFAC_DECLARE_ISA_TABLE(avx512)
#endif
#undef SYNCFAC_DECLARE_ISA_TABLE

#ifdef SYNCFAC_KERNEL_ISA
// Inside a level's objects: its kernels, defined in its namespace.
namespace SYNCFAC_KERNEL_ISA {

conv_forward_rows_fn conv_forward_rows;
conv_weight_grad_fn conv_weight_grad;
conv_input_grad_fn conv_input_grad;
conv_winograd_tiles_fn conv_winograd_tiles;
conv_winograd_dw_tiles_fn conv_winograd_dw_tiles;
matmul_block_fn matmul_block;
gram_lower_update_fn gram_lower_update;
gram_cross_fn gram_cross;
few_rows_block_fn few_rows_block;
max_pool_image_fn max_pool_image;

} // namespace SYNCFAC_KERNEL_ISA
#endif

} // namespace syncfac::cpu
