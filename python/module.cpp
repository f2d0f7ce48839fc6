// The extension syncfac._core (docs/python.md): models built with the
// C++ builder's vocabulary (runtime/model_builder.hpp) or loaded from
// JSON, training on NumPy arrays (python/python_train.hpp), clusters
// (python/python_launch.hpp, python/python_node.hpp), and the
// runtime's errors as Python exceptions of their kind. The package's
// __init__.py is the documented surface; it calls these.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "convnet_options.hpp"
#include "kernels/backend.hpp"
#include "kernels/geometry.hpp"
#include "python/failure.hpp"
#include "python/numpy_view.hpp"
#include "python/python_eval.hpp"
#include "python/python_launch.hpp"
#include "python/python_node.hpp"
#include "python/python_train.hpp"
#include "runtime/base/error.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model_builder.hpp"
#include "runtime/model_file.hpp"

namespace py = pybind11;
using namespace syncfac;
using namespace syncfac::python;

namespace {

/// One layer of syncfac.Sequential: the builder call that adds it.
struct builder_layer {
  std::string text;
  std::function<void(model_builder&)> add;
};

// The holder of syncfac.Model (pybind11 holds no pointer to const).
using model_ptr = std::shared_ptr<model_description>;

padding to_padding(const std::string& name) {
  return checked(parse_padding(name));
}

activation to_activation(const std::string& name) {
  return checked(parse_activation(name));
}

template <class Enum>
Enum by_name(const std::string& what, const std::string& name,
             std::initializer_list<Enum> values) {
  std::string known;
  for (auto x : values) {
    if (name == to_string(x))
      return x;
    known += (known.empty() ? "" : ", ") + std::string{to_string(x)};
  }
  throw failure{make_error(ec::invalid_argument, "unknown " + what + " '"
                                                   + name + "' (expected "
                                                   + known + ")")};
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

/// ['a', 'b'], as Python writes a list of names.
std::string list_text(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i > 0 ? ", " : "") + quoted(xs[i]);
  return out + "]";
}

/// ", name='x'" when given.
std::string named(const std::string& name) {
  return name.empty() ? "" : ", name=" + quoted(name);
}

/// ", inputs=[...]" when given.
std::string taking(const std::vector<std::string>& inputs) {
  return inputs.empty() ? "" : ", inputs=" + list_text(inputs);
}

/// The Python exception classes, by the error codes they stand for.
struct exception_classes {
  py::object error;
  py::object config_error;
  py::object data_error;
  py::object file_error;

  py::object for_code(const caf::error& err) const {
    if (err.category() != error_category)
      return error;
    switch (static_cast<ec>(err.code())) {
      case ec::invalid_argument:
      case ec::invalid_config:
      case ec::shape_mismatch:
      case ec::unknown_name:
        return config_error;
      case ec::bad_data:
      case ec::non_finite:
        return data_error;
      case ec::io_error:
        return file_error;
      default:
        return error;
    }
  }
};

exception_classes* classes = nullptr;

/// Whether the caller is the interpreter's main thread, where a run takes
/// the stop signals (docs/python.md, "Ctrl-C and the scheduler's signals").
bool on_main_thread() {
  auto threading = py::module_::import("threading");
  return threading.attr("current_thread")().is(
    threading.attr("main_thread")());
}

py::object new_class(py::module_& m, const char* name, py::tuple bases,
                     const char* doc) {
  auto qualified = std::string{"syncfac."} + name;
  auto* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(),
                                        nullptr);
  if (cls == nullptr)
    throw py::error_already_set();
  auto obj = py::reinterpret_steal<py::object>(cls);
  m.attr(name) = obj;
  return obj;
}

/// syncfac.max_pool and syncfac.avg_pool, alike but for the builder's
/// method `pool` that adds the layer; `kind` is the function's name.
void def_pool(py::module_& m, const char* kind,
              model_builder& (model_builder::*pool)(int64_t, int64_t,
                                                     padding, std::string)) {
  m.def(
    kind,
    [kind, pool](int64_t window, int64_t stride, const std::string& pad,
                 const std::string& name) {
      auto p = to_padding(pad);
      auto text = std::string{kind} + "(" + std::to_string(window)
                  + ", stride=" + std::to_string(stride)
                  + ", padding=" + quoted(pad) + named(name) + ")";
      return builder_layer{text, [=](model_builder& b) {
                             (b.*pool)(window, stride, p, name);
                           }};
    },
    py::arg("window"), py::arg("stride") = 0, py::arg("padding") = "valid",
    py::arg("name") = "");
}

} // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "syncfac's C++ runtime (the package syncfac is the API)";

  // Errors: syncfac.Error and its kinds, each with the runtime's message
  // and its code's name in .code.
  static exception_classes cls;
  cls.error = new_class(m, "Error",
                        py::make_tuple(py::handle(PyExc_RuntimeError)),
                        "An error of the syncfac runtime; .code names its "
                        "kind.");
  cls.config_error = new_class(
    m, "ConfigError",
    py::make_tuple(cls.error, py::handle(PyExc_ValueError)),
    "A bad model description, flag or argument.");
  cls.data_error = new_class(
    m, "DataError", py::make_tuple(cls.error, py::handle(PyExc_ValueError)),
    "Data the runtime refuses (shape, dtype, NaN, labels).");
  cls.file_error = new_class(
    m, "FileError", py::make_tuple(cls.error, py::handle(PyExc_OSError)),
    "A file that cannot be read or written.");
  new_class(m, "ClusterError", py::make_tuple(cls.error),
            "A task of a launched cluster failed or was refused: the "
            "message is the failed task's last word; .exit_codes maps "
            "every task to its exit code, .errors to its last error line.");
  classes = &cls;
  auto warning = new_class(m, "CopyWarning",
                           py::make_tuple(py::handle(PyExc_UserWarning)),
                           "An array was copied or converted before the "
                           "runtime could use it.");
  copy_warning = warning.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const failure& f) {
      auto type = classes->for_code(f.err);
      auto exc = type(f.what());
      auto code = f.err.category() == error_category
                    ? std::string{to_string(static_cast<ec>(f.err.code()))}
                    : std::string{"other"};
      exc.attr("code") = code;
      PyErr_SetObject(type.ptr(), exc.ptr());
    }
  });

  // Layers: the builder's vocabulary.
  py::class_<builder_layer>(m, "Layer", "One layer of syncfac.Sequential.")
    .def("__repr__", [](const builder_layer& l) { return "syncfac." + l.text; });
  m.def(
    "conv2d",
    [](int64_t filters, int64_t kernel, int64_t stride,
       const std::string& pad, const std::string& act,
       const std::string& init, const std::string& name,
       const std::vector<std::string>& inputs) {
      conv2d_options opts;
      opts.stride = stride;
      opts.pad = to_padding(pad);
      opts.act = to_activation(act);
      opts.init = init;
      opts.name = name;
      opts.inputs = inputs;
      auto text = "conv2d(" + std::to_string(filters) + ", "
                  + std::to_string(kernel) + ", stride="
                  + std::to_string(stride) + ", padding=" + quoted(pad)
                  + ", activation=" + quoted(act) + named(name)
                  + taking(inputs) + ")";
      return builder_layer{text, [=](model_builder& b) {
                     b.conv2d(filters, kernel, opts);
                   }};
    },
    py::arg("filters"), py::arg("kernel"), py::arg("stride") = 1,
    py::arg("padding") = "valid", py::arg("activation") = "linear",
    py::arg("init") = "", py::arg("name") = "",
    py::arg("inputs") = std::vector<std::string>{});
  m.def(
    "dense",
    [](int64_t units, const std::string& act, const std::string& init,
       const std::string& name, const std::vector<std::string>& inputs) {
      dense_options opts;
      opts.act = to_activation(act);
      opts.init = init;
      opts.name = name;
      opts.inputs = inputs;
      auto text = "dense(" + std::to_string(units)
                  + ", activation=" + quoted(act) + named(name)
                  + taking(inputs) + ")";
      return builder_layer{text, [=](model_builder& b) { b.dense(units, opts); }};
    },
    py::arg("units"), py::arg("activation") = "linear", py::arg("init") = "",
    py::arg("name") = "", py::arg("inputs") = std::vector<std::string>{});
  m.def(
    "add",
    [](const std::vector<std::string>& inputs, const std::string& act,
       const std::string& name) {
      auto a = to_activation(act);
      auto text = "add(" + list_text(inputs) + ", activation=" + quoted(act)
                  + named(name) + ")";
      return builder_layer{text,
                           [=](model_builder& b) { b.add(inputs, a, name); }};
    },
    py::arg("inputs"), py::arg("activation") = "linear",
    py::arg("name") = "");
  m.def(
    "concat",
    [](const std::vector<std::string>& inputs, const std::string& name) {
      auto text = "concat(" + list_text(inputs) + named(name) + ")";
      return builder_layer{text,
                           [=](model_builder& b) { b.concat(inputs, name); }};
    },
    py::arg("inputs"), py::arg("name") = "");
  def_pool(m, "max_pool", &model_builder::max_pool);
  def_pool(m, "avg_pool", &model_builder::avg_pool);
  m.def(
    "global_avg_pool",
    [](const std::string& name) {
      auto text = "global_avg_pool("
                  + (name.empty() ? std::string{} : "name=" + quoted(name))
                  + ")";
      return builder_layer{text,
                           [=](model_builder& b) { b.global_avg_pool(name); }};
    },
    py::arg("name") = "");
  m.def(
    "batch_norm",
    [](double momentum, double epsilon, const std::string& act,
       const std::string& name, const std::vector<std::string>& inputs) {
      batch_norm_options opts;
      opts.momentum = momentum;
      opts.epsilon = epsilon;
      opts.act = to_activation(act);
      opts.name = name;
      opts.inputs = inputs;
      auto text = "batch_norm(momentum=" + std::to_string(momentum)
                  + ", epsilon=" + std::to_string(epsilon)
                  + ", activation=" + quoted(act) + named(name)
                  + taking(inputs) + ")";
      return builder_layer{text, [=](model_builder& b) { b.batch_norm(opts); }};
    },
    py::arg("momentum") = 0.99, py::arg("epsilon") = 1e-3,
    py::arg("activation") = "linear", py::arg("name") = "",
    py::arg("inputs") = std::vector<std::string>{});
  m.def(
    "dropout",
    [](double rate, const std::string& name) {
      auto text = "dropout(" + std::to_string(rate) + named(name) + ")";
      return builder_layer{text,
                           [=](model_builder& b) { b.dropout(rate, name); }};
    },
    py::arg("rate"), py::arg("name") = "");
  m.def("flatten", [] {
    return builder_layer{"flatten()", [](model_builder& b) { b.flatten(); }};
  });
  m.def("relu", [] {
    return builder_layer{"relu()", [](model_builder& b) { b.relu(); }};
  });
  m.def("tanh", [] {
    return builder_layer{"tanh()", [](model_builder& b) { b.tanh(); }};
  });
  m.def("sigmoid", [] {
    return builder_layer{"sigmoid()", [](model_builder& b) { b.sigmoid(); }};
  });
  m.def(
    "embedding_bag",
    [](int64_t vocabulary, int64_t units, const std::string& combiner,
       const std::string& name) {
      auto c = by_name("combiner", combiner,
                       {bag_combiner::mean, bag_combiner::sum});
      auto text = "embedding_bag(" + std::to_string(vocabulary) + ", "
                  + std::to_string(units) + ", combiner=" + quoted(combiner)
                  + ")";
      return builder_layer{text, [=](model_builder& b) {
                     b.embedding_bag(vocabulary, units, c, name);
                   }};
    },
    py::arg("vocabulary"), py::arg("units"), py::arg("combiner") = "mean",
    py::arg("name") = "");

  // Models: descriptions, checked as a model file's are.
  py::class_<model_description, model_ptr>(m, "Model",
                                           "A checked model description.")
    .def_property_readonly("name",
                           [](const model_description& d) { return d.name; })
    .def_property_readonly(
      "input_shape",
      [](const model_description& d) { return d.input_shape; })
    .def_property_readonly(
      "layer_names",
      [](const model_description& d) { return layer_names(d); })
    .def_property_readonly(
      "loss", [](const model_description& d) { return to_string(d.loss); })
    .def("to_json", &model_description::to_json,
         "The description in the model file's format (docs/models.md).")
    .def("__eq__",
         [](const model_description& x, const model_description& y) {
           return x == y;
         })
    .def("__repr__", [](const model_description& d) {
      std::string shape;
      for (auto s : d.input_shape)
        shape += (shape.empty() ? "" : ", ") + std::to_string(s);
      return "syncfac.Model(" + quoted(d.name) + ", input_shape=[" + shape
             + "], " + std::to_string(d.layers.size()) + " layers)";
    });
  m.def(
    "sequential",
    [](const std::vector<builder_layer>& layers, std::vector<int64_t> input_shape,
       const std::string& name, const std::string& init,
       const std::string& loss) {
      model_builder b{name, std::move(input_shape)};
      if (!init.empty())
        b.init(init);
      for (const auto& l : layers)
        l.add(b);
      b.loss(by_name("loss", loss,
                     {loss_kind::softmax_cross_entropy,
                      loss_kind::sigmoid_cross_entropy}));
      return std::make_shared<model_description>(checked(b.build()));
    },
    py::arg("layers"), py::arg("input_shape"), py::arg("name"),
    py::arg("init"), py::arg("loss"));
  m.def(
    "load_model_file",
    [](const std::string& path) {
      return std::make_shared<model_description>(
        checked(load_model_file(path)));
    },
    py::arg("path"));
  m.def(
    "load_model_text",
    [](const std::string& text, const std::string& default_name) {
      return std::make_shared<model_description>(
        checked(load_model_text(text, "model JSON", default_name)));
    },
    py::arg("text"), py::arg("default_name"));

  // Data and training.
  m.def(
    "fake_data",
    [](int64_t count, uint64_t seed) {
      if (count < 1)
        throw failure{make_error(ec::invalid_argument,
                                 "fake_data: count " + std::to_string(count)
                                   + " must be at least 1")};
      auto set = make_fake_dataset(count, seed);
      py::array_t<uint8_t> x({set.count, set.height, set.width});
      std::copy(set.pixels.begin(), set.pixels.end(), x.mutable_data());
      py::array_t<uint8_t> y(set.count);
      std::copy(set.labels.begin(), set.labels.end(), y.mutable_data());
      return py::make_tuple(x, y);
    },
    py::arg("count"), py::arg("seed"));
  m.def(
    "train",
    [](model_ptr model, py::handle data, py::handle test,
       const std::vector<std::string>& args, py::object callback) {
      auto train_split = hold_split(data, "data");
      std::optional<split_arrays> test_split;
      if (!test.is_none())
        test_split = hold_split(test, "test");
      bool main_thread = on_main_thread();
      std::optional<metrics_callback> per_line;
      if (!callback.is_none())
        per_line = metrics_callback{callback, std::nullopt};
      return train(std::move(model), std::move(train_split),
                   std::move(test_split), args, main_thread,
                   per_line ? &*per_line : nullptr);
    },
    py::arg("model"), py::arg("data"), py::arg("test"), py::arg("args"),
    py::arg("callback"));
  m.def("training_now", &training_now);
  m.def(
    "node",
    [](model_ptr model, py::handle data, py::handle test,
       const std::vector<std::string>& args) {
      auto train_split = hold_split(data, "data");
      std::optional<split_arrays> test_split;
      if (!test.is_none())
        test_split = hold_split(test, "test");
      return node(std::move(model), std::move(train_split),
                  std::move(test_split), args, on_main_thread());
    },
    py::arg("model"), py::arg("data"), py::arg("test"), py::arg("args"));
  m.def("check_node_flags", &check_node_flags, py::arg("args"));
  m.def(
    "cluster_tasks",
    [](const std::string& text, const std::string& source) {
      auto spec = checked(cluster_spec::parse(text, source));
      std::vector<std::string> tasks;
      for (const auto& t : spec.tasks())
        tasks.push_back(t.str());
      return py::make_tuple(tasks, spec.chief_task().str());
    },
    py::arg("text"), py::arg("source"));
  m.def("node_flags_help", &node_flags_help);
  m.def(
    "launch",
    [](const std::vector<std::string>& args) {
      return launch(args, on_main_thread());
    },
    py::arg("args"));
  m.def(
    "data_info",
    [](model_ptr model, py::handle data) {
      return data_info(std::move(model), hold_split(data, "data"));
    },
    py::arg("model"), py::arg("data"));
  m.def(
    "load_checkpoint",
    [](const std::string& directory) {
      auto found = checked(checkpoint_store{directory}.load_latest());
      if (!found.latest)
        throw failure{make_error(ec::io_error,
                                 "no checkpoint in " + in_quotes(directory))};
      const auto& ckpt = *found.latest;
      auto variables = checkpoint_variables(ckpt);
      py::dict params;
      for (const auto& v : variables) {
        std::vector<py::ssize_t> shape(v.value.shape().begin(),
                                       v.value.shape().end());
        py::array_t<float> a(shape);
        std::copy(v.value.values().begin(), v.value.values().end(),
                  a.mutable_data());
        params[py::str(v.name)] = a;
      }
      py::dict out;
      out["global_step"] = ckpt.global_step;
      out["path"] = ckpt.path;
      out["params"] = params;
      out["params_digest"] = parameter_digest(variables);
      out["skipped"] = found.warnings;
      return out;
    },
    py::arg("directory"));
  m.def(
    "evaluate",
    [](model_ptr model, py::handle params, py::handle data,
       int64_t batch_size, int threads) {
      auto pass = run_forward(std::move(model), params,
                              hold_split(data, "data"),
                              {"", "data[0]", "data[1]",
                               "syncfac.evaluate data"},
                              batch_size, threads, false);
      py::dict out;
      out["examples"] = pass.total.count;
      out["loss"] = pass.total.mean_loss();
      out["accuracy"] = pass.total.count > 0
                          ? static_cast<double>(pass.total.correct)
                              / static_cast<double>(pass.total.count)
                          : 0.0;
      return out;
    },
    py::arg("model"), py::arg("params"), py::arg("data"),
    py::arg("batch_size"), py::arg("threads"));
  m.def(
    "predict",
    [](model_ptr model, py::handle params, py::handle x, int64_t batch_size,
       int threads) {
      // No labels: zeros stand in (the loss is not reported).
      auto np = py::module_::import("numpy");
      auto inputs = hold_array(x, "x", array_role::inputs);
      auto count = inputs.view.shape.empty() ? 0 : inputs.view.shape[0];
      split_arrays data{
        std::move(inputs),
        hold_array(np.attr("zeros")(count, "uint8"), "labels",
                   array_role::labels)};
      auto pass = run_forward(std::move(model), params, data,
                              {"", "x", "labels", "syncfac.predict x"},
                              batch_size, threads, true);
      auto rows = static_cast<py::ssize_t>(pass.total.count);
      py::array_t<float> out({rows, static_cast<py::ssize_t>(pass.width)});
      std::copy(pass.predictions.begin(), pass.predictions.end(),
                out.mutable_data());
      return out;
    },
    py::arg("model"), py::arg("params"), py::arg("x"), py::arg("batch_size"),
    py::arg("threads"));
  m.def("flags_help", [] {
    syncfac::examples::convnet_options opts;
    return opts.help_text();
  });
}
