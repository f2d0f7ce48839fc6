#pragma once

// syncfac.train and syncfac.data_info (docs/python.md): convnet_mnist_single's
// run on arrays. The flags are that program's (examples/convnet_options.hpp:
// the same names, defaults, ranges and messages), the model is given as a
// description, the data as arrays checked as an .npz file's are; the run
// is the same sync-replica runtime (or the plain loop) in an actor system
// of this process, with the GIL released until it ends.

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "actors/local_trainer.hpp"
#include "python/numpy_view.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/json.hpp"
#include "runtime/model_description.hpp"
#include "runtime/stop_signals.hpp"
#include "convnet_options.hpp"

namespace syncfac::python {

/// A Python callable called with every metrics line of the run (a dict,
/// the --metrics file's object); a true answer ends the run after the step
/// in flight, checkpointed, as a stop signal does ("preempted":
/// "callback"); an exception does too and is raised by train() after the
/// run. Held with the GIL by train()'s caller.
struct metrics_callback {
  pybind11::object function;
  /// The callable's exception, if it raised one.
  std::optional<pybind11::error_already_set> raised;
};

/// One split's arrays as the caller gave them.
struct split_arrays {
  held_array x;
  held_array y;
};

/// The split (x, y) of `obj`, a tuple or list of two arrays; `name`
/// ("data", "test") names its arrays ("data[0]") in messages.
split_arrays hold_split(pybind11::handle obj, const std::string& name);

/// Trains `model` on `data` (and evaluates on `test`, if given) with the
/// flags `args` ("--steps", "20", ...): the summary JSON of the run, as
/// convnet_mnist_single's --summary file holds it, plus an "arrays"
/// object (where the training inputs are and whether they were borrowed).
/// Errors throw python::failure. Refused while another train() of this
/// process runs (failure, ec::unavailable). `main_thread`: called on the
/// interpreter's main thread, where the run takes the stop signals
/// (SIGINT, SIGTERM, SIGHUP) while it lasts: the first ends it after the
/// step in flight, checkpointed ("preempted" and "preempted_line" in the
/// summary); a second ends the process, as it ends the programs.
std::string train(std::shared_ptr<const model_description> model,
                  split_arrays data, std::optional<split_arrays> test,
                  const std::vector<std::string>& args, bool main_thread,
                  metrics_callback* callback);

/// Whether a run of this process (train(), node() or launch()) is going
/// on.
bool training_now() noexcept;

/// The runtime's dataset of `arrays`, checked as load_npz checks a split;
/// `who` ("syncfac.train") and `name` ("data") name it in messages
/// ("array 'data[0]': ...", "the data 'syncfac.train data'").
std::shared_ptr<const dataset> to_dataset(const split_arrays& arrays,
                                          const std::string& who,
                                          const std::string& name,
                                          npz_inputs inputs);

/// The training set of `data` and the test set of `test` (to_dataset's,
/// `who` naming them), each checked to fit `model`. Without a test set
/// nothing is evaluated (no_final_eval): the runtime still takes one, the
/// training set.
std::pair<std::shared_ptr<const dataset>, std::shared_ptr<const dataset>>
run_datasets(const model_spec& model, const split_arrays& data,
             const std::optional<split_arrays>& test, const std::string& who);

/// `json` written as the summary file `path`, one line; an io_error naming
/// the file, thrown as a failure, when it cannot be.
void write_summary(const std::string& path, const json_object& json);

/// What train() and node() do before their run, without the GIL: glibc's
/// memory settings (runtime/allocator.hpp); on the interpreter's main
/// thread the stop signals (SIGTERM, SIGINT, SIGHUP and --requeue_signal),
/// the run's while the returned watcher lives; the CPU kernels' level;
/// CAF's threads on the CPU share and the log's first line naming them
/// (`who`: "syncfac.train: ..."); no evaluation without a test set.
std::unique_ptr<stop_signal_watcher>
prepare_run(examples::convnet_options& opts, const std::string& who,
            bool main_thread, bool has_test, std::ostream& log);

/// actors/stop_on_signal.hpp's preempted_line in a function's words:
/// "preempted (SIGINT) at global step 6; checkpointed into DIR: `again`
/// resumes there" (an empty `checkpoint_dir`: nothing to resume).
std::string function_preempted_line(const training_summary& summary,
                                    const std::string& checkpoint_dir,
                                    const std::string& again);

/// `args` ("--steps", "20", ...) parsed into `opts` as the programs parse
/// their command lines, `who` in the place of the program's name; errors
/// (and --help) throw python::failure.
void parse_flags(examples::training_options& opts, const std::string& who,
                 const std::vector<std::string>& args);

/// The runtime's view of `data` for `model` as train() takes it, checked
/// the same way: examples, shape, classes, the content digest, and the
/// address of the examples the runtime reads (the array's own buffer
/// when borrowed), as JSON.
std::string data_info(std::shared_ptr<const model_description> model,
                      split_arrays data);

} // namespace syncfac::python
