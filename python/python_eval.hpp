#pragma once

// syncfac.evaluate and syncfac.predict (docs/python.md, "Parameters
// back"): a model with given parameters (load_checkpoint's arrays) run
// forward on arrays, in this thread, on a CPU backend, with the GIL
// released; the data checked as train() checks them.

#include <cstdint>
#include <memory>
#include <vector>

#include <pybind11/pybind11.h>

#include "python/python_train.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/eval_result.hpp"
#include "runtime/model_description.hpp"

namespace syncfac::python {

/// What a pass over a split found.
struct forward_pass {
  eval_result total;
  /// predictions() of every batch, [count, width] row-major, when asked.
  std::vector<float> predictions;
  int64_t width = 0;
};

/// Runs `model` with `params` (a mapping of every variable's name to an
/// array of its shape; extra or missing names and wrong shapes throw
/// python::failure naming the variable) over `data` in batches of
/// `batch_size` examples on `threads` CPU threads (0: the CPU share).
/// Call with the GIL held; it is released while the model runs.
/// `names` names the arrays in messages.
forward_pass run_forward(std::shared_ptr<const model_description> model,
                         pybind11::handle params, const split_arrays& data,
                         const array_names& names, int64_t batch_size,
                         int threads, bool keep_predictions);

} // namespace syncfac::python
