#pragma once

// What every training example does around its own flags: pick the runtime's
// configuration, report the run (figures, the SUMMARY line, --summary
// FILE), and turn the command line into an exit code. Errors go to stderr
// prefixed with the program's name; exec_main is not used because it
// discards caf_main's return code.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <system_error>

#include <caf/expected.hpp>

#include "actors/local_trainer.hpp"
#include "actors/stop_on_signal.hpp"
#include "actors/sync_trainer.hpp"
#include "kernels/cpu/isa.hpp"
#include "runtime/allocator.hpp"
#include "runtime/base/error.hpp"
#include "runtime/exit_codes.hpp"
#include "runtime/json.hpp"
#include "runtime/stop_signals.hpp"
#include "training_options.hpp"

namespace syncfac::examples {

/// `cfg`'s run stopped by the program's stop signals (example_main
/// installed them into `opts`): the first ends it after the step in
/// flight, checkpointed where --checkpoint_dir is set, and says what a
/// stop loses (docs/distributed.md, "Preemption").
inline void stop_on_signals(sync_training_config& cfg,
                            const training_options& opts) {
  if (opts.stop_signals == nullptr)
    return;
  stop_on_signal(cfg, *opts.stop_signals);
  opts.stop_signals->say_on_stop(
    what_a_stop_loses(opts.checkpoint_dir, opts.runtime == "plain"));
}

/// The configuration of the runtime the options ask for: the sync
/// runtime's in full, or the plain loop's (only `base` is used then);
/// either stops on the program's signals.
template <class Options>
caf::expected<sync_training_config> runtime_config(const Options& opts) {
  if (opts.runtime == "sync") {
    auto cfg = opts.to_sync_config();
    if (cfg)
      stop_on_signals(*cfg, opts);
    return cfg;
  }
  if (opts.runtime != "plain")
    return make_error(ec::invalid_config, "unknown runtime '" + opts.runtime
                                            + "' (expected sync or plain)");
  if (!opts.checkpoint_dir.empty())
    return make_error(ec::invalid_config,
                      "--checkpoint_dir needs --runtime sync (the chief "
                      "coordinates checkpoints)");
  auto base = opts.to_training_config();
  if (!base)
    return base.error();
  sync_training_config cfg;
  cfg.base = std::move(*base);
  stop_on_signals(cfg, opts);
  return cfg;
}

/// `json` with where the compute threads came from and CAF's threads.
inline json_object with_threads(const json_object& json,
                                const training_options& opts) {
  auto plan = opts.threads_in_use();
  auto out = json;
  out.add("threads_source", plan.source).add("caf_threads", plan.caf);
  return out;
}

/// Prints `lines` (the program's own figures), the throughput and memory
/// figures and the SUMMARY line of `json`, and writes `json` to --summary
/// FILE if given. Returns the exit code: exit_codes::preempted when a stop
/// signal ended the run (saying where and whether it resumes).
inline int report(const char* program, const training_options& opts,
                  const training_summary& summary, const json_object& json,
                  const std::string& lines = "") {
  auto full = with_threads(json, opts);
  std::cout << lines << "examples/sec (training steps only, after "
            << opts.warmup << " warm-up steps): " << summary.examples_per_s
            << "\n"
            << "peak RSS: " << summary.peak_rss_mib << " MiB\n"
            << "SUMMARY " << full.str() << std::endl;
  if (!opts.summary.empty()) {
    std::ofstream out{opts.summary, std::ios::trunc};
    out << full.str() << "\n";
    if (!out.flush()) {
      std::cerr << program << ": cannot write summary file '" << opts.summary
                << "'\n";
      return EXIT_FAILURE;
    }
  }
  if (summary.preempted.empty())
    return EXIT_SUCCESS;
  std::cerr << program << ": "
            << preempted_line(summary, opts.checkpoint_dir,
                              opts.runtime == "plain")
            << std::endl;
  return exit_codes::preempted;
}

/// The run's error on stderr; EXIT_FAILURE.
inline int fail(const char* program, const caf::error& err) {
  std::cerr << program << ": " << render(err) << "\n";
  return EXIT_FAILURE;
}

/// Parses the command line into `opts` and, unless --help was asked for,
/// returns run(opts), with the stop signals (SIGTERM, SIGINT, SIGHUP and
/// --requeue_signal) watched: runtime_config() hands them to the run.
template <class Options, class Run>
int example_main(const char* program, int argc, char** argv, Options& opts,
                 Run run) {
  // Before any thread starts: factor copies and message parts reuse the
  // memory freed by the last ones (runtime/allocator.hpp).
  keep_freed_memory();
  // Sizes are checked before anything is allocated (docs/robustness.md);
  // should an allocation or a thread still fail, the program says so and
  // exits 1 instead of aborting. An actor's exception ends the program in
  // its own handler (actors/fatal_exception.hpp).
  try {
    if (auto err = opts.parse_cli(argc, argv))
      return fail(program, err);
    if (opts.help_printed)
      return EXIT_SUCCESS;
    // Before any kernel runs: every thread of the run uses this level.
    if (auto err = cpu::select_isa(opts.isa))
      return fail(program, err);
    // The first line: the threads on the CPU share it was given, and why
    // (runtime/cpu_share.hpp); CAF's scheduler gets its part before the
    // actor system starts.
    std::string ignored;
    auto plan = opts.threads_in_use(&ignored);
    opts.set("scheduler.max-threads", static_cast<size_t>(plan.caf));
    std::cout << program << ": " << plan.describe()
              << (ignored.empty() ? std::string{}
                                  : " (ignored: " + ignored + ")")
              << std::endl;
    auto requeue = parse_requeue_signal(opts.requeue_signal);
    if (!requeue)
      return fail(program, requeue.error());
    auto watcher = stop_signal_watcher::install(program, *requeue);
    if (!watcher)
      return fail(program, watcher.error());
    opts.stop_signals = watcher->get();
    auto code = run(opts);
    opts.stop_signals = nullptr;
    // Stopped before the run could end in order (e.g. still loading or
    // connecting): preempted, not failed.
    if (code == EXIT_FAILURE)
      return (*watcher)->failure_exit_code();
    return code;
  } catch (const std::bad_alloc& err) {
    std::fprintf(stderr, "%s: out of memory (%s)\n", program, err.what());
  } catch (const std::system_error& err) {
    std::fprintf(stderr, "%s: std::system_error: %s\n", program, err.what());
  } catch (const std::exception& err) {
    std::fprintf(stderr, "%s: %s\n", program, err.what());
  }
  return EXIT_FAILURE;
}

/// example_main() of a program whose run is `train(opts)` (a
/// caf::expected<training_summary>) and whose report is the summary alone.
template <class Options, class Train>
int summary_main(const char* program, int argc, char** argv, Options& opts,
                 Train train) {
  return example_main(program, argc, argv, opts, [&](Options& parsed) {
    auto summary = train(parsed);
    if (!summary)
      return fail(program, summary.error());
    return report(program, parsed, *summary, summary->to_json());
  });
}

} // namespace syncfac::examples
