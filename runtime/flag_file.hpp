#pragma once

// The pure parts of the command line every program shares
// (actors/program_config): the closest known flag to a mistyped one, and
// the flag file of --config-file (or --config_file), INI-style:
//
//   # comment (or ; comment)
//   steps = 400
//   optimizer = kfac
//   fake_data = true
//   [scheduler]              # a CAF category: scheduler.max-threads
//   max-threads = 2
//
// or lines of flags as on the command line (examples/main_job/*.flags):
//
//   --optimizer kfac --learning_rate 0.0003 --fake_data --steps=800
//
// docs/observability.md "The command line" documents both.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

namespace syncfac {

/// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `name` by edit distance, if it is close
/// enough to be a likely typo (at most a third of the longer name, at
/// least 2); empty otherwise.
std::string closest_name(const std::string& name,
                         const std::vector<std::string>& candidates);

/// One setting of a flag file: its flag (with "category." for a section
/// other than [global]), value, and line.
struct flag_setting {
  std::string name;
  std::string value;
  size_t line = 0;
  /// Written without a value ("--fake_data" on a line of flags): an
  /// on/off flag turned on (value "true"); any other flag lacks its value.
  bool bare = false;
};

/// The settings of a flag file's `text` (quotes around a value are
/// dropped); ec::invalid_config naming `path` and the line when a line is
/// neither a setting, a line of flags, a section, a comment nor blank. On
/// a line of flags, "--name value" takes the next word as its value unless
/// it starts with "--" (then the flag is bare).
caf::expected<std::vector<flag_setting>>
parse_flag_file(const std::string& text, const std::string& path);

} // namespace syncfac
