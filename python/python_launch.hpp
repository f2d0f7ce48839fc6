#pragma once

// syncfac.launch (docs/python.md, "Clusters"): every task of a cluster
// started as its own process by the project's launcher
// (runtime/launch/launcher.hpp), called in this process: the same
// command line, the same starts, prefixed output (on Python's sys.stdout
// and sys.stderr), signal forwarding and exit codes. The package's
// __init__.py writes the cluster, model and data files and reads the
// chief's summary.

#include <string>
#include <vector>

namespace syncfac::python {

/// Runs the launcher with the command line `args` (as syncfac-launch
/// takes it, argv[0] excluded) with the GIL released, and returns how the
/// run ended as JSON: "exit_code" (the launcher's), "chief" (the chief's
/// task), "tasks" (by task, "worker:1", in the cluster's order:
/// "exit_code", "status", "starts", "last_error_line"), "forwarded_signal" ("SIGINT", or "" for none),
/// "resume_step" and "chief_step" (-1: none). A bad command line or
/// cluster file throws python::failure. `main_thread`: the launcher takes
/// SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 while it runs and forwards
/// them as syncfac-launch does; elsewhere they stay Python's.
std::string launch(const std::vector<std::string>& args, bool main_thread);

} // namespace syncfac::python
