#include "runtime/cluster/cluster_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/cluster/scheduler_env.hpp"
#include "runtime/base/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json.hpp"
#include "runtime/json_reader.hpp"

namespace syncfac {

namespace {

using json = nlohmann::ordered_json;

caf::error config_error(std::string what) {
  return make_error(ec::invalid_config, std::move(what));
}

// Quotes text for a message. It may come from a command line and not be
// UTF-8, where nlohmann's dump() would throw: invalid bytes become U+FFFD.
std::string jquote(const std::string& str) {
  return json_excerpt(str, 120);
}

std::string join(const std::vector<std::string>& xs) {
  std::string result;
  for (const auto& x : xs) {
    if (!result.empty())
      result += ", ";
    result += x;
  }
  return result;
}

std::string describe(const json& value) {
  return json_describe(value);
}

/// The rank of a job in tasks() order; other jobs come after, by name.
int job_rank(const std::string& job) {
  static const char* order[] = {"chief", "worker", "ps", "covariance",
                                "inverse"};
  for (int i = 0; i < 5; ++i)
    if (job == order[i])
      return i;
  return 5;
}

std::vector<std::string> ordered_jobs(const cluster_spec& spec) {
  std::vector<std::string> names;
  for (const auto& kvp : spec.jobs)
    names.push_back(kvp.first);
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& x, const std::string& y) {
                     return job_rank(x) < job_rank(y);
                   });
  return names;
}

std::string entry_name(const std::string& job, size_t index) {
  return "cluster." + job + "[" + std::to_string(index) + "]";
}

/// The key under which two addresses count as the same: the host in lower
/// case, "localhost" as 127.0.0.1.
std::string address_key(const host_port& hp) {
  std::string host = hp.host;
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (host == "localhost")
    host = "127.0.0.1";
  return host + "|" + std::to_string(hp.port);
}

/// Reads the JSON text into a spec without checking its meaning. What is
/// accepted but ignored (TensorFlow's rpc_layer "grpc") is said in `notes`
/// when given.
caf::expected<cluster_spec>
parse_syntax(const std::string& text,
             std::vector<std::string>* notes = nullptr) {
  // The project's one JSON reader: duplicate keys, nesting and size are
  // refused as in a model file (runtime/json_reader.hpp).
  auto parsed = read_json(text);
  if (!parsed)
    return parsed.error();
  auto& doc = *parsed;
  if (!doc.is_object())
    return config_error("not a JSON object (found " + describe(doc)
                        + "); expected {\"cluster\": {...}, \"task\": {...}}");
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "cluster" && it.key() != "task"
        && it.key() != "environment" && it.key() != "rpc_layer")
      return config_error("unexpected key " + jquote(it.key())
                          + " at the top level (expected \"cluster\", "
                            "\"task\" and optionally \"environment\" and "
                            "\"rpc_layer\")");
  // TensorFlow's TFConfigClusterResolver reads the protocol of its servers
  // here; syncfac's nodes always speak CAF's BASP (TLS: --tls_dir), which
  // stands in for TensorFlow's gRPC. Anything else asks for a transport
  // that is not there.
  auto rpc = doc.find("rpc_layer");
  if (rpc != doc.end()) {
    if (!rpc->is_string())
      return config_error("rpc_layer: not a string (found " + describe(*rpc)
                          + ")");
    auto layer = rpc->get<std::string>();
    if (layer != "grpc")
      return config_error("rpc_layer " + jquote(layer)
                          + ": not supported (syncfac's nodes talk through "
                            "CAF's middleman, over TLS with --tls_dir; only "
                            "\"grpc\" is accepted, and ignored)");
    if (notes != nullptr)
      notes->push_back("rpc_layer \"grpc\" ignored: syncfac's nodes talk "
                       "through CAF's middleman (docs/cluster.md)");
  }
  cluster_spec spec;
  auto cluster = doc.find("cluster");
  if (cluster == doc.end())
    return config_error("no \"cluster\" object (expected {\"cluster\": "
                        "{\"chief\": [\"host:port\"], ...}})");
  if (!cluster->is_object())
    return config_error("\"cluster\" is not an object (found "
                        + describe(*cluster) + ")");
  // TensorFlow's older name of the chief (Estimator, AI Platform).
  if (cluster->contains("master") && cluster->contains("chief"))
    return config_error("cluster.master and cluster.chief: both name the "
                        "chief (\"master\" is TensorFlow's older name of "
                        "\"chief\"); give one");
  for (auto job = cluster->begin(); job != cluster->end(); ++job) {
    const std::string name = job.key() == "master" ? "chief" : job.key();
    if (!job->is_array())
      return config_error("cluster." + name
                          + ": not a list of \"host:port\" strings (found "
                          + describe(*job) + ")");
    auto& addresses = spec.jobs[name];
    for (size_t i = 0; i < job->size(); ++i) {
      const auto& entry = (*job)[i];
      if (!entry.is_string())
        return config_error(entry_name(name, i)
                            + ": not a \"host:port\" string (found "
                            + describe(entry) + ")");
      auto text = entry.get<std::string>();
      auto hp = host_port::parse(text);
      if (!hp)
        return with_context(hp.error(),
                            entry_name(name, i) + " " + jquote(text));
      addresses.push_back(std::move(*hp));
    }
  }
  auto task = doc.find("task");
  if (task != doc.end()) {
    if (!task->is_object())
      return config_error("\"task\" is not an object (found " + describe(*task)
                          + "); expected {\"type\": \"worker\", \"index\": 0}");
    for (auto it = task->begin(); it != task->end(); ++it)
      if (it.key() != "type" && it.key() != "index")
        return config_error("task: unexpected key " + jquote(it.key())
                            + " (expected \"type\" and \"index\")");
    auto type = task->find("type");
    if (type == task->end())
      return config_error("task: no \"type\" (expected {\"type\": \"worker\", "
                          "\"index\": 0})");
    if (!type->is_string())
      return config_error("task.type: not a string (found " + describe(*type)
                          + ")");
    auto index = task->find("index");
    if (index == task->end())
      return config_error("task: no \"index\" (expected {\"type\": "
                          + jquote(type->get<std::string>())
                          + ", \"index\": 0})");
    if (!index->is_number_integer())
      return config_error("task.index: not an integer (found "
                          + describe(*index) + ")");
    constexpr auto lo = std::numeric_limits<int32_t>::min();
    constexpr auto hi = std::numeric_limits<int32_t>::max();
    if (index->is_number_unsigned() ? index->get<uint64_t>() > uint64_t{hi}
                                    : (index->get<int64_t>() < lo
                                       || index->get<int64_t>() > hi))
      return config_error("task.index " + index->dump() + ": out of range");
    auto job = type->get<std::string>();
    spec.task = task_id{job == "master" ? "chief" : job,
                        index->get<int32_t>()};
  }
  return spec;
}

caf::error validate_task(const cluster_spec& spec,
                         const std::vector<std::string>& known_jobs) {
  const auto& t = *spec.task;
  auto name = "task " + t.str();
  if (t.job.empty())
    return config_error("task: empty type (expected one of "
                        + join(known_jobs) + ")");
  if (std::find(known_jobs.begin(), known_jobs.end(), t.job)
      == known_jobs.end())
    return config_error(name + ": unknown job " + jquote(t.job) + " (known: "
                        + join(known_jobs) + ")");
  // TensorFlow leaves its one evaluator out of "cluster": it is a task of
  // its own that joins the others without an address.
  if (spec.jobs.count(t.job) == 0 && t.job == "evaluator") {
    if (t.index == 0)
      return caf::none;
    return config_error(name + ": index out of range (an evaluator outside "
                        "\"cluster\" is TensorFlow's one evaluator, index 0;"
                        " for more, list them as \"evaluator\": "
                        "[\"host:port\", ...])");
  }
  if (spec.jobs.count(t.job) == 0)
    return config_error(name + ": the cluster has no job " + jquote(t.job)
                        + " (it has " + join(ordered_jobs(spec)) + ")");
  if (t.index < 0)
    return config_error(name + ": negative index");
  auto n = spec.count(t.job);
  if (t.index >= n)
    return config_error(name + ": index out of range (cluster." + t.job
                        + " has " + std::to_string(n)
                        + (n == 1 ? " entry" : " entries")
                        + (n > 0 ? ": 0.." + std::to_string(n - 1) : "")
                        + ")");
  return caf::none;
}

caf::expected<std::string> read_file(const std::string& path) {
  return read_input_file(path, cluster_source_name(path),
                         max_description_bytes);
}

caf::expected<cluster_spec>
parse_and_validate(const std::string& text, const std::string& source,
                   const std::vector<std::string>& known_jobs) {
  auto spec = parse_syntax(text);
  if (!spec)
    return with_context(spec.error(), cluster_source_name(source));
  if (auto err = spec->validate(known_jobs))
    return with_context(err, cluster_source_name(source));
  return spec;
}

} // namespace

// -- host_port ----------------------------------------------------------------

std::string host_port::str() const {
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

caf::expected<host_port> host_port::parse(const std::string& text) {
  if (text.empty())
    return config_error("empty address (expected \"host:port\")");
  std::string host;
  std::string port;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos)
      return config_error("missing ']' after an IPv6 address (expected "
                          "\"[::1]:port\")");
    host = text.substr(1, close - 1);
    auto rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':')
      return config_error("missing port (expected \"[host]:port\")");
    port = rest.substr(1);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
      return config_error("missing port (expected \"host:port\")");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return config_error("an IPv6 address needs brackets (e.g. "
                          "\"[::1]:47000\")");
  }
  if (host.empty())
    return config_error("empty host");
  for (unsigned char c : host)
    if (std::isspace(c) || std::iscntrl(c) || c == '[' || c == ']'
        || c == '/')
      return config_error("bad host " + jquote(host)
                          + " (spaces, control characters, brackets or '/')");
  if (port.empty())
    return config_error("missing port (expected \"host:port\")");
  if (!std::all_of(port.begin(), port.end(),
                   [](unsigned char c) { return std::isdigit(c); }))
    return config_error("bad port " + jquote(port)
                        + " (expected a number 1..65535)");
  auto first = port.find_first_not_of('0');
  auto digits = first == std::string::npos ? std::string{"0"}
                                           : port.substr(first);
  if (digits.size() > 5 || std::stoul(digits) > 65535 || digits == "0")
    return config_error("port out of range (1..65535)");
  return host_port{std::move(host), static_cast<uint16_t>(std::stoul(digits))};
}

bool operator==(const host_port& x, const host_port& y) {
  return x.host == y.host && x.port == y.port;
}

bool operator!=(const host_port& x, const host_port& y) {
  return !(x == y);
}

// -- task_id ------------------------------------------------------------------

std::string task_id::str() const {
  return job + ":" + std::to_string(index);
}

caf::expected<task_id> task_id::parse(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return make_error(ec::invalid_argument,
                      "task " + jquote(text) + ": expected JOB:INDEX, e.g. "
                      "\"worker:1\"");
  auto job = text.substr(0, colon);
  auto index = text.substr(colon + 1);
  if (job.empty())
    return make_error(ec::invalid_argument,
                      "task " + jquote(text) + ": empty job name");
  if (index.empty() || index.size() > 9
      || !std::all_of(index.begin(), index.end(),
                      [](unsigned char c) { return std::isdigit(c); }))
    return make_error(ec::invalid_argument,
                      "task " + jquote(text)
                        + ": the index must be a number >= 0");
  return task_id{std::move(job), static_cast<int32_t>(std::stol(index))};
}

bool operator==(const task_id& x, const task_id& y) {
  return x.job == y.job && x.index == y.index;
}

bool operator!=(const task_id& x, const task_id& y) {
  return !(x == y);
}

bool operator<(const task_id& x, const task_id& y) {
  auto rx = job_rank(x.job);
  auto ry = job_rank(y.job);
  if (rx != ry)
    return rx < ry;
  if (x.job != y.job)
    return x.job < y.job;
  return x.index < y.index;
}

// -- cluster_spec -------------------------------------------------------------

std::vector<std::string> default_cluster_jobs() {
  return {"chief", "worker", "ps", "covariance", "inverse", "evaluator"};
}

int32_t cluster_spec::count(const std::string& job) const {
  auto i = jobs.find(job);
  return i == jobs.end() ? 0 : static_cast<int32_t>(i->second.size());
}

task_id cluster_spec::chief_task() const {
  if (count("chief") > 0)
    return {"chief", 0};
  return {"worker", 0};
}

bool cluster_spec::contains(const task_id& t) const {
  return t.index >= 0 && t.index < count(t.job);
}

const host_port& cluster_spec::address(const task_id& t) const {
  return jobs.at(t.job).at(static_cast<size_t>(t.index));
}

std::vector<task_id> cluster_spec::tasks() const {
  std::vector<task_id> result;
  for (const auto& job : ordered_jobs(*this)) {
    auto n = count(job);
    for (int32_t i = 0; i < n; ++i)
      result.push_back(task_id{job, i});
  }
  return result;
}

caf::error
cluster_spec::validate(const std::vector<std::string>& known_jobs) const {
  auto names = ordered_jobs(*this);
  for (const auto& job : names)
    if (std::find(known_jobs.begin(), known_jobs.end(), job)
        == known_jobs.end())
      return config_error("cluster." + job + ": unknown job " + jquote(job)
                          + " (known: " + join(known_jobs) + ")");
  std::map<std::string, std::string> seen; // address key -> entry name
  for (const auto& job : names) {
    const auto& addresses = jobs.at(job);
    for (size_t i = 0; i < addresses.size(); ++i) {
      const auto& hp = addresses[i];
      auto entry = entry_name(job, i) + " " + jquote(hp.str());
      if (hp.host.empty())
        return config_error(entry + ": empty host");
      if (hp.port == 0)
        return config_error(entry + ": port out of range (1..65535)");
      auto [pos, added] = seen.emplace(address_key(hp), entry);
      if (!added)
        return config_error(entry + ": duplicate address, already used by "
                            + pos->second);
    }
  }
  auto chiefs = count("chief");
  if (jobs.count("chief") == 0 && count("worker") == 0)
    return config_error("cluster: no \"chief\" job and no \"worker\" job "
                        "(one chief, or worker 0 as the chief, is required, "
                        "e.g. \"chief\": [\"localhost:47000\"])");
  if (jobs.count("chief") > 0 && chiefs != 1)
    return config_error("cluster.chief: " + std::to_string(chiefs)
                        + (chiefs == 1 ? " entry" : " entries")
                        + " (one chief at most; without one, worker 0 is "
                          "the chief)");
  if (task)
    return validate_task(*this, known_jobs);
  return caf::none;
}

std::string cluster_spec::to_json() const {
  json cluster = json::object();
  for (const auto& job : ordered_jobs(*this)) {
    json addresses = json::array();
    for (const auto& hp : jobs.at(job))
      addresses.push_back(hp.str());
    cluster[job] = std::move(addresses);
  }
  json doc = json::object();
  doc["cluster"] = std::move(cluster);
  if (task)
    doc["task"] = json{{"type", task->job}, {"index", task->index}};
  // A task set from a command line may not be UTF-8 (validate() refuses
  // it; to_json must not throw on it).
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

caf::expected<cluster_spec> cluster_spec::parse(const std::string& json_text,
                                                const std::string& source) {
  return parse_and_validate(json_text, source, default_cluster_jobs());
}

caf::expected<cluster_spec> cluster_spec::load(const std::string& path) {
  auto text = read_file(path);
  if (!text)
    return text.error();
  return parse(*text, path);
}

bool cluster_spec::task_outside_cluster() const {
  return task && task->job == "evaluator" && count("evaluator") == 0;
}

bool operator==(const cluster_spec& x, const cluster_spec& y) {
  return x.jobs == y.jobs && x.task == y.task;
}

std::string cluster_source_name(const std::string& source) {
  if (source == "TF_CONFIG")
    return "TF_CONFIG";
  return "cluster file '" + source + "'";
}

caf::expected<cluster_spec>
resolve_cluster(const std::string& cluster_file, const std::string& job_name,
                int32_t task, const std::vector<std::string>& known_jobs) {
  return resolve_cluster(cluster_file, job_name, task, scheduler_options{},
                         known_jobs);
}

caf::expected<cluster_spec>
resolve_cluster(const std::string& cluster_file, const std::string& job_name,
                int32_t task, const scheduler_options& launcher,
                const std::vector<std::string>& known_jobs) {
  // The sources in order: --cluster, TF_CONFIG, Slurm, MPI
  // (docs/distributed.md, "Where the cluster comes from").
  std::string name;
  caf::expected<cluster_spec> spec{cluster_spec{}};
  const char* tf_config = std::getenv("TF_CONFIG");
  if (!cluster_file.empty() || (tf_config != nullptr && *tf_config != '\0')) {
    std::string source;
    std::string text;
    if (!cluster_file.empty()) {
      source = cluster_file;
      auto contents = read_file(cluster_file);
      if (!contents)
        return contents.error();
      text = std::move(*contents);
    } else {
      source = "TF_CONFIG";
      text = tf_config;
    }
    name = cluster_source_name(source);
    if (launcher.any())
      return config_error(name + ": --layout, --port_base and --hosts "
                                 "apply only to a cluster derived from srun "
                                 "or mpirun, not to a cluster spec");
    std::vector<std::string> notes;
    spec = parse_syntax(text, &notes);
    if (!spec)
      return with_context(spec.error(), name);
    for (const auto& note : notes)
      std::cerr << name << ": " << note << std::endl;
  } else {
    auto derived = cluster_from_scheduler(current_environment(), launcher);
    if (!derived)
      return derived.error();
    if (!*derived)
      return config_error("no cluster: give --cluster FILE or set the "
                          "TF_CONFIG environment variable, or start the "
                          "program with srun or mpirun");
    name = (*derived)->source;
    spec = std::move((*derived)->spec);
  }
  // Check the cluster itself before the overrides, so that its errors do
  // not read as if the flags caused them.
  auto file_task = spec->task;
  spec->task.reset();
  if (auto err = spec->validate(known_jobs))
    return with_context(err, name);
  std::string flags;
  if (!job_name.empty())
    flags += " --job_name " + job_name;
  if (task >= 0)
    flags += " --task " + std::to_string(task);
  if (flags.empty()) {
    if (!file_task)
      return config_error(name + ": no task: give --job_name and --task, or "
                                 "\"task\": {\"type\": ..., \"index\": ...}");
    spec->task = file_task;
  } else {
    if (job_name.empty() && !file_task)
      return config_error(name + " with" + flags
                          + ": no job: give --job_name too (the cluster "
                            "spec has no \"task\")");
    if (task < 0 && !file_task)
      return config_error(name + " with" + flags
                          + ": no task index: give --task too (the cluster "
                            "spec has no \"task\")");
    spec->task = task_id{job_name.empty() ? file_task->job : job_name,
                         task >= 0 ? task : file_task->index};
    name += " with" + flags;
  }
  if (auto err = spec->validate(known_jobs))
    return with_context(err, name);
  return spec;
}

} // namespace syncfac
