#pragma once

// The matrices of Winograd's F(4, 3) and F(2, 5) (winograd_kernels.hpp),
// Cook-Toom at the points 0, 1, -1, 2, -2 and infinity: both have
// alpha = m + r - 1 = 6 and so the same B^T [6, 6]; A^T [m, 6] has small
// integer entries, so that the input and output transforms round little
// (sums of at most 6 terms weighted 1, 2, 4, 5 or 8), and G [6, r] holds
// the 1 / f_j and is applied to the kernel in double. Used by the kernels,
// the kernel transform and the tests' error bound; namespace-scope
// constexpr arrays have internal linkage, so each level's objects keep
// their own copy (isa_kernels.hpp).

namespace syncfac::cpu::winograd {

/// The transformed tile's size: m + r - 1 for both variants.
inline constexpr int alpha = 6;

/// The output tile m of the variant for kernel size r: F(4x4, 3x3) or
/// F(2x2, 5x5).
constexpr int tile_of(int r) {
  return r == 3 ? 4 : 2;
}

constexpr float bt[6][6] = {
  {4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
  {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};

// F(4, 3): A^T's row k holds the points' k-th powers (infinity's only in
// the last row).
constexpr float at4_3[4][6] = {{1, 1, 1, 1, 1, 0},
                               {0, 1, -1, 2, -2, 0},
                               {0, 1, 1, 4, 4, 0},
                               {0, 1, -1, 8, -8, 1}};
constexpr double g4_3[6][3] = {{0.25, 0, 0},
                               {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                               {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                               {1.0 / 24, 1.0 / 12, 1.0 / 6},
                               {1.0 / 24, -1.0 / 12, 1.0 / 6},
                               {0, 0, 1}};

// F(2, 5).
constexpr float at2_5[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
constexpr double g2_5[6][5] = {
  {0.25, 0, 0, 0, 0},
  {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
  {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
  {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
  {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
  {0, 0, 0, 0, 1}};

/// Entry (i, j) of A^T and G for kernel size r (3 or 5).
inline double at(int r, int i, int j) {
  return r == 3 ? at4_3[i][j] : at2_5[i][j];
}
inline double g(int r, int i, int j) {
  return r == 3 ? g4_3[i][j] : g2_5[i][j];
}

} // namespace syncfac::cpu::winograd
