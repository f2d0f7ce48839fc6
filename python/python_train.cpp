#include "python/python_train.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "actors/local_trainer.hpp"
#include "actors/sync_trainer.hpp"
#include "convnet_options.hpp"
#include "example_main.hpp"
#include "kernels/cpu/isa.hpp"
#include "python/failure.hpp"
#include "python/python_log.hpp"
#include "python/run_slot.hpp"
#include "runtime/allocator.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/json.hpp"
#include "runtime/model_fit.hpp"
#include "runtime/stop_signals.hpp"

namespace py = pybind11;

namespace syncfac::python {

namespace {

/// What the log's first line and the errors begin with.
constexpr const char* program_name = "syncfac.train";

const void* examples_address(const dataset& set) {
  return set.float_inputs() ? static_cast<const void*>(set.value_data())
                            : static_cast<const void*>(set.pixel_data());
}

/// Where the training examples are, for the zero-copy check.
json_object arrays_json(const dataset& set) {
  json_object out;
  out.add("examples_address",
          static_cast<int64_t>(
            reinterpret_cast<std::uintptr_t>(examples_address(set))))
    .add("borrowed", set.borrowed.owner != nullptr);
  return out;
}

/// A stop asked for from Python (by the metrics callback): to the chief
/// once it exists, and to the plain loop, which asks after every step.
class python_stop {
public:
  void set_chief(const chief_actor& chief) {
    std::lock_guard<std::mutex> guard{mtx_};
    chief_ = chief;
    if (chief_ && !why_.empty())
      caf::anon_send(chief_, preempt_atom::value, why_);
  }

  void request(const std::string& why) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!why_.empty())
      return;
    why_ = why;
    if (chief_)
      caf::anon_send(chief_, preempt_atom::value, why_);
  }

  std::string requested() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return why_;
  }

private:
  mutable std::mutex mtx_;
  chief_actor chief_;
  std::string why_;
};

/// `cfg` calls `callback` with every metrics line, and stops when it
/// answers true or raises (beside the stop signals already wired in).
void call_back(sync_training_config& cfg, metrics_callback& callback,
               python_stop& stop) {
  auto signal_chief = cfg.on_chief;
  cfg.on_chief = [signal_chief, &stop](const chief_actor& chief) {
    if (signal_chief)
      signal_chief(chief);
    stop.set_chief(chief);
  };
  auto signal_stop = cfg.base.stop_requested;
  cfg.base.stop_requested = [signal_stop, &stop] {
    auto why = signal_stop ? signal_stop() : std::string{};
    return why.empty() ? stop.requested() : why;
  };
  cfg.base.on_metrics = [&callback, &stop](const std::string& line) {
    // After a stop the callable hears no more.
    if (!stop.requested().empty())
      return;
    py::gil_scoped_acquire gil;
    try {
      auto metrics = py::module_::import("json").attr("loads")(line);
      if (py::bool_(callback.function(metrics)))
        stop.request("callback");
    } catch (py::error_already_set& err) {
      callback.raised = std::move(err);
      stop.request("callback raised");
    }
  };
}

/// The run itself, without the GIL. On the interpreter's main thread the
/// stop signals (SIGINT, SIGTERM, SIGHUP) are the run's while it lasts,
/// as they are convnet_mnist_single's: the first ends it after the global
/// step in flight, checkpointed; Python's handlers come back after it.
std::string run(examples::convnet_options& opts, const split_arrays& data,
                const std::optional<split_arrays>& test, bool main_thread,
                metrics_callback* callback) {
  python_log log;
  auto watcher = prepare_run(opts, program_name, main_thread,
                             test.has_value(), log);
  auto cfg = checked(examples::runtime_config(opts));
  python_stop stop;
  if (callback != nullptr)
    call_back(cfg, *callback, stop);
  auto [train_set, test_set] = run_datasets(cfg.base.model, data, test,
                                            program_name);
  caf::expected<training_summary> summary{caf::error{}};
  {
    caf::actor_system sys{opts};
    summary = opts.runtime == "plain"
                ? train_locally(sys, cfg.base, *train_set, *test_set, log)
                : train_sync(sys, cfg, train_set, test_set, log);
  }
  log.finish();
  opts.stop_signals = nullptr;
  if (!summary)
    raise(summary.error());
  auto json = examples::with_threads(summary->to_json(), opts);
  json.add("arrays", arrays_json(*train_set));
  if (!summary->preempted.empty()) {
    bool plain = opts.runtime == "plain";
    json.add("preempted_line",
             function_preempted_line(
               *summary, plain ? std::string{} : opts.checkpoint_dir,
               "train() with the same arguments"));
  }
  if (!opts.summary.empty())
    write_summary(opts.summary, json);
  return json.str();
}

} // namespace

split_arrays hold_split(py::handle obj, const std::string& name) {
  if (!py::isinstance<py::tuple>(obj) && !py::isinstance<py::list>(obj))
    raise(make_error(ec::invalid_argument,
                     name + ": expected a pair (x, y) of arrays, got "
                       + py::str(py::type::handle_of(obj).attr("__name__"))
                           .cast<std::string>()));
  auto seq = py::reinterpret_borrow<py::sequence>(obj);
  if (py::len(seq) != 2)
    raise(make_error(ec::invalid_argument,
                     name + ": expected a pair (x, y) of arrays, got "
                       + std::to_string(py::len(seq)) + " items"));
  return {hold_array(seq[0], name + "[0]", array_role::inputs),
          hold_array(seq[1], name + "[1]", array_role::labels)};
}

std::string train(std::shared_ptr<const model_description> model,
                  split_arrays data, std::optional<split_arrays> test,
                  const std::vector<std::string>& args, bool main_thread,
                  metrics_callback* callback) {
  run_slot slot{program_name};
  examples::convnet_options opts;
  opts.given_model = std::move(model);
  parse_flags(opts, program_name, args);
  std::string summary;
  {
    py::gil_scoped_release no_gil;
    summary = run(opts, data, test, main_thread, callback);
  }
  if (callback != nullptr && callback->raised)
    throw *callback->raised;
  return summary;
}

std::shared_ptr<const dataset> to_dataset(const split_arrays& arrays,
                                          const std::string& who,
                                          const std::string& name,
                                          npz_inputs inputs) {
  array_names names{"", name + "[0]", name + "[1]", who + " " + name};
  auto set = dataset_from_arrays(arrays.x.view, arrays.y.view, names,
                                 inputs, arrays.x.owner);
  if (!set)
    raise(set.error());
  return std::make_shared<const dataset>(std::move(*set));
}

std::pair<std::shared_ptr<const dataset>, std::shared_ptr<const dataset>>
run_datasets(const model_spec& model, const split_arrays& data,
             const std::optional<split_arrays>& test, const std::string& who) {
  auto inputs = npz_inputs_for(model);
  auto train_set = to_dataset(data, who, "data", inputs);
  auto test_set = test ? to_dataset(*test, who, "test", inputs) : train_set;
  for (const auto& set : {train_set, test_set})
    check(check_data_fits(model, *set));
  return {train_set, test_set};
}

void write_summary(const std::string& path, const json_object& json) {
  std::ofstream out{path, std::ios::trunc};
  out << json.str() << "\n";
  if (!out.flush())
    raise(make_error(ec::io_error,
                     "cannot write summary file " + in_quotes(path)));
}

void parse_flags(examples::training_options& opts, const std::string& who,
                 const std::vector<std::string>& args) {
  std::vector<std::string> words{who};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words)
    argv.push_back(w.data());
  if (auto err = opts.parse_cli(static_cast<int>(argv.size()), argv.data()))
    raise(err);
  if (opts.help_printed)
    raise(make_error(ec::invalid_argument,
                     "--help and --version print, they do not train "
                     "(syncfac.flags_help() gives the text)"));
}

std::unique_ptr<stop_signal_watcher>
prepare_run(examples::convnet_options& opts, const std::string& who,
            bool main_thread, bool has_test, std::ostream& log) {
  keep_freed_memory();
  std::unique_ptr<stop_signal_watcher> watcher;
  if (main_thread) {
    auto requeue = parse_requeue_signal(opts.requeue_signal);
    if (!requeue)
      raise(requeue.error());
    auto installed = stop_signal_watcher::install(who, *requeue);
    if (!installed)
      raise(installed.error());
    watcher = std::move(*installed);
    opts.stop_signals = watcher.get();
  }
  if (auto err = cpu::select_isa(opts.isa))
    raise(err);
  std::string ignored;
  auto plan = opts.threads_in_use(&ignored);
  opts.set("scheduler.max-threads", static_cast<size_t>(plan.caf));
  log << who << ": " << plan.describe()
      << (ignored.empty() ? std::string{} : " (ignored: " + ignored + ")")
      << std::endl;
  if (!has_test && opts.eval_every > 0)
    raise(make_error(ec::invalid_config,
                     "--eval_every " + std::to_string(opts.eval_every)
                       + ": evaluations need a test set (test=(x, y))"));
  // Without a test set nothing is evaluated.
  if (!has_test)
    opts.no_final_eval = true;
  return watcher;
}

std::string function_preempted_line(const training_summary& summary,
                                    const std::string& checkpoint_dir,
                                    const std::string& again) {
  // The plain loop counts its steps, the sync runtime global steps.
  auto step = summary.runtime == "plain" ? summary.steps
                                         : summary.global_step;
  auto resumes = checkpoint_dir.empty()
                   ? std::string{"no checkpoint_dir: nothing to resume"}
                   : "checkpointed into " + checkpoint_dir + ": " + again
                       + " resumes there";
  return "preempted (" + summary.preempted + ") at global step "
         + std::to_string(step) + "; " + resumes;
}

bool training_now() noexcept {
  return run_in_progress();
}

std::string data_info(std::shared_ptr<const model_description> model,
                      split_arrays data) {
  auto spec = described_spec(*model);
  auto set = to_dataset(data, program_name, "data", npz_inputs_for(spec));
  if (auto err = check_data_fits(spec, *set))
    raise(err);
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx",
                static_cast<unsigned long long>(set->digest));
  json_object out;
  out.add("count", set->count)
    .add("height", set->height)
    .add("width", set->width)
    .add("channels", set->channels)
    .add("num_classes", set->num_classes)
    .add("float_inputs", set->float_inputs())
    .add("digest", std::string{digest})
    .merge(arrays_json(*set));
  return out.str();
}

} // namespace syncfac::python
