#define BOOST_TEST_MODULE actors_status_tables
#include <boost/test/unit_test.hpp>

// Every figure of every status table reaches every output the table says
// it goes to, with its value: a role's figures /metrics (its family,
// labelled with the role) and the summary (its role's object, or K-FAC's);
// the log window's figures the metrics line, TensorBoard, /metrics,
// /status.json and the status page's list; each figure is in
// docs/observability.md with its family. And every number of a role's
// status is in its table: a field added to a status (and its inspect)
// but not to the table fails here, as does a figure dropped from one
// output.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/meta/annotation.hpp>
#include <nlohmann/json.hpp>

#include "actors/role_figures.hpp"
#include "actors/role_metrics.hpp"
#include "actors/role_totals.hpp"
#include "runtime/observe/prometheus_text.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/observe/window_figures.hpp"
#include "runtime/training_log.hpp"
#include "../temp_dir.hpp"

using namespace syncfac;
using observe::figure;
using test::temp_dir;

namespace {

/// Gives every number of a status a value of its own (2, 3, 4, ...; true
/// for a flag) and every text a non-empty one, through the status's CAF
/// inspect: the members the wire knows, which the table must know too.
struct numbering_inspector {
  using result_type = void;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  double next = 2;
  /// The numbers given, in the order of the inspect.
  std::vector<double> given;

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (visit(xs), ...);
  }

  template <class T>
  void visit(T& x) {
    if constexpr (caf::meta::is_annotation<T>::value) {
      // type_name and the like
    } else if constexpr (std::is_same<T, bool>::value) {
      x = true;
      given.push_back(1);
    } else if constexpr (std::is_arithmetic<T>::value) {
      x = static_cast<T>(next);
      given.push_back(next);
      next += 1;
    } else if constexpr (std::is_same<T, std::string>::value) {
      x = "text";
    } else if constexpr (caf::detail::is_inspectable<numbering_inspector,
                                                     T>::value) {
      inspect(*this, x);
    }
    // Lists (a shard's variables, the first-order variables) are no
    // figures and stay empty.
  }
};

struct entry {
  summary_part part;
  figure fig;
  double value;
};

/// docs/observability.md, which lists every figure with its family.
const std::string& observability_doc() {
  static const std::string text = [] {
    std::ifstream in{SYNCFAC_SOURCE_DIR "/docs/observability.md"};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  }();
  return text;
}

/// The page lists the figure as "`key`: `family`".
bool documented(const figure& fig) {
  return observability_doc().find("`" + std::string{fig.key} + "`: `"
                                  + fig.metric + "`")
         != std::string::npos;
}

template <class Status>
std::vector<entry> table_of(const Status& st) {
  std::vector<entry> out;
  figures(st, [&](summary_part part, const figure& fig, auto value) {
    out.push_back({part, fig, static_cast<double>(value)});
  });
  return out;
}

/// A status with every member numbered, and the numbers given; `labels`
/// leading members name the role (its index) and are no figures.
template <class Status>
std::pair<Status, std::vector<double>> numbered(size_t labels) {
  Status st;
  numbering_inspector f;
  inspect(f, st);
  auto given = f.given;
  given.erase(given.begin(), given.begin() + static_cast<long>(labels));
  return {st, given};
}

/// Checks one role's table against the status and against the outputs.
template <class Status>
void check_role_table(size_t labels) {
  auto [st, given] = numbered<Status>(labels);
  std::string kind = role_kind(st);
  auto table = table_of(st);
  BOOST_TEST_CONTEXT(kind) {
    // Every number of the status is a figure of the table.
    for (auto x : given)
      BOOST_TEST(std::any_of(table.begin(), table.end(),
                             [&](const entry& e) { return e.value == x; }),
                 kind << ": the status's number " << x
                      << " is in no figure of its table");
    std::set<std::string> keys;
    for (const auto& e : table) {
      BOOST_TEST(keys.insert(e.fig.key).second,
                 kind << ": " << e.fig.key << " twice");
      BOOST_TEST(std::strlen(e.fig.help) > 0, e.fig.key);
      BOOST_TEST((std::string{e.fig.metric}.rfind("syncfac_", 0) == 0),
                 e.fig.metric);
      std::string metric = e.fig.metric;
      auto is_total = metric.size() > 6
                      && metric.compare(metric.size() - 6, 6, "_total") == 0;
      BOOST_TEST(is_total == (e.fig.type == observe::metric_type::counter),
                 e.fig.metric << ": a counter's name ends in _total");
      // The figures shared by every role that sends are listed once.
      if (metric != "syncfac_messages_sent_total"
          && metric != "syncfac_payload_bytes_sent_total")
        BOOST_TEST(documented(e.fig), "docs/observability.md lacks `"
                                        << e.fig.key << "`: `" << metric
                                        << "`");
    }
    // /metrics: the family with its help, type and the role's sample.
    auto role = kind + ":0";
    auto text = observe::exposition_text(
      role_families(st, role, {{"job", "j"}, {"task", "0"}}));
    for (const auto& e : table) {
      std::string metric = e.fig.metric;
      auto sample = metric + "{job=\"j\",task=\"0\",role=\"" + role + "\"} "
                    + observe::format_sample_value(e.value) + "\n";
      BOOST_TEST(text.find(sample) != std::string::npos,
                 "/metrics lacks " << sample << " in\n" << text);
      BOOST_TEST(text.find("# HELP " + metric + " ") != std::string::npos,
                 metric);
      auto type = e.fig.type == observe::metric_type::counter ? "counter"
                                                              : "gauge";
      BOOST_TEST(text.find("# TYPE " + metric + " " + type + "\n")
                   != std::string::npos,
                 metric);
    }
    // The summary: the role's object, or K-FAC's.
    role_totals totals;
    totals.add(st);
    auto roles = nlohmann::json::parse(totals.roles_json().str());
    auto kfac = nlohmann::json::parse(totals.kfac_json().str());
    for (const auto& e : table) {
      const auto& where = e.part == summary_part::kfac ? kfac : roles[kind];
      BOOST_TEST_CONTEXT(e.fig.key) {
        BOOST_REQUIRE(where.contains(e.fig.key));
        // As JSON writes it: ten significant digits.
        auto got = where[e.fig.key].template get<double>();
        BOOST_TEST(std::abs(got - e.value) <= 1e-9 * std::abs(e.value),
                   got << " != " << e.value);
      }
    }
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(every_number_of_a_shards_status_reaches_every_output) {
  check_role_table<shard_status>(1);
}

BOOST_AUTO_TEST_CASE(every_number_of_a_workers_status_reaches_every_output) {
  check_role_table<worker_status>(1);
}

BOOST_AUTO_TEST_CASE(every_number_of_the_chiefs_status_reaches_every_output) {
  check_role_table<chief_status>(0);
}

BOOST_AUTO_TEST_CASE(every_number_of_a_covariance_status_reaches_every_output) {
  check_role_table<covariance_status>(1);
}

BOOST_AUTO_TEST_CASE(every_number_of_an_inverse_status_reaches_every_output) {
  check_role_table<inverse_status>(1);
}

BOOST_AUTO_TEST_CASE(one_family_is_one_figure_across_the_tables) {
  // Roles share a family only for the same figure (what each sent), and
  // K-FAC's figures, one total over every role, have keys of their own.
  std::map<std::string, std::string> family_key;
  std::map<std::string, std::string> kfac_key_kind;
  auto check = [&](const auto& st) {
    std::string kind = role_kind(st);
    for (const auto& e : table_of(st)) {
      auto [i, fresh] = family_key.emplace(e.fig.metric, e.fig.key);
      BOOST_TEST((fresh || i->second == e.fig.key),
                 e.fig.metric << " is both " << i->second << " and "
                              << e.fig.key);
      if (e.part == summary_part::kfac) {
        auto [k, new_key] = kfac_key_kind.emplace(e.fig.key, kind);
        BOOST_TEST((new_key || k->second == kind),
                   "kfac's " << e.fig.key << " from " << k->second
                             << " and " << kind);
      }
    }
  };
  check(shard_status{});
  check(worker_status{});
  check(chief_status{});
  check(covariance_status{});
  check(inverse_status{});
}

BOOST_AUTO_TEST_CASE(the_summary_folds_a_figure_as_its_table_says) {
  role_totals totals;
  shard_status a;
  a.global_step = 7;
  a.accepted_pushes = 3;
  a.preconditioned_applies = 5;
  a.last_clip = 1;
  shard_status b = a;
  b.accepted_pushes = 4;
  b.preconditioned_applies = 6;
  b.last_clip = 0.5;
  totals.add(a);
  totals.add(b);
  worker_status stats;
  stats.steps = 9;
  stats.stats_sent = 2;
  totals.add(stats, "stats_worker");
  BOOST_TEST(totals.actors("ps") == 2);
  BOOST_TEST(totals.value("ps", "global_step") == 7);      // the highest
  BOOST_TEST(totals.value("ps", "accepted_pushes") == 7);  // the sum
  BOOST_TEST(totals.value("kfac", "preconditioned_steps") == 6);
  BOOST_TEST(totals.value("kfac", "kl_clip") == 0.75);     // the mean
  BOOST_TEST(totals.value("kfac", "stats_sent") == 2);
  // Statistics workers are apart from the gradient workers.
  BOOST_TEST(totals.value("worker", "steps") == 0);
  BOOST_TEST(totals.value("stats_worker", "steps") == 9);
  auto roles = nlohmann::json::parse(totals.roles_json().str());
  BOOST_TEST(roles["ps"]["actors"].get<int>() == 2);
  BOOST_TEST(roles["ps"]["accepted_pushes"].dump() == "7");
}

BOOST_AUTO_TEST_CASE(every_figure_of_a_training_line_reaches_every_output) {
  // A line with every figure of the window's table, as the chief writes
  // it: each reaches the metrics line, TensorBoard, /metrics,
  // /status.json ("last") and the status page's list ("figures").
  temp_dir tmp;
  auto status = std::make_shared<observe::run_status>();
  std::ostringstream out;
  training_log log{out, 100, false, status};
  auto metrics_path = tmp.file("metrics.jsonl");
  auto logdir = tmp.file("tb");
  BOOST_REQUIRE(!log.open_outputs(metrics_path, logdir, ""));
  std::map<std::string, double> value;
  json_object extra;
  double next = 2;
  for (const auto& fig : observe::window::all) {
    value[fig.key] = next;
    if (std::string{fig.key} != observe::window::loss.key
        && std::string{fig.key} != observe::window::train_accuracy.key)
      extra.add(fig.key, next);
    next += 1;
  }
  log.train(10, value[observe::window::loss.key],
            value[observe::window::train_accuracy.key], extra);
  std::ifstream metrics_file{metrics_path};
  std::string line;
  std::getline(metrics_file, line);
  auto metrics_line = nlohmann::json::parse(line);
  std::string events;
  for (const auto& file : std::filesystem::directory_iterator(logdir)) {
    std::ifstream in{file.path(), std::ios::binary};
    events.append(std::istreambuf_iterator<char>{in}, {});
  }
  auto prometheus = observe::exposition_text(status->families({}));
  auto status_json = nlohmann::json::parse(status->json());
  std::set<std::string> listed;
  for (const auto& f : status_json["figures"])
    listed.insert(f["key"].get<std::string>());
  for (const auto& fig : observe::window::all) {
    BOOST_TEST_CONTEXT(fig.key) {
      auto v = value[fig.key];
      BOOST_TEST(metrics_line[fig.key].get<double>() == v);
      // A Value of a Summary: tag (field 1) and simple_value (field 2).
      auto f = static_cast<float>(v);
      std::string scalar = "\x0a" + std::string(1, static_cast<char>(
                                                     std::strlen(fig.key)))
                           + fig.key + "\x15"
                           + std::string(reinterpret_cast<const char*>(&f),
                                         sizeof f);
      BOOST_TEST(events.find(scalar) != std::string::npos);
      BOOST_TEST(prometheus.find(std::string{fig.metric} + " "
                                 + observe::format_sample_value(v) + "\n")
                   != std::string::npos,
                 prometheus);
      BOOST_TEST(status_json["last"][fig.key].get<double>() == v);
      BOOST_TEST(listed.count(fig.key) == 1u);
      BOOST_TEST(documented(fig), "docs/observability.md lacks it");
    }
  }
}
