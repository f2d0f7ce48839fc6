#pragma once

// The local launcher: starts every task of a cluster file as its own
// process on this machine (PROGRAM --cluster FILE --job_name JOB --task I
// <program flags>), prefixes and collects their output (a UTC timestamp in
// front of each line), forwards SIGINT and SIGTERM once (a second one kills
// every task), and returns the chief's exit code once the chief is gone and
// the others have exited (after a grace period, terminated). The chief
// reports its progress as typed records on a pipe of its own
// (runtime/progress_record.hpp); they drive the fault hooks (kill a task at
// a global step, restart a task after it died) and, on a terminal, a
// progress line. One thread: fork/exec, pipes and poll; every wait is
// bounded. docs/cluster.md describes the flags.

#include <cstdint>
#include <ostream>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/cluster/cluster_spec.hpp"

namespace syncfac {

/// --kill JOB:INDEX@STEP[+DELAY][:SIGNAL[+MS]]: send SIGNAL to the task
/// once the chief's progress record says global step N >= STEP, or DELAY
/// milliseconds after that (no step comes while the steps are paused: a
/// second loss during a first one's recovery); with +MS (STOP only),
/// SIGCONT MS milliseconds later (a freeze that does not wait for a step,
/// e.g. of a task no step can go without).
struct kill_hook {
  task_id task;
  int64_t step = 0;
  int64_t delay_ms = 0;
  int signal = 9; // SIGKILL
  /// STOP only: thaw after this long (0: not by this hook).
  int64_t thaw_after_ms = 0;

  /// Parses "worker:1@100", "worker:1@100:STOP", "ps:0@100:STOP+2000" or
  /// "ps:0@100+600" (SIGKILL 600 ms after step 100).
  static caf::expected<kill_hook> parse(const std::string& text);
};

/// --restart JOB:INDEX@MS: start the task again MS milliseconds after it
/// died (once per flag; give it twice for two restarts).
struct restart_hook {
  task_id task;
  int64_t delay_ms = 0;

  /// Parses "worker:1@500".
  static caf::expected<restart_hook> parse(const std::string& text);
};

struct launch_options {
  /// The cluster file every task gets with --cluster.
  std::string cluster_file;
  /// The node program; empty: the build's default node program
  /// (SYNCFAC_LAUNCH_DEFAULT_PROGRAM, convnet_mnist_distributed unless
  /// configured otherwise) next to the launcher's own executable. A name
  /// without '/' is looked up next to the launcher first, then on PATH.
  std::string program;
  /// --task_log_dir (old spelling --log_dir): where each task's output
  /// also goes (DIR/job-index.log); empty: none.
  std::string log_dir;
  /// How long the others may take to exit once the chief has exited.
  int64_t grace_ms = 10000;
  /// How long a task may take between SIGTERM and SIGKILL.
  int64_t term_ms = 3000;
  /// Hard limit on the whole run (0: none); past it everything is killed.
  double max_wall_s = 0;
  std::vector<kill_hook> kills;
  std::vector<restart_hook> restarts;
  /// Passed to every task after --cluster/--job_name/--task.
  std::vector<std::string> program_args;
  /// Per job (--job_program JOB=PATH): another program for that job's
  /// tasks, e.g. a role written outside the library.
  std::map<std::string, std::string> job_programs;
  /// Per job (--job_flags JOB="FLAGS", split at white space): the flags
  /// that job's tasks get instead of program_args.
  std::map<std::string, std::vector<std::string>> job_args;
  /// A UTC timestamp in front of every line (--log_timestamps, default on;
  /// --no_log_timestamps or --log_timestamps=false: off).
  bool log_timestamps = true;
  /// --progress_line auto|always|never: the chief's progress (step rate,
  /// ETA) redrawn in place on stdout; auto: when stdout is a terminal.
  std::string progress_line = "auto";
  /// Whether the launcher's stdout is a terminal (set by launch_main, not
  /// a flag).
  bool out_is_terminal = false;

  /// Whether the progress line is drawn.
  bool draws_progress() const {
    return progress_line == "always"
           || (progress_line == "auto" && out_is_terminal);
  }
  /// --help was given (and printed).
  bool help = false;
  /// Whether the launcher takes SIGINT, SIGTERM, SIGHUP, SIGUSR1 and
  /// SIGUSR2 for the run and forwards them (not a flag: syncfac.launch
  /// called off the interpreter's main thread leaves them to Python).
  bool take_signals = true;

  /// Checks the values and the hooks' tasks against the cluster.
  caf::error validate(const cluster_spec& spec) const;
};

/// The launcher's usage text.
std::string launch_usage();

/// Parses the launcher's command line (argv[0] excluded). Unrecognised
/// arguments and everything after "--" go to the program.
caf::expected<launch_options> parse_launch_args(
  const std::vector<std::string>& args);

/// The signal number of "KILL", "SIGTERM", "STOP", "9", ...; 0 if unknown.
int signal_by_name(const std::string& name);

/// "SIGKILL" for 9, ...
std::string signal_name(int sig);

/// The program to run: `program` resolved as launch_options::program says.
caf::expected<std::string> resolve_program(const std::string& program);

/// How one task of a launched run ended.
struct task_end {
  task_id task;
  /// The last start's exit code (128 + N if signal N ended it); -1 when
  /// it never started or was no longer waited for.
  int exit_code = -1;
  /// "exited with code 1", "killed by SIGKILL", "never started", ...
  std::string status;
  /// How often it was started (restarts included).
  int starts = 0;
  /// The last line it wrote to stderr (a program's last word is its
  /// error: "convnet_mnist_distributed: invalid_config: ..."); empty if
  /// none.
  std::string last_error_line;
};

/// What run_launcher() saw of the run besides its exit code.
struct launch_report {
  /// Every task in the cluster's tasks() order.
  std::vector<task_end> tasks;
  /// The first signal the launcher forwarded (0: none).
  int forwarded_signal = 0;
  /// The newest checkpoint step the chief's progress records named, where
  /// a run started again resumes (-1: none).
  int64_t resume_step = -1;
  /// The chief's global step as its progress records said last (-1: none).
  int64_t chief_step = -1;
};

/// Runs the cluster until the chief is done and returns the exit code:
/// the chief's (128 + signal if a signal ended it; 143,
/// exit_codes::preempted, when a forwarded SIGTERM or SIGINT stopped the
/// run and the chief exited with it), 124 when max_wall_s ran out, 127
/// when a task could not be started. Task output goes to
/// `out` prefixed with "[job:index] ", the launcher's reports to `err`
/// prefixed with "syncfac-launch: ". `report`, if given, is filled with
/// how every task ended.
int run_launcher(const launch_options& opts, const cluster_spec& spec,
                 std::ostream& out, std::ostream& err,
                 launch_report* report = nullptr);

/// The whole program: parse, load and validate the cluster, run. Returns
/// the exit code (2 for a bad command line or cluster file).
/// `out_is_terminal`: `out` is a terminal (the progress line is drawn).
int launch_main(const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err, bool out_is_terminal = false);

} // namespace syncfac
