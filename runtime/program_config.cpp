#include "runtime/program_config.hpp"

#include <algorithm>
#include <sstream>
#include <thread>

#include <caf/io/middleman.hpp>

#include "messages/registry.hpp"
#include "runtime/error.hpp"

namespace syncfac {

program_config::program_config() {
  register_types(*this);
  load<caf::io::middleman>();
  // CAF defaults to 4 scheduler threads; more threads than cores only adds
  // contention with the compute threads of the device actors.
  auto cores = std::max(2u, std::thread::hardware_concurrency());
  set("scheduler.max-threads", static_cast<size_t>(std::min(cores, 4u)));
  // Work stealing (CAF's default) keeps idle scheduler threads polling for
  // tens of milliseconds after every burst of messages; with a message
  // burst every training step they steal cycles from the compute threads
  // (measured: -20% throughput on 2 cores). Sharing blocks idle threads on a
  // condition variable instead.
  set("scheduler.policy", caf::atom("sharing"));
  set("logger.console-verbosity", caf::atom("quiet"));
}

std::vector<std::string> program_config::normalize(int argc,
                                                   char** argv) const {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0
        && arg.find('=') == std::string::npos && i + 1 < argc) {
      auto name = arg.substr(2);
      const auto* opt = custom_options_.cli_long_name_lookup(name);
      if (opt != nullptr && !opt->is_flag()) {
        args.push_back(arg + "=" + argv[++i]);
        continue;
      }
    }
    args.push_back(std::move(arg));
  }
  return args;
}

std::string program_config::flag_table() const {
  std::string out = "| flag | value |\n| --- | --- |\n";
  for (const auto& opt : custom_options_) {
    // The program's own flags, not CAF's (scheduler, logger, middleman)
    // nor --help and its kin.
    auto name = opt.long_name();
    if (opt.category() != "global" || name == "help" || name == "long-help"
        || name == "dump-config" || name == "config-file")
      continue;
    auto value = opt.get();
    out += "| --" + std::string(name.data(), name.size()) + " | "
           + (value ? caf::to_string(*value) : std::string{}) + " |\n";
  }
  return out;
}

caf::error program_config::parse_cli(int argc, char** argv) {
  auto args = normalize(argc, argv);
  std::istringstream no_ini;
  if (auto err = parse(std::move(args), no_ini))
    return make_error(ec::invalid_config,
                      "command line: " + render(err));
  help_printed = cli_helptext_printed;
  return caf::none;
}

} // namespace syncfac
