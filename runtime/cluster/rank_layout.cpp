#include "runtime/cluster/rank_layout.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac {

namespace {

caf::error bad_layout(const std::string& layout, const std::string& what) {
  return make_error(ec::invalid_config,
                    "--layout " + in_quotes(layout) + ": " + what);
}

} // namespace

std::vector<std::string> rank_layout_jobs() {
  return {"chief", "ps", "covariance", "inverse", "worker"};
}

caf::expected<std::vector<task_id>>
assign_ranks(const std::string& given, int32_t ranks,
             const std::string& ranks_source) {
  auto layout = given.empty() ? std::string{default_rank_layout} : given;
  auto jobs = rank_layout_jobs();
  std::map<std::string, int32_t> counts{{"chief", 1}};
  std::map<std::string, bool> seen;
  for (const auto& item : comma_items(layout)) {
    auto eq = item.find('=');
    auto job = item.substr(0, eq);
    auto count = eq == std::string::npos ? std::string{} : item.substr(eq + 1);
    if (eq == std::string::npos || job.empty() || count.empty()
        || count.size() > 6
        || !std::all_of(count.begin(), count.end(),
                        [](unsigned char c) { return std::isdigit(c); }))
      return bad_layout(layout, "bad entry " + in_quotes(item)
                                  + " (expected JOB=COUNT, e.g. "
                                    "chief=1,ps=2)");
    if (std::find(jobs.begin(), jobs.end(), job) == jobs.end())
      return bad_layout(layout, "unknown job " + in_quotes(job)
                                  + " (known: " + comma_joined(jobs) + ")");
    if (seen[job])
      return bad_layout(layout, "job " + in_quotes(job) + " given twice");
    seen[job] = true;
    counts[job] = static_cast<int32_t>(std::stol(count));
  }
  // chief=0: no chief task, worker 0 is the chief (cluster_spec::
  // chief_task), as in TensorFlow and the seeds' cluster.
  if (counts["chief"] > 1)
    return bad_layout(layout, "chief=" + std::to_string(counts["chief"])
                                + ": a cluster has one chief at most "
                                  "(chief=0: worker 0 is the chief)");
  int64_t fixed = 0;
  for (const auto& job : jobs)
    if (job != "worker")
      fixed += counts[job];
  auto rest = int64_t{ranks} - fixed;
  if (rest < 1)
    return bad_layout(layout, "does not fit " + std::to_string(ranks)
                                + " ranks (" + ranks_source + "): it needs "
                                + std::to_string(fixed)
                                + " ranks before the workers and leaves "
                                  "no worker (needs "
                                + std::to_string(fixed + 1)
                                + " ranks at least)");
  if (seen["worker"] && counts["worker"] != rest)
    return bad_layout(layout, "worker=" + std::to_string(counts["worker"])
                                + " but " + std::to_string(ranks)
                                + " ranks (" + ranks_source + ") leave "
                                + std::to_string(rest)
                                + " for the workers");
  counts["worker"] = static_cast<int32_t>(rest);
  std::vector<task_id> result;
  for (const auto& job : jobs)
    for (int32_t i = 0; i < counts[job]; ++i)
      result.push_back(task_id{job, i});
  return result;
}

std::vector<int32_t>
local_ranks(const std::vector<std::string>& host_of_rank) {
  std::map<std::string, int32_t> on_host;
  std::vector<int32_t> result;
  for (const auto& host : host_of_rank)
    result.push_back(on_host[host]++);
  return result;
}

caf::expected<cluster_spec>
cluster_of_ranks(const std::vector<std::string>& host_of_rank,
                 const std::vector<task_id>& task_of_rank,
                 int32_t port_base) {
  if (host_of_rank.size() != task_of_rank.size())
    return make_error(ec::internal, "cluster_of_ranks: "
                                      + std::to_string(host_of_rank.size())
                                      + " hosts for "
                                      + std::to_string(task_of_rank.size())
                                      + " tasks");
  auto local = local_ranks(host_of_rank);
  auto most = local.empty() ? 0 : *std::max_element(local.begin(),
                                                    local.end());
  if (port_base < 1 || int64_t{port_base} + most > 65535)
    return make_error(ec::invalid_config,
                      "--port_base " + std::to_string(port_base)
                        + ": ports " + std::to_string(port_base) + ".."
                        + std::to_string(int64_t{port_base} + most)
                        + " do not fit 1..65535 ("
                        + std::to_string(most + 1)
                        + " ranks on one host)");
  cluster_spec spec;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    const auto& t = task_of_rank[r];
    auto& addresses = spec.jobs[t.job];
    if (addresses.size() != static_cast<size_t>(t.index))
      return make_error(ec::internal, "cluster_of_ranks: tasks out of order "
                                      "at " + t.str());
    addresses.push_back(host_port{host_of_rank[r],
                                  static_cast<uint16_t>(port_base
                                                        + local[r])});
  }
  return spec;
}

} // namespace syncfac
