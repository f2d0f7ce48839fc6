#pragma once

// syncfac.node (docs/python.md, "Clusters"): one task of a cluster in this
// process, the node program convnet_mnist_distributed's run
// (examples/distributed_options.hpp) with the model given as a
// description and the data as arrays. The task comes from the flags
// (--cluster FILE, --job_name, --task) or, as the node program takes it,
// from TF_CONFIG, srun's or mpirun's environment.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "python/python_train.hpp"
#include "runtime/model_description.hpp"

namespace syncfac::python {

/// Runs the task to the end of the run with the node program's flags
/// `args`, the GIL released, and returns its outcome as JSON: "task",
/// "chief" (whether it hosts the chief), "exit_code" (0, or 143 when a
/// stop ended it), "signal" (the stop signal this process received, if
/// any) and, on the chief's task, "summary" (the node program's --summary
/// object). Errors (a bad flag, a cluster that cannot be derived, a
/// refusal at connect) throw python::failure with the runtime's message.
/// `main_thread`: the stop signals are the run's while it lasts, as in
/// train().
std::string node(std::shared_ptr<const model_description> model,
                 split_arrays data, std::optional<split_arrays> test,
                 const std::vector<std::string>& args, bool main_thread);

/// Parses `args` as the node program parses its command line (the same
/// names, defaults, ranges and messages); throws python::failure.
void check_node_flags(const std::vector<std::string>& args);

/// The node program's flags with their defaults and ranges, as
/// convnet_mnist_distributed --help prints them.
std::string node_flags_help();

} // namespace syncfac::python
