#pragma once

// Shape checks shared by the CPU kernels. Every failure is
// ec::shape_mismatch (or ec::invalid_argument for labels) with a context
// that names the operation and both shapes, so a caller can see what to fix.

#include <string>

#include <caf/error.hpp>

#include "kernels/backend.hpp"

namespace syncfac::cpu {

/// "<op>: <what> <got> does not fit <want_what> <want>" unless got == want.
caf::error expect_shape(const char* op, const char* what,
                        const tensor_shape& got, const char* want_what,
                        const tensor_shape& want);

/// A shape_mismatch for two shapes that do not fit, with a reason.
caf::error mismatch(const char* op, const char* a_what,
                    const tensor_shape& a, const char* b_what,
                    const tensor_shape& b, const std::string& reason);

/// Whether g is what conv2d_geometry::make derives from its own fields
/// (a hand-edited geometry would make the kernels read out of bounds).
caf::error check_geometry(const char* op, const conv2d_geometry& g);

caf::error check_geometry(const char* op, const pool2d_geometry& g);

/// Labels must number the rows of a [N, K] tensor and lie in [0, K).
caf::error check_labels(const char* op, const char* what,
                        const tensor_shape& rows, const label_vector& labels);

} // namespace syncfac::cpu
