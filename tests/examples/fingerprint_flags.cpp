#define BOOST_TEST_MODULE fingerprint_flags
#include <boost/test/unit_test.hpp>

// Every flag of the cluster program's --help either changes the record the
// nodes compare at hello (actors/run_fingerprint, docs/distributed.md "One
// configuration across every node") or is on the list below of flags that
// may differ between nodes, with the reason. A new flag that changes
// training but is left out of the record fails here: a node started with
// another value would otherwise train silently with the others.

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "actors/run_fingerprint.hpp"
#include "actors/topology.hpp"
#include "examples/convnet_options.hpp"
#include "tests/examples/process.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace syncfac::examples;
using namespace syncfac::test;

namespace {

/// The flags that may differ between nodes, each with why.
const std::map<std::string, std::string> may_differ{
  {"cluster", "where this node reads the cluster; the cluster itself is "
              "agreed by the handshake"},
  {"job_name", "this node's own task"},
  {"task", "this node's own task"},
  {"layout", "how a scheduler's ranks map to tasks: per launch"},
  {"port_base", "addresses and ports are per node"},
  {"hosts", "addresses and ports are per node"},
  {"tls_dir", "each node has its own key and certificate"},
  {"print_cluster", "prints the cluster and exits: never trains"},
  {"connect_timeout_ms", "a timeout: changes when a node gives up, not "
                         "what it computes"},
  {"max_wait_ms", "a timeout"},
  {"heartbeat_ms", "the middleman's liveness check"},
  {"connection_timeout_ms", "a timeout"},
  {"middleman_workers", "threads deserialising messages"},
  {"push_part_kib", "how a push is cut into messages; the sum is the same"},
  {"workers_per_task", "compared through run.worker_replicas: N is the "
                       "cluster's worker tasks times it, so a node with "
                       "another value has another N"},
  {"request_timeout_ms", "a timeout"},
  {"step_timeout_ms", "a timeout"},
  {"threads", "compute threads: per machine"},
  {"caf_threads", "CAF's scheduler threads: per machine (its CPU share)"},
  {"requeue_signal", "the signal this node's scheduler sends: per site"},
  {"bind", "the address this node listens on: per node"},
  {"insecure", "each node refuses plaintext off loopback on its own; "
               "TLS itself is agreed by the handshake"},
  {"dead_peer_timeout_ms", "a timeout"},
  {"isa", "the CPU kernels' instruction set: per machine (the results "
          "agree to rounding, docs/kernels.md)"},
  {"backend", "the device: per machine"},
  {"device", "the device: per machine (its kind, real or the "
             "benchmark-only delay device, is compared: device.kind; "
             "tests/actors/run_fingerprint.cpp)"},
  {"log_every", "logging"},
  {"warmup", "which steps the examples/s figure leaves out"},
  {"metrics", "an output file"},
  {"logdir", "an output directory"},
  {"metrics_port", "a port: per node"},
  {"metrics_bind", "an address: per node"},
  {"summary", "an output file"},
  {"no_progress", "the terminal's progress line"},
  {"checkpoint_dir", "the chief writes checkpoints; other nodes need none"},
  {"checkpoint_every", "the chief's schedule of checkpoints"},
  {"keep_checkpoints", "the chief's checkpoint directory"},
  {"steps", "the chief's schedule: it tells every node when to stop"},
  {"num_epochs", "the chief's schedule"},
  {"eval_every", "the chief's schedule of evaluations"},
  {"eval_every_steps", "the chief's schedule of evaluations (eval_every's "
                       "evaluator spelling)"},
  {"no_final_eval", "the chief's schedule of evaluations"},
  {"data", "where the data are: their contents are compared "
           "(data.*.digest over every example and label)"},
  {"data_dir", "where the data are: their contents are compared"},
  {"fake_data", "which data: their contents are compared"},
  {"use_fake_data", "which data: their contents are compared"},
  {"fake_train_size", "how many examples: the count and digest are "
                      "compared"},
  {"fake_test_size", "how many examples: the count and digest are "
                     "compared"},
  {"model_file", "where the model is described: the model as built is "
                 "compared, layer by layer and variable by variable"},
  {"runtime", "a cluster runs the sync runtime only (plain is refused)"},
};

/// Values other than the baseline's for the flags of a TEXT kind, and for
/// those where the generic rule (default + 2, half the default) would give
/// the value the baseline derives anyway (R = ceil(0.6 N) = 3 under K-FAC).
const std::map<std::string, std::string> other_values{
  {"replicas_to_aggregate", "2"},
  {"mlp_hidden", "16,8"},
  {"variables_to_average", "fc0"},
  {"kfac_cadence", "exact"},
  {"lr_boundaries", "10,20"},
};

/// Flags whose other value is valid only with another flag: a step
/// schedule needs its boundaries.
const std::map<std::string, std::vector<std::string>> companions{
  {"lr_schedule", {"--lr_boundaries", "10"}},
};

/// Where the baseline refuses the flag's other value (bf16 needs AMX
/// tiles or AVX512-BF16 on this CPU; --nesterov needs --optimizer
/// momentum, the baseline's is kfac), the setting it stands for is made on
/// the config itself.
void set_refused_here(const std::string& flag, sync_training_config& cfg) {
  if (flag == "kfac_precision")
    cfg.base.optimizer.kfac.precision = product_precision::bf16;
  if (flag == "nesterov")
    cfg.base.optimizer.nesterov = true;
}

/// The flags every run of this test starts from: K-FAC, the MLP and
/// moving averages, so that their flags take effect.
const std::vector<std::string> baseline{
  "--optimizer", "kfac", "--model", "mlp", "--worker_replicas", "4",
  "--moving_average_decay", "0.99", "--batch_size", "32"};

struct help_row {
  std::string name;
  std::string kind; // "" for an on/off flag, "N", "X", "TEXT", or a|b|c
  std::string default_value;
};

/// The global flags of a --help text (program_config::help_text).
std::vector<help_row> help_rows(const std::string& help) {
  std::vector<help_row> rows;
  std::istringstream in{help};
  std::string line;
  help_row* open = nullptr;
  while (std::getline(in, line)) {
    if (line.rfind("  --", 0) == 0) {
      // The left column ends at its padding (two spaces); a long one
      // fills the line, its description on the next.
      auto end = line.find("  ", 4);
      auto left = line.substr(4, end == std::string::npos ? end : end - 4);
      std::istringstream words{left};
      help_row row;
      words >> row.name >> row.kind;
      rows.push_back(row);
      open = &rows.back();
    } else if (line.rfind("\nCAF", 0) == 0 || line.empty()) {
      open = nullptr;
    }
    if (open != nullptr) {
      auto l = line.rfind('[');
      auto r = line.rfind(']');
      if (l != std::string::npos && r != std::string::npos && r > l)
        open->default_value = line.substr(l + 1, r - l - 1);
    }
  }
  return rows;
}

/// The baseline's value of `name`, if it sets one.
std::string baseline_value(const std::string& name) {
  for (size_t i = 0; i + 1 < baseline.size(); i += 2)
    if (baseline[i] == "--" + name)
      return baseline[i + 1];
  return {};
}

/// A value of `row` other than its default and the baseline's.
std::string other_value(const help_row& row) {
  if (row.kind.find('|') != std::string::npos) {
    std::istringstream values{row.kind};
    std::string v;
    auto current = baseline_value(row.name);
    if (current.empty())
      current = row.default_value;
    while (std::getline(values, v, '|'))
      if (v != current)
        return v;
  }
  if (auto it = other_values.find(row.name); it != other_values.end())
    return it->second;
  if (row.kind == "N") {
    auto d = std::stoll(row.default_value);
    return std::to_string(d >= 1 ? d + 2 : 3);
  }
  if (row.kind == "X") {
    auto d = std::stod(row.default_value);
    return d == 0 || d < 0 ? "0.5" : std::to_string(d * 0.5);
  }
  return {};
}

/// The record of a node started with the baseline plus `extra`.
caf::expected<config_fingerprint>
fingerprint_of(const std::vector<std::string>& extra,
               const std::string& refused_here = "") {
  convnet_options opts;
  std::vector<std::string> args{"fingerprint_flags"};
  args.insert(args.end(), baseline.begin(), baseline.end());
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  if (auto err = opts.parse_cli(static_cast<int>(argv.size()), argv.data()))
    return err;
  auto cfg = opts.to_sync_config();
  if (!cfg)
    return cfg.error();
  set_refused_here(refused_here, *cfg);
  auto init = model::make(cfg->base.model, cfg->base.seed);
  if (!init)
    return init.error();
  auto layout = layout_shards(*cfg, **init);
  if (!layout)
    return layout.error();
  static const auto train = make_fake_dataset(64, 1);
  static const auto test = make_fake_dataset(16, 2);
  return make_run_fingerprint(*cfg, **init, *layout, &train, &test);
}

} // namespace

BOOST_AUTO_TEST_CASE(every_flag_that_changes_training_is_compared) {
  auto help = run_program(bin + "convnet_mnist_distributed --help");
  BOOST_REQUIRE_EQUAL(help.exit_code, 0);
  auto rows = help_rows(help.output);
  BOOST_TEST_MESSAGE(rows.size() << " flags in --help");
  BOOST_REQUIRE(rows.size() > 40);
  auto base = fingerprint_of({});
  BOOST_REQUIRE_MESSAGE(base, why(base));
  int compared = 0;
  for (const auto& row : rows) {
    if (may_differ.count(row.name) > 0 || row.name == "config-file"
        || row.name == "help" || row.name == "long-help"
        || row.name == "version")
      continue;
    BOOST_TEST_CONTEXT("--" << row.name << " " << row.kind << " ["
                            << row.default_value << "]") {
      std::vector<std::string> extra{"--" + row.name};
      std::string value;
      if (!row.kind.empty()) {
        value = other_value(row);
        BOOST_REQUIRE_MESSAGE(!value.empty(),
                              "no other value known: add one to "
                              "other_values, or the flag to may_differ with "
                              "a reason");
        extra.push_back(value);
      }
      if (auto c = companions.find(row.name); c != companions.end())
        extra.insert(extra.end(), c->second.begin(), c->second.end());
      auto changed = fingerprint_of(extra);
      if (!changed
          && (row.name == "kfac_precision" || row.name == "nesterov")) {
        // Refused with the baseline here (set_refused_here says why).
        changed = fingerprint_of({}, row.name);
      }
      BOOST_REQUIRE_MESSAGE(changed, "--" << row.name << " " << value
                                          << " refused: "
                                          << why(changed));
      auto d = compare_fingerprints(*changed, *base);
      BOOST_TEST(d.has_value(),
                 "--" << row.name << " " << value
                      << " changes nothing the nodes compare: add it to "
                         "the run's fingerprint (actors/run_fingerprint) "
                         "or, if it may differ between nodes, to "
                         "may_differ with the reason");
      if (d)
        BOOST_TEST_MESSAGE("--" << row.name << " " << value << ": " << d->path);
      ++compared;
    }
  }
  BOOST_TEST(compared > 20);
}

// The list above must not hide a flag that is gone.
BOOST_AUTO_TEST_CASE(every_listed_flag_exists) {
  auto help = run_program(bin + "convnet_mnist_distributed --help");
  BOOST_REQUIRE_EQUAL(help.exit_code, 0);
  std::set<std::string> names;
  for (const auto& row : help_rows(help.output))
    names.insert(row.name);
  for (const auto& kvp : may_differ)
    BOOST_TEST(names.count(kvp.first) == 1, "--" << kvp.first
                                                 << " is not in --help");
}
