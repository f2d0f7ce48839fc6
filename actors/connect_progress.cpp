#include "actors/connect_progress.hpp"

#include <algorithm>

#include "runtime/base/error.hpp"

namespace syncfac {

bool connect_progress::done() const {
  return missing().empty();
}

std::vector<task_id> connect_progress::missing() const {
  std::vector<task_id> out;
  for (const auto& t : peers)
    if (reached.count(t.str()) == 0
        && std::find(out.begin(), out.end(), t) == out.end())
      out.push_back(t);
  return out;
}

void connect_progress::failed(const task_id& task, std::string why) {
  last_error[task.str()] = std::move(why);
}

std::string
connect_progress::describe_missing(const cluster_spec& cluster) const {
  std::string out;
  for (const auto& t : missing()) {
    auto i = last_error.find(t.str());
    out += (out.empty() ? "" : ", ") + t.str() + " at "
           + cluster.address(t).str() + " ("
           + (i == last_error.end() ? std::string{"no answer yet"}
                                    : i->second)
           + ")";
  }
  return out;
}

std::string connect_progress::waiting_line(const std::string& me,
                                           const cluster_spec& cluster,
                                           std::chrono::seconds waited) const {
  return me + ": waiting for " + describe_missing(cluster) + " since "
         + std::to_string(waited.count()) + " s";
}

caf::error connect_progress::timed_out(const cluster_spec& cluster,
                                       std::chrono::seconds waited) const {
  return make_error(ec::timeout, "peers not reachable after "
                                   + std::to_string(waited.count()) + " s: "
                                   + describe_missing(cluster));
}

std::vector<node_info> connect_progress::answers() const {
  std::vector<node_info> out;
  for (const auto& t : peers)
    out.push_back(reached.at(t.str()));
  return out;
}

bool is_final_refusal(const caf::error& err) {
  return err.category() == error_category
         && (err.code() == static_cast<uint8_t>(ec::bad_message)
             || err.code() == static_cast<uint8_t>(ec::invalid_config));
}

} // namespace syncfac
