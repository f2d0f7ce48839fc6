#pragma once

// The actor-system configuration every syncfac program starts from: our
// message types registered, a scheduler sized to the machine, and the
// command line people expect: "--name value" and "--name=value", --help
// (every flag with its default and allowed values or range, on stdout),
// --version, --config-file FILE or --config_file FILE (an INI-style file
// of the same flags, or lines of flags as on the command line; the
// command line wins), and one sentence naming an unknown or malformed
// flag with the closest known one, or a value outside the flag's range.
// docs/observability.md "The command line".

#include <map>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>

#include "runtime/flag_range.hpp"

namespace syncfac {

class program_config : public caf::actor_system_config {
public:
  program_config();

  /// Parses argv (and --config-file's file, if given). Returns an error
  /// naming the offending flag; sets `help_printed` when --help or
  /// --version printed something and the program should exit 0.
  caf::error parse_cli(int argc, char** argv);

  bool help_printed = false;

  /// Every flag of the program and its value now, as a Markdown table
  /// (the "hparams" text of a TensorBoard run).
  std::string flag_table() const;

  /// The --help text: every flag, its kind or allowed values, default and
  /// meaning (`all`: CAF's own options too, as --long-help).
  std::string help_text(bool all = false) const;

protected:
  /// Rewrites "--name value" to "--name=value" for options taking a value.
  std::vector<std::string> normalize(const std::vector<std::string>& raw) const;

  /// `flag` (a text flag) takes only `values`: --help lists them and a
  /// parse refuses any other.
  void allow_values(const std::string& flag, std::vector<std::string> values);

  /// `flag` (a numeric flag) takes only values in `range`: --help shows it
  /// and a value given outside it (command line or file) is refused naming
  /// the flag ("--learning_rate -3: must be > 0"). A later call replaces
  /// the range (a program whose flag means more).
  void limit(const std::string& flag, flag_range range);

private:
  /// An error naming `arg` unless it is a known flag with a well-formed
  /// value (`origin`: where it came from, for the message).
  caf::error check_arg(const std::string& arg, const std::string& origin) const;

  /// Every flag name the command line accepts ("steps",
  /// "scheduler.max-threads").
  std::vector<std::string> flag_names() const;

  /// The arguments --config-file FILE stands for.
  caf::expected<std::vector<std::string>>
  read_flag_file(const std::string& path) const;

  std::string program_ = "syncfac";
  std::map<std::string, std::vector<std::string>> allowed_;
  std::map<std::string, flag_range> ranges_;
};

} // namespace syncfac
