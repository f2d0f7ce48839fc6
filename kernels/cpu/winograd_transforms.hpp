#pragma once

// The matrices of Winograd's F(2, 3) and F(2, 5) (winograd_kernels.hpp),
// Cook-Toom at the points 0, 1, -1 (, 2, -2) and infinity: B^T [alpha,
// alpha] and A^T [2, alpha] with small integer entries, so that the input
// and output transforms round little (sums of at most 4 terms weighted 1,
// 2, 4 or 5), and G [alpha, r], which holds the 1 / f_j and is applied to
// the kernel in double. Used by the kernels, the kernel transform and the
// tests' error bound; namespace-scope constexpr arrays have internal
// linkage, so each level's objects keep their own copy (isa_kernels.hpp).

namespace syncfac::cpu::winograd {

constexpr float bt4[4][4] = {
  {-1, 0, 1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}};
constexpr float at4[2][4] = {{1, 1, 1, 0}, {0, 1, -1, 1}};
constexpr double g3[4][3] = {
  {-1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

constexpr float bt6[6][6] = {
  {4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
  {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
constexpr float at6[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
constexpr double g5[6][5] = {
  {0.25, 0, 0, 0, 0},
  {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
  {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
  {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
  {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
  {0, 0, 0, 0, 1}};

/// Entry (i, j) of B^T, A^T or G for kernel size r (3 or 5).
inline double bt(int r, int i, int j) {
  return r == 3 ? bt4[i][j] : bt6[i][j];
}
inline double at(int r, int i, int j) {
  return r == 3 ? at4[i][j] : at6[i][j];
}
inline double g(int r, int i, int j) {
  return r == 3 ? g3[i][j] : g5[i][j];
}

} // namespace syncfac::cpu::winograd
