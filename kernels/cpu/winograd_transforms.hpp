#pragma once

// The matrices of Winograd's F(2, 3), F(4, 3) and F(2, 5)
// (winograd_kernels.hpp), Cook-Toom at the points 0, 1, -1 (, 2, -2) and
// infinity: B^T [alpha, alpha] and A^T [m, alpha] with small integer
// entries, so that the input and output transforms round little (sums of
// at most 6 terms weighted 1, 2, 4, 5 or 8), and G [alpha, r], which holds
// the 1 / f_j and is applied to the kernel in double. F(4, 3) and F(2, 5)
// share alpha = 6 and the points, so B^T too. Used by the kernels, the
// kernel transform and the tests' error bound; namespace-scope constexpr
// arrays have internal linkage, so each level's objects keep their own
// copy (isa_kernels.hpp).

namespace syncfac::cpu::winograd {

constexpr float bt4[4][4] = {
  {-1, 0, 1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}};
constexpr float at2_4[2][4] = {{1, 1, 1, 0}, {0, 1, -1, 1}};
constexpr double g2_3[4][3] = {
  {-1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

constexpr float bt6[6][6] = {
  {4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
  {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};

// F(4, 3): A^T's row k holds the points' k-th powers (infinity's only in
// the last row).
constexpr float at4_6[4][6] = {{1, 1, 1, 1, 1, 0},
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
constexpr float at2_6[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
constexpr double g2_5[6][5] = {
  {0.25, 0, 0, 0, 0},
  {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
  {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
  {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
  {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
  {0, 0, 0, 0, 1}};

/// Entry (i, j) of B^T for alpha (4 or 6), of A^T and G for F(m, r): F(2,
/// 3), F(4, 3) or F(2, 5).
inline double bt(int alpha, int i, int j) {
  return alpha == 4 ? bt4[i][j] : bt6[i][j];
}
inline double at(int m, int r, int i, int j) {
  return r == 5 ? at2_6[i][j] : m == 4 ? at4_6[i][j] : at2_4[i][j];
}
inline double g(int m, int r, int i, int j) {
  return r == 5 ? g2_5[i][j] : m == 4 ? g4_3[i][j] : g2_3[i][j];
}

} // namespace syncfac::cpu::winograd
