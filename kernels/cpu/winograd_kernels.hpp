#pragma once

// The Winograd micro-kernel of stride-1 convolutions with square 3x3 or
// 5x5 kernels: F(4x4, 3x3) and F(2x2, 5x5) (Lavin & Gray, "Fast Algorithms
// for Convolutional Neural Networks", 2015). Each m x m block of outputs
// (m = 4 or 2) reads an alpha x alpha window of the padded input (alpha =
// m + r - 1 = 6 for both); the window is transformed (B^T d B), multiplied
// point by point with the transformed kernel (G g G^T, summed over input
// channels: 36 small GEMMs) and transformed back (A^T m A). That is
// 36 / 16 = 2.25 or 36 / 4 = 9 multiply-adds per output and channel pair,
// where the direct conv has 9 or 25. Everything is vectorised across
// channels (NHWC). (F(2x2, 3x3), with 16 / 4 = 4, was slower at every
// ResNet-20 shape and at both levels: docs/kernels.md, "Winograd".)
//
// The weight gradient runs the same algorithm backwards: each tile's m x m
// block of ds is transformed (Z = A ds A^T, alpha x alpha), and
// dU = sum over tiles of V^T Z (36 GEMMs of [cpad, tiles] x [tiles,
// opad]) is the gradient of the transformed kernel U = G g G^T, so that
// dg = G^T dU G (winograd.hpp; done once per call, in double). That is 36
// multiply-adds per tile and channel pair where the direct weight
// gradient has m^2 r^2 (144 or 100).
//
// A block of tiles is done at a time so that its transformed input V
// [alpha^2, cpad / 16, tiles, 16] and products M [alpha^2, tiles, opad]
// stay in L1/L2 between the three steps. Every output's arithmetic is the
// same whatever the block or the tiles around it, so results do not
// depend on the batch, the tiling or the thread count.

#include <cstdint>

#include "kernels/cpu/winograd_transforms.hpp"

namespace syncfac::cpu {

/// Channels per block of V's and U's rows: one zmm or two ymm.
inline constexpr int64_t winograd_channel_block = 16;

/// One call's operands as the micro-kernel reads them.
struct winograd_layout {
  int r = 0; // kernel size (3 or 5)
  int m = 0; // output tile size: winograd::tile_of(r), 4 or 2
  const float* in = nullptr; // padded images [n, ph, pw, c]
  int64_t ph = 0;
  int64_t pw = 0;
  int64_t c = 0;
  int64_t cpad = 0; // c rounded up to winograd_channel_block
  int64_t out_h = 0;
  int64_t out_w = 0;
  int64_t out_c = 0;
  int64_t opad = 0; // out_c rounded up to winograd_channel_block
  int64_t tiles_h = 0; // m x m output tiles per image column
  int64_t tiles_w = 0; // and per image row
  const float* u = nullptr;    // transformed kernel [alpha^2, cpad, opad]
  const float* bias = nullptr; // [opad], zero past out_c
  bool relu = false;
  float* out = nullptr; // [n, out_h, out_w, out_c]
};

/// Floats of scratch that conv_winograd_tiles needs for `count` tiles.
inline int64_t winograd_scratch_floats(const winograd_layout& l,
                                       int64_t count) {
  return int64_t{winograd::alpha} * winograd::alpha * count
         * (l.cpad + l.opad);
}

/// out = act(conv + bias) on tiles [first, first + count), numbered image
/// by image and row by row (tiles_h * tiles_w per image); outputs past
/// out_h or out_w are not written. scratch holds winograd_scratch_floats.
using conv_winograd_tiles_fn = void(const winograd_layout& l, int64_t first,
                                    int64_t count, float* scratch);

/// du[p, c, o] += sum over tiles [first, first + count) in order of
/// V[p, tile, c] Z[p, tile, o]: V of l.in's windows as the forward pass
/// transforms them, Z of ds [n, out_h, out_w, out_c] (zero past out_h,
/// out_w and out_c). overwrite: = instead of +=, du not read (the same
/// bits as += on zeros), so that a partial needs no zeroing pass. du is
/// [alpha^2, cpad, opad]; scratch holds winograd_scratch_floats(l,
/// count). l's u, bias, relu and out are not read.
using conv_winograd_dw_tiles_fn = void(const winograd_layout& l,
                                       const float* ds, int64_t first,
                                       int64_t count, float* du,
                                       bool overwrite, float* scratch);

// The selected level's kernels (conv_dispatch.cpp).
conv_winograd_tiles_fn conv_winograd_tiles;
conv_winograd_dw_tiles_fn conv_winograd_dw_tiles;

} // namespace syncfac::cpu
