#pragma once

// An actor that dies of an exception takes the program down at once, with
// its role and the exception's text on stderr and exit code 1
// (docs/robustness.md, "Sizes before allocation"). CAF 0.17's default
// handler ends only the actor: whoever waits on it then waits for a
// timeout at best, and a run whose device actor ran out of memory hung.

#include <exception>

#include <caf/error.hpp>
#include <caf/scheduled_actor.hpp>

namespace syncfac {

/// Writes "<program>: the <role> actor died of <exception>: <what>" to
/// stderr and ends the process with exit code 1 (exit_codes::failure),
/// without unwinding: the actors it would wait for may be the dead one's
/// peers.
[[noreturn]] void end_program_of_exception(const char* role,
                                           std::exception_ptr x);

/// The text of an exception for a message: "out of memory
/// (std::bad_alloc)", "std::system_error: <what>", "<what>".
std::string exception_text(std::exception_ptr x);

/// Installs end_program_of_exception as `self`'s exception handler.
template <class Self>
void end_program_on_exception(Self* self, const char* role) {
  self->set_exception_handler(
    [role](caf::scheduled_actor*, std::exception_ptr& x) -> caf::error {
      end_program_of_exception(role, x);
    });
}

} // namespace syncfac
