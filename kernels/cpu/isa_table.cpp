// A level's kernel table (kernels/cpu/isa_kernels.hpp), compiled with the
// level's kernels.
#include "kernels/cpu/isa_kernels.hpp"

#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

#if defined(SYNCFAC_SIMD_AVX512)
#  define SYNCFAC_ISA_NAME "avx512"
#elif defined(SYNCFAC_SIMD_AVX2)
#  define SYNCFAC_ISA_NAME "avx2"
#else
#  define SYNCFAC_ISA_NAME "generic"
#endif

extern const isa_kernels table{SYNCFAC_ISA_NAME, simd::width,
                               conv_forward_rows, conv_weight_grad,
                               conv_input_grad,   conv_winograd_tiles,
                               conv_winograd_dw_tiles,
                               matmul_block,
                               gram_lower_update, gram_cross,
                               few_rows_block,    max_pool_image};

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
