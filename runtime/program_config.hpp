#pragma once

// The actor-system configuration every syncfac program starts from: our
// message types registered, a scheduler sized to the machine, and a CLI
// parser that accepts both "--name value" and CAF's "--name=value".

#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>

namespace syncfac {

class program_config : public caf::actor_system_config {
public:
  program_config();

  /// Parses argv (and no INI file). Returns an error naming the offending
  /// argument; sets `help_printed` when --help was given.
  caf::error parse_cli(int argc, char** argv);

  bool help_printed = false;

  /// Every flag of the program and its value now, as a Markdown table
  /// (the "hparams" text of a TensorBoard run).
  std::string flag_table() const;

protected:
  /// Rewrites "--name value" to "--name=value" for options taking a value.
  std::vector<std::string> normalize(int argc, char** argv) const;
};

} // namespace syncfac
