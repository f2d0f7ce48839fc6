#include "python/python_launch.hpp"

#include <pybind11/pybind11.h>

#include "python/failure.hpp"
#include "python/python_log.hpp"
#include "python/run_slot.hpp"
#include "runtime/json.hpp"
#include "runtime/launch/launcher.hpp"

namespace py = pybind11;

namespace syncfac::python {

std::string launch(const std::vector<std::string>& args, bool main_thread) {
  run_slot slot{"syncfac.launch"};
  auto opts = checked(parse_launch_args(args));
  if (opts.help)
    throw failure{make_error(ec::invalid_argument,
                             "--help prints, it does not launch")};
  opts.take_signals = main_thread;
  auto spec = checked(cluster_spec::load(opts.cluster_file));
  check(opts.validate(spec));
  // A program that is not there is refused here, before the run, with the
  // launcher's message (it would otherwise only say so on stderr).
  checked(resolve_program(opts.program));
  for (const auto& [job, path] : opts.job_programs)
    checked(resolve_program(path));
  launch_report report;
  int code = 0;
  {
    python_log out{"stdout"};
    python_log err{"stderr"};
    {
      py::gil_scoped_release no_gil;
      code = run_launcher(opts, spec, out, err, &report);
      out.finish();
      err.finish();
    }
  }
  json_object tasks;
  for (const auto& t : report.tasks) {
    json_object task;
    task.add("exit_code", t.exit_code)
      .add("status", t.status)
      .add("starts", t.starts)
      .add("last_error_line", t.last_error_line);
    tasks.add(t.task.str(), task);
  }
  json_object out;
  out.add("exit_code", code)
    .add("chief", spec.chief_task().str())
    .add("tasks", tasks)
    .add("forwarded_signal", report.forwarded_signal == 0
                               ? std::string{}
                               : signal_name(report.forwarded_signal))
    .add("resume_step", report.resume_step)
    .add("chief_step", report.chief_step);
  return out.str();
}

} // namespace syncfac::python
