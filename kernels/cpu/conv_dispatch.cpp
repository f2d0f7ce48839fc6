// conv_kernels.hpp's functions: the selected level's kernels
// (kernels/cpu/isa.hpp).
#include "kernels/cpu/conv_kernels.hpp"

#include "kernels/cpu/isa.hpp"

namespace syncfac::cpu {

void conv_forward_rows(const float* base, const patch_layout& p,
                       int64_t rows, const float* w, int64_t opad,
                       const float* bias, int64_t out_c, bool relu,
                       float* out) {
  isa_table().conv_forward_rows(base, p, rows, w, opad, bias, out_c, relu,
                                out);
}

void conv_weight_grad(const float* base, const patch_layout& p,
                      const int64_t* tap_offsets, int64_t K, int64_t rows,
                      const float* ds, int64_t out_c, float* dw,
                      int64_t opad) {
  isa_table().conv_weight_grad(base, p, tap_offsets, K, rows, ds, out_c, dw,
                               opad);
}

void conv_input_grad(float* dx, const patch_layout& p, int64_t rows,
                     const float* ds, int64_t out_c, const float* wt,
                     int64_t ldwt) {
  isa_table().conv_input_grad(dx, p, rows, ds, out_c, wt, ldwt);
}

void conv_winograd_tiles(const winograd_layout& l, int64_t first,
                         int64_t count, float* scratch) {
  isa_table().conv_winograd_tiles(l, first, count, scratch);
}

void conv_winograd_dw_tiles(const winograd_layout& l, const float* ds,
                            int64_t first, int64_t count, float* du,
                            bool overwrite, float* scratch) {
  isa_table().conv_winograd_dw_tiles(l, ds, first, count, du, overwrite,
                                     scratch);
}

} // namespace syncfac::cpu
