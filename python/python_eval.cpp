#include "python/python_eval.hpp"

#include <algorithm>
#include <set>
#include <string>

#include <pybind11/numpy.h>

#include "convnet_options.hpp"
#include "kernels/backend_factory.hpp"
#include "python/failure.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/named_tensor.hpp"

namespace py = pybind11;

namespace syncfac::python {

namespace {

/// `params` in the model's order: every variable once, float32 values.
parameter_set given_parameters(const model& m, py::handle params) {
  if (!py::isinstance<py::dict>(params))
    throw failure{make_error(ec::invalid_argument,
                             "params: expected a dict of arrays by variable "
                             "name (load_checkpoint()[\"params\"])")};
  auto given = py::reinterpret_borrow<py::dict>(params);
  auto model_name = in_quotes(m.description().name);
  std::set<std::string> names;
  for (const auto& v : m.parameters())
    names.insert(v.name);
  for (auto item : given) {
    auto name = py::str(item.first).cast<std::string>();
    if (names.count(name) == 0)
      throw failure{make_error(ec::unknown_name,
                               "params: " + in_quotes(name)
                                 + " is not a variable of model "
                                 + model_name)};
  }
  auto np = py::module_::import("numpy");
  parameter_set out;
  for (const auto& v : m.parameters()) {
    if (!given.contains(v.name))
      throw failure{make_error(ec::unknown_name,
                               "params: no array for variable "
                                 + in_quotes(v.name) + " of model "
                                 + model_name)};
    auto a = np.attr("ascontiguousarray")(given[py::str(v.name)],
                                          np.attr("float32"))
               .cast<py::array_t<float>>();
    tensor_shape shape(a.shape(), a.shape() + a.ndim());
    std::vector<float> values(a.data(), a.data() + a.size());
    out.push_back({v.name, tensor{std::move(shape), std::move(values)}});
  }
  return out;
}

} // namespace

forward_pass run_forward(std::shared_ptr<const model_description> desc,
                         py::handle params, const split_arrays& data,
                         const array_names& names, int64_t batch_size,
                         int threads, bool keep_predictions) {
  if (batch_size < 1)
    throw failure{make_error(ec::invalid_argument,
                             "batch_size " + std::to_string(batch_size)
                               + ": must be at least 1")};
  auto spec = described_spec(*desc);
  auto m = checked(model::make(spec, 0));
  check(m->set_parameters(given_parameters(*m, params)));
  auto set = checked(dataset_from_arrays(data.x.view, data.y.view, names,
                                         npz_inputs_for(spec),
                                         data.x.owner));
  check(check_data_fits(spec, set));
  if (threads <= 0)
    threads = examples::convnet_options{}.threads_in_use().compute;
  py::gil_scoped_release no_gil;
  auto dev = checked(make_device_backend("cpu", threads));
  forward_pass out;
  batch b;
  for (int64_t begin = 0; begin < set.count; begin += batch_size) {
    auto end = std::min(set.count, begin + batch_size);
    slice(set, begin, end, b);
    // An evaluation pass: batch_norm by its moving statistics, no dropout.
    out.total += checked(m->evaluate(*dev, b.images, b.labels));
    if (keep_predictions) {
      const auto& p = m->predictions();
      out.width = p.dim(p.rank() - 1);
      out.predictions.insert(out.predictions.end(), p.values().begin(),
                             p.values().end());
    }
  }
  return out;
}

} // namespace syncfac::python
