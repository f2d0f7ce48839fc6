#include "actors/program_config.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include <caf/config.hpp>
#include <caf/io/middleman.hpp>

#include "actors/type_registry.hpp"
#include "runtime/base/error.hpp"
#include "runtime/cpu_share.hpp"
#include "runtime/flag_file.hpp"
#include "runtime/input_file.hpp"

#ifndef SYNCFAC_VERSION
#  define SYNCFAC_VERSION "unknown"
#endif

namespace syncfac {

namespace {

std::string str(caf::string_view sv) {
  return std::string(sv.data(), sv.size());
}

/// CAF's built-in options that syncfac handles itself or that are CAF's
/// business (shown by --long-help only).
bool is_builtin(const std::string& name) {
  return name == "help" || name == "long-help" || name == "dump-config"
         || name == "config-file";
}

/// What a value of CAF type `type` is, in words for --help and errors.
std::string kind_of(const std::string& type) {
  if (type == "boolean")
    return "true or false";
  if (type.rfind("uint", 0) == 0)
    return "N (an integer >= 0)";
  if (type.rfind("int", 0) == 0)
    return "N (an integer)";
  if (type.rfind("real", 0) == 0)
    return "X (a number)";
  if (type == "string")
    return "TEXT";
  return type;
}

std::string name_of(const caf::config_option& opt) {
  auto cat = str(opt.category());
  auto name = str(opt.long_name());
  return cat == "global" ? name : cat + "." + name;
}

std::string default_of(const caf::config_option& opt) {
  auto value = opt.get();
  if (!value)
    return "none";
  if (auto s = caf::get_if<std::string>(&*value))
    return s->empty() ? std::string{"none"} : *s;
  if (auto b = caf::get_if<bool>(&*value))
    return *b ? "on" : "off";
  if (auto x = caf::get_if<double>(&*value)) {
    // 0.9, not CAF's 0.900000.
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *x);
    return buf;
  }
  return caf::to_string(*value);
}

} // namespace

program_config::program_config() {
  register_types(*this);
  load<caf::io::middleman>();
  // CAF defaults to 4 scheduler threads; more threads than the CPUs this
  // process was given only adds contention with the compute threads of
  // the device actors: its part of the CPU share (runtime/cpu_share.hpp;
  // a training program's --caf_threads sets it).
  auto share = plan_threads(resolve_cpu_budget(read_cpu_share()), 0, 0);
  set("scheduler.max-threads", static_cast<size_t>(share.caf));
  // Work stealing (CAF's default) keeps idle scheduler threads polling for
  // tens of milliseconds after every burst of messages; with a message
  // burst every training step they steal cycles from the compute threads
  // (measured: -20% throughput on 2 cores). Sharing blocks idle threads on a
  // condition variable instead.
  set("scheduler.policy", caf::atom("sharing"));
  set("logger.console-verbosity", caf::atom("quiet"));
}

void program_config::allow_values(const std::string& flag,
                                  std::vector<std::string> values) {
  allowed_[flag] = std::move(values);
}

void program_config::limit(const std::string& flag, flag_range range) {
  ranges_[flag] = range;
}

std::vector<std::string>
program_config::normalize(const std::vector<std::string>& raw) const {
  std::vector<std::string> args;
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto& arg = raw[i];
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0
        && arg.find('=') == std::string::npos && i + 1 < raw.size()) {
      auto name = arg.substr(2);
      const auto* opt = custom_options_.cli_long_name_lookup(name);
      if (opt != nullptr && !opt->is_flag()) {
        args.push_back(arg + "=" + raw[++i]);
        continue;
      }
    }
    args.push_back(arg);
  }
  return args;
}

std::vector<std::string> program_config::flag_names() const {
  std::vector<std::string> names;
  for (const auto& opt : custom_options_)
    if (!is_builtin(str(opt.long_name())) || opt.category() != "global")
      names.push_back(name_of(opt));
  names.push_back("help");
  names.push_back("version");
  names.push_back("config-file");
  names.push_back("config_file");
  return names;
}

caf::error program_config::check_arg(const std::string& arg,
                                     const std::string& origin) const {
  auto bad = [&](const std::string& what) {
    return make_error(ec::invalid_config, origin + what);
  };
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
    return bad("unexpected argument '" + arg
               + "': flags start with -- (see --help)");
  auto eq = arg.find('=');
  auto name = arg.substr(2, eq == std::string::npos ? std::string::npos
                                                    : eq - 2);
  const auto* opt = custom_options_.cli_long_name_lookup(name);
  if (opt == nullptr) {
    auto near = closest_name(name, flag_names());
    return bad("unknown flag --" + name
               + (near.empty() ? std::string{" (see --help)"}
                               : "; did you mean --" + near + "?"));
  }
  auto value = eq == std::string::npos ? std::string{} : arg.substr(eq + 1);
  if (opt->is_flag()) {
    if (eq != std::string::npos && value != "true" && value != "false")
      return bad("--" + name + " is an on/off flag: it takes no value, or "
                 "true or false, not '" + value + "'");
    return caf::none;
  }
  if (eq == std::string::npos)
    return bad("--" + name + " needs a value: " + kind_of(str(opt->type_name())));
  // Parsing stores the value; CAF's own parse stores it again.
  if (!opt->parse(value))
    return bad("--" + name + " '" + value + "' is not " + [&] {
      auto k = kind_of(str(opt->type_name()));
      auto paren = k.find(" (");
      return paren == std::string::npos
               ? "a valid " + k
               : k.substr(paren + 2, k.size() - paren - 3);
    }());
  if (auto r = ranges_.find(name); r != ranges_.end()) {
    // The value parsed as the flag's type, so it reads as a number.
    auto why = r->second.refusal(std::strtod(value.c_str(), nullptr));
    if (!why.empty())
      return bad("--" + name + " " + value + ": " + why);
  }
  return caf::none;
}

caf::expected<std::vector<std::string>>
program_config::read_flag_file(const std::string& path) const {
  auto text = read_input_file(path, "--config-file '" + path + "'",
                              max_flag_file_bytes);
  if (!text)
    return text.error();
  auto settings = parse_flag_file(*text, path);
  if (!settings)
    return settings.error();
  std::vector<std::string> args;
  for (const auto& s : *settings) {
    auto arg = "--" + s.name + "=" + s.value;
    const auto* opt = custom_options_.cli_long_name_lookup(s.name);
    if (s.bare && (opt == nullptr || !opt->is_flag()))
      arg = "--" + s.name; // check_arg names what it lacks
    else if (opt != nullptr && opt->is_flag()) {
      // An on/off flag: "true" sets it, "false" leaves it off.
      if (s.value == "false")
        continue;
      arg = "--" + s.name;
    }
    if (auto err = check_arg(arg, path + ":" + std::to_string(s.line) + ": "))
      return err;
    args.push_back(std::move(arg));
  }
  return args;
}

std::string program_config::help_text(bool all) const {
  std::ostringstream out;
  out << "Usage: " << program_ << " [--flag value | --flag=value]...\n\n"
      << "Flags [default]. --config-file FILE (or --config_file) reads flags\n"
      << "from a file first: \"name = value\" lines, or lines of flags as on\n"
      << "the command line; the command line wins.\n\n";
  auto row = [&](const std::string& left, const std::string& right) {
    out << "  " << std::left << std::setw(34) << left;
    if (left.size() >= 34)
      out << "\n  " << std::setw(34) << "";
    out << right << "\n";
  };
  for (const auto& opt : custom_options_) {
    auto name = str(opt.long_name());
    if (opt.category() != "global" || is_builtin(name))
      continue;
    std::string left = "--" + name;
    if (auto i = allowed_.find(name); i != allowed_.end()) {
      std::string vals;
      for (const auto& v : i->second)
        vals += (vals.empty() ? "" : "|") + v;
      left += " " + vals;
    } else if (!opt.is_flag()) {
      auto k = kind_of(str(opt.type_name()));
      left += " " + k.substr(0, k.find(" ("));
      if (auto r = ranges_.find(name); r != ranges_.end())
        left += " " + r->second.text();
    }
    row(left, str(opt.description()) + " [" + default_of(opt) + "]");
  }
  row("--config-file FILE", "read flags from FILE (also --config_file)");
  row("--help", "this text, then exit");
  row("--long-help", "this text and CAF's own options, then exit");
  row("--version", "the program's and syncfac's version, then exit");
  out << "\nN: an integer; X: a number (a range after it: what it must be);\n"
         "TEXT: any text. Also "
         "--scheduler.max-threads=N\nand CAF's other options (--long-help).\n";
  if (all) {
    out << "\nCAF's options:\n";
    for (const auto& opt : custom_options_) {
      if (opt.category() == "global")
        continue;
      row("--" + name_of(opt) + " " + kind_of(str(opt.type_name())).substr(
                                        0, kind_of(str(opt.type_name()))
                                             .find(" (")),
          str(opt.description()) + " [" + default_of(opt) + "]");
    }
  }
  return out.str();
}

std::string program_config::flag_table() const {
  std::string out = "| flag | value |\n| --- | --- |\n";
  for (const auto& opt : custom_options_) {
    // The program's own flags, not CAF's (scheduler, logger, middleman)
    // nor --help and its kin.
    auto name = str(opt.long_name());
    if (opt.category() != "global" || is_builtin(name))
      continue;
    auto value = opt.get();
    out += "| --" + name + " | "
           + (value ? caf::to_string(*value) : std::string{}) + " |\n";
  }
  return out;
}

caf::error program_config::parse_cli(int argc, char** argv) {
  if (argc > 0) {
    std::string p = argv[0];
    program_ = p.substr(p.find_last_of('/') + 1);
  }
  std::vector<std::string> raw(argv + std::min(argc, 1), argv + argc);
  // --help and --version answer alone: nothing else is parsed.
  for (const auto& a : raw) {
    if (a == "--help" || a == "-h" || a == "-?" || a == "--long-help") {
      std::cout << help_text(a == "--long-help") << std::flush;
      help_printed = true;
      return caf::none;
    }
    if (a == "--version") {
      std::cout << program_ << " (syncfac " << SYNCFAC_VERSION
                << ", CAF " << CAF_MAJOR_VERSION << "." << CAF_MINOR_VERSION
                << "." << CAF_PATCH_VERSION << ")" << std::endl;
      help_printed = true;
      return caf::none;
    }
  }
  // --config-file FILE: its flags first, so that the command line wins.
  std::vector<std::string> cli;
  std::vector<std::string> args;
  for (size_t i = 0; i < raw.size(); ++i) {
    std::string file;
    // --config_file: spelt as every other flag is.
    if (raw[i] == "--config-file" || raw[i] == "--config_file") {
      if (i + 1 >= raw.size())
        return make_error(ec::invalid_config,
                          raw[i] + " needs a value: FILE");
      file = raw[++i];
    } else if (raw[i].rfind("--config-file=", 0) == 0
               || raw[i].rfind("--config_file=", 0) == 0) {
      file = raw[i].substr(14);
    } else {
      cli.push_back(raw[i]);
      continue;
    }
    auto from_file = read_flag_file(file);
    if (!from_file)
      return from_file.error();
    args.insert(args.end(), from_file->begin(), from_file->end());
  }
  for (auto& arg : normalize(cli)) {
    if (auto err = check_arg(arg, ""))
      return err;
    args.push_back(std::move(arg));
  }
  // CAF takes an on/off flag bare only: "--x=true" is "--x", and
  // "--x=false" (after a file turned it on) is stored after the parse.
  std::vector<const caf::config_option*> turn_off;
  std::vector<std::string> caf_args;
  for (auto& arg : args) {
    auto eq = arg.find('=');
    const auto* opt = eq == std::string::npos
                        ? nullptr
                        : custom_options_.cli_long_name_lookup(
                          arg.substr(2, eq - 2));
    if (opt != nullptr && opt->is_flag()) {
      auto on = arg.substr(eq + 1) == "true";
      auto i = std::find(turn_off.begin(), turn_off.end(), opt);
      if (on && i != turn_off.end())
        turn_off.erase(i);
      if (!on && i == turn_off.end())
        turn_off.push_back(opt);
      if (on)
        caf_args.push_back(arg.substr(0, eq));
      continue;
    }
    caf_args.push_back(std::move(arg));
  }
  std::istringstream no_ini;
  if (auto err = parse(std::move(caf_args), no_ini))
    return make_error(ec::invalid_config, "command line: " + render(err));
  for (const auto* opt : turn_off)
    opt->store(caf::config_value{false});
  help_printed = cli_helptext_printed;
  for (const auto& kvp : allowed_) {
    const auto* opt = custom_options_.cli_long_name_lookup(kvp.first);
    if (opt == nullptr)
      continue;
    auto value = opt->get();
    auto s = value ? caf::get_if<std::string>(&*value) : nullptr;
    if (s == nullptr
        || std::find(kvp.second.begin(), kvp.second.end(), *s)
             != kvp.second.end())
      continue;
    std::string vals;
    for (const auto& v : kvp.second)
      vals += (vals.empty() ? "" : ", ") + v;
    auto near = closest_name(*s, kvp.second);
    return make_error(ec::invalid_config,
                      "--" + kvp.first + " '" + *s + "': expected one of "
                        + vals
                        + (near.empty() ? std::string{}
                                        : " (did you mean " + near + "?)"));
  }
  return caf::none;
}

} // namespace syncfac
