// The exit codes every syncfac program ends with, in one place, so that a
// scheduler can act on them (docs/distributed.md, "Preemption").
#pragma once

namespace syncfac::exit_codes {

/// The run ended as configured.
inline constexpr int success = 0;

/// The run failed: bad input, a lost peer that did not come back, an error.
inline constexpr int failure = 1;

/// A test or a program that needs hardware that is not there (CTest's skip code).
inline constexpr int skipped = 77;

/// Stopped by SIGTERM or SIGINT: the chief finished the global step in flight
/// and, where --checkpoint_dir is set, wrote a checkpoint of it. Restarted with
/// the same flags the run resumes there. 143 is 128 + SIGTERM: Kubeflow's
/// ExitCode restart policy retries 128–255 and Slurm's requeue can match it.
inline constexpr int preempted = 143;

} // namespace syncfac::exit_codes
