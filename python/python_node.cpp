#include "python/python_node.hpp"

#include <fstream>
#include <memory>
#include <utility>

#include "distributed_options.hpp"
#include "example_main.hpp"
#include "python/failure.hpp"
#include "python/python_log.hpp"
#include "python/run_slot.hpp"
#include "runtime/json.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/stop_signals.hpp"

namespace py = pybind11;

namespace syncfac::python {

namespace {

/// What the log's first line and the errors begin with.
constexpr const char* program_name = "syncfac.node";

/// The task's result as node() returns it (`result`, a JSON object) and
/// its exit code; `failure` when node() must raise instead.
int report(const examples::distributed_options& opts,
           const cluster_run_config& cfg,
           const std::unique_ptr<stop_signal_watcher>& watcher,
           const caf::expected<node_outcome>& outcome,
           std::optional<caf::error>& failure, std::string& result) {
  auto signal = watcher ? watcher->received() : std::nullopt;
  json_object out;
  out.add("task", cfg.task.str())
    .add("chief", cfg.task == cfg.cluster.chief_task())
    .add("signal", signal.value_or(""));
  if (!outcome) {
    // Stopped by a signal before the run could end in order (still
    // connecting, say): preempted, as the node program exits then.
    if (!signal) {
      failure = outcome.error();
      return EXIT_FAILURE;
    }
    out.add("exit_code", exit_codes::preempted)
      .add("error", render(outcome.error()));
    result = out.str();
    return exit_codes::preempted;
  }
  out.add("exit_code", outcome->exit_code);
  if (outcome->summary) {
    auto json = examples::with_threads(outcome->summary->to_json(), opts);
    json.add("cluster", outcome->cluster);
    if (!outcome->summary->preempted.empty())
      json.add("preempted_line",
               function_preempted_line(*outcome->summary, opts.checkpoint_dir,
                                       "node() with the same arguments on "
                                       "every task"));
    if (!opts.summary.empty())
      write_summary(opts.summary, json);
    out.add("summary", json);
  }
  result = out.str();
  return outcome->exit_code;
}

/// The run itself, without the GIL.
std::string run(examples::distributed_options& opts, const split_arrays& data,
                const std::optional<split_arrays>& test, bool main_thread) {
  if (opts.print_cluster)
    raise(make_error(ec::invalid_argument,
                     "--print_cluster prints, it does not run a task (run "
                     "convnet_mnist_distributed --print_cluster)"));
  python_log log;
  auto watcher = prepare_run(opts, program_name, main_thread,
                             test.has_value(), log);
  auto cfg = checked(examples::make_config(opts));
  check(examples::configure_system(opts, cfg));
  // The arrays are checked before anything listens, on every task (a
  // shard given bad arrays says so as the chief would); without a test
  // set every task alike takes the training set as one.
  auto sets = run_datasets(cfg.sync.base.model, data, test, program_name);
  data_loader load = [&sets] { return sets; };
  // The report is made before the actor system ends (bounded: past it the
  // process exits with the task's code, runtime/system_shutdown.hpp); an
  // error is raised after.
  std::optional<caf::error> failure;
  std::string result;
  examples::run_node(opts, cfg, load, log,
                     [&](caf::expected<node_outcome>& outcome) {
                       auto code = report(opts, cfg, watcher, outcome,
                                          failure, result);
                       log.finish();
                       return code;
                     });
  opts.stop_signals = nullptr;
  if (failure)
    raise(*failure);
  return result;
}

} // namespace

std::string node(std::shared_ptr<const model_description> model,
                 split_arrays data, std::optional<split_arrays> test,
                 const std::vector<std::string>& args, bool main_thread) {
  run_slot slot{program_name};
  examples::distributed_options opts;
  opts.given_model = std::move(model);
  parse_flags(opts, program_name, args);
  py::gil_scoped_release no_gil;
  return run(opts, data, test, main_thread);
}

void check_node_flags(const std::vector<std::string>& args) {
  examples::distributed_options opts;
  parse_flags(opts, "syncfac.launch", args);
}

std::string node_flags_help() {
  examples::distributed_options opts;
  return opts.help_text();
}

} // namespace syncfac::python
