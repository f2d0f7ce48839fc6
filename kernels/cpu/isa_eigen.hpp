#pragma once

// Eigen for a level's kernel objects (kernels/cpu/isa_kernels.hpp). In the
// AVX-512 objects Eigen's namespace is renamed, so that its templates
// (instantiated there with 16-float packets, but under the same names as
// in the rest of the library) are symbols of their own and the linker
// cannot mix the AVX-512 copies into code for the baseline. Include this
// before anything else that includes Eigen.

#ifdef SYNCFAC_SIMD_RENAME_EIGEN
#  ifdef EIGEN_CORE_H
#    error "isa_eigen.hpp must come before any other Eigen include"
#  endif
#  define Eigen SYNCFAC_SIMD_RENAME_EIGEN
#endif

#include <Eigen/Core>
