#pragma once

// The one error enum of syncfac. Every failure that crosses a function or
// actor boundary is a caf::error of category "syncfac" carrying one of these
// codes plus a human-readable context that names the offending thing.

#include <cstdint>
#include <string>
#include <utility>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace syncfac {

enum class ec : uint8_t {
  /// Not an error.
  none = 0,
  /// An argument or option has a value outside its domain.
  invalid_argument,
  /// Two tensor shapes do not fit together (the context names both).
  shape_mismatch,
  /// A configuration (CLI, config struct, cluster file) failed validation.
  invalid_config,
  /// A file could not be opened, read or written.
  io_error,
  /// A data file is truncated, corrupt or of the wrong format.
  bad_data,
  /// A tensor holds NaN or Inf where finite values are required.
  non_finite,
  /// A name (variable, layer, backend, model) is unknown.
  unknown_name,
  /// A bounded wait ran out (the context says what was awaited).
  timeout,
  /// A peer actor is gone.
  peer_down,
  /// A peer task went away mid-run; the run may go on once it is back.
  peer_lost,
  /// A message from a peer was malformed and has been refused.
  bad_message,
  /// A numerical routine failed (e.g. a factor is not positive definite).
  numerical_failure,
  /// The requested feature is not available in this build.
  unavailable,
  /// An internal invariant broke: a bug in syncfac.
  internal,
};

/// The CAF error category of syncfac errors.
constexpr caf::atom_value error_category = caf::atom("syncfac");

const char* to_string(ec code) noexcept;

/// Makes a syncfac error with a context string.
caf::error make_error(ec code, std::string context);

/// Makes a syncfac error without context.
caf::error make_error(ec code);

/// `name` in single quotes, as every error context shows a name (a
/// variable, a layer, a file) so that its ends are plain to see. Not
/// called `quoted`: argument-dependent lookup finds std::quoted
/// (<iomanip>) for every std::string, and it wins for a non-const one.
std::string in_quotes(const std::string& name);

/// ec::invalid_config with the context "who: what": the configuration of
/// `who` (a role, e.g. "ps shard 0") failed validation on `what`.
caf::error bad_config(const std::string& who, const std::string& what);

/// `err` with `prefix` put before its message, keeping its code (errors of
/// other categories become ec::internal with their rendering).
caf::error with_context(const caf::error& err, const std::string& prefix);

/// Renders any caf::error readably, also without an actor system (used in
/// logs and by programs that print a reason before exiting).
std::string render(const caf::error& err);

} // namespace syncfac

