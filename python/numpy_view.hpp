#pragma once

// NumPy arrays as the runtime reads them (docs/python.md, "Data"): the
// array's own buffer where its layout allows (C-contiguous, native byte
// order, a dtype the data checks read), otherwise one conversion by NumPy,
// said in a syncfac.CopyWarning. The view's memory is kept alive by its
// owner, which holds a reference to the array and drops it under the GIL.

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "runtime/data/npy.hpp"

namespace syncfac::python {

/// An array's elements, the view and what keeps them alive.
struct held_array {
  npy_view view;
  std::shared_ptr<const void> owner;
};

/// What an array stands for: the inputs (x) or the labels (y) of a split.
enum class array_role { inputs, labels };

/// `obj` (a NumPy array, or anything numpy.asarray takes) as a view.
/// `name` names it in messages ("data[0]"). Inputs of float64 or float16
/// become float32; a list, another byte order or a non-contiguous layout
/// is converted by NumPy; each conversion warns once (CopyWarning) naming
/// the array. A dtype the runtime cannot read (bool, complex, object,
/// strings) throws python::failure (ec::bad_data) naming the array. Call
/// with the GIL held.
held_array hold_array(pybind11::handle obj, const std::string& name,
                      array_role role);

/// Whether the runtime takes inputs of this view as they are (uint8
/// pixels, float32 values): otherwise dataset_from_arrays converts them.
bool used_as_is(const npy_view& inputs) noexcept;

/// Issues a syncfac.CopyWarning (set by the module at import) with
/// `message`; throws pybind11::error_already_set where warnings are
/// errors.
void warn_copy(const std::string& message);

/// The CopyWarning class (the module sets it at import).
extern PyObject* copy_warning;

} // namespace syncfac::python
