#include "python/numpy_view.hpp"

#include <vector>

#include <pybind11/numpy.h>

#include "python/failure.hpp"
#include "runtime/base/error.hpp"

namespace py = pybind11;

namespace syncfac::python {

PyObject* copy_warning = nullptr;

void warn_copy(const std::string& message) {
  // Level 2: the caller of the package's function, the user's line.
  if (PyErr_WarnEx(copy_warning != nullptr ? copy_warning : PyExc_UserWarning,
                   message.c_str(), 2)
      != 0)
    throw py::error_already_set();
}

bool used_as_is(const npy_view& inputs) noexcept {
  return (inputs.kind == npy_kind::unsigned_int && inputs.item_size == 1)
         || (inputs.kind == npy_kind::floating && inputs.item_size == 4);
}

namespace {

std::string dtype_text(const py::dtype& dt) {
  return py::str(dt.attr("str")).cast<std::string>();
}

} // namespace

held_array hold_array(py::handle obj, const std::string& name,
                      array_role role) {
  auto np = py::module_::import("numpy");
  std::vector<std::string> conversions;
  py::object arr_obj = py::reinterpret_borrow<py::object>(obj);
  if (!py::isinstance<py::array>(obj)) {
    arr_obj = np.attr("asarray")(obj);
    conversions.push_back("not a NumPy array: numpy.asarray made one");
  }
  auto arr = arr_obj.cast<py::array>();
  auto dt = arr.dtype();
  char kind = dt.kind();
  auto what = "array '" + name + "': ";
  if (kind != 'u' && kind != 'i' && kind != 'f')
    throw failure{make_error(
      ec::bad_data,
      what + "dtype '" + dtype_text(dt) + "' is not supported ("
        + (role == array_role::labels ? "labels are integers"
                                      : "inputs are float32 or an integer "
                                        "type")
        + ")")};
  if (role == array_role::inputs && kind == 'f' && dt.itemsize() != 4) {
    arr = np.attr("asarray")(arr, np.attr("float32")).cast<py::array>();
    conversions.push_back(dtype_text(dt) + " converted to float32");
  } else if (py::str(dt.attr("byteorder")).cast<std::string>() == ">") {
    arr = arr.attr("astype")(dt.attr("newbyteorder")("="))
            .cast<py::array>();
    conversions.push_back("big-endian " + dtype_text(dt)
                          + " converted to the native byte order");
  }
  if ((arr.flags() & py::array::c_style) == 0) {
    arr = np.attr("ascontiguousarray")(arr).cast<py::array>();
    conversions.push_back("not C-contiguous: copied into C order");
  }
  dt = arr.dtype();
  held_array out;
  auto& v = out.view;
  v.kind = dt.kind() == 'f'   ? npy_kind::floating
           : dt.kind() == 'i' ? npy_kind::signed_int
                              : npy_kind::unsigned_int;
  v.item_size = dt.itemsize();
  v.descr = dtype_text(dt);
  for (py::ssize_t d = 0; d < arr.ndim(); ++d)
    v.shape.push_back(static_cast<int64_t>(arr.shape(d)));
  v.data = static_cast<const uint8_t*>(arr.data());
  if (role == array_role::inputs && !used_as_is(v))
    conversions.push_back(v.descr + " inputs are converted by the runtime");
  if (!conversions.empty()) {
    std::string list;
    for (const auto& c : conversions)
      list += (list.empty() ? "" : "; ") + c;
    warn_copy(what + "copied once (" + list + "); "
              + (role == array_role::labels
                   ? "a C-contiguous integer array needs no such copy"
                   : "a C-contiguous uint8 or float32 array is used "
                     "without a copy"));
  }
  // The reference is dropped under the GIL, whichever thread lets go of
  // the last owner (an actor's, while the interpreter runs other code).
  auto* ref = new py::object(std::move(arr));
  out.owner = std::shared_ptr<const void>(ref, [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
  return out;
}

} // namespace syncfac::python
