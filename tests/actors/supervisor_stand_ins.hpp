#pragma once

// Stand-ins shared by the supervisors' deterministic suites
// (tests/actors/supervisor.cpp, tests/actors/supervisor_chief.cpp): the
// test scheduler's configuration (tests/test_scheduler.hpp), an actor that only exists, a
// connector answering what a test scripts (or holding the request while
// the task is frozen), and the node information of a task.

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include "actors/node.hpp"
#include "messages/atoms.hpp"
#include "messages/cluster_messages.hpp"
#include "runtime/cluster/cluster_spec.hpp"
#include "tests/test_scheduler.hpp"

namespace syncfac::testing {

/// The programs' configuration on CAF's test scheduler.
using test::testing_config;

/// An actor that only exists (a node actor, a shard, a covariance actor).
inline caf::behavior stand_in(caf::event_based_actor*) {
  return {[](int32_t) {}};
}

/// What the connectors answer, per task: node information, an error, or
/// nothing yet (the task is frozen: the request is held until the test
/// thaws it or the supervisor's timeout ends it).
struct connect_script {
  struct answer {
    std::optional<node_info> info;
    caf::error err;
  };
  std::map<std::string, std::deque<answer>> answers;
  std::map<std::string, int> asked;
};

inline caf::behavior stand_in_connector(caf::event_based_actor* self,
                                 std::shared_ptr<connect_script> s) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [=](connect_atom, const std::string& task) -> caf::result<node_info> {
      ++s->asked[task];
      auto& q = s->answers[task];
      if (q.empty()) {
        held->push_back(self->make_response_promise());
        return caf::delegated<node_info>{};
      }
      auto a = q.front();
      q.pop_front();
      if (a.info)
        return *a.info;
      return a.err;
    },
    // The test thaws the task: the held request is answered.
    [=](caf::ok_atom, const node_info& info) {
      for (auto& rp : *held)
        rp.deliver(info);
      held->clear();
    },
  };
}

inline node_info info_of(const std::string& task, const caf::actor& node,
                  std::vector<std::pair<std::string, caf::actor>> roles) {
  auto t = task_id::parse(task);
  node_info info;
  info.job = t->job;
  info.index = t->index;
  info.role_names.push_back("node");
  info.role_actors.push_back(node);
  for (auto& [name, a] : roles) {
    info.role_names.push_back(name);
    info.role_actors.push_back(a);
  }
  return info;
}

/// One task as the node of a cluster sees it: its node actor and roles.
struct task_stand_in {
  std::string task;
  caf::actor node;
  std::vector<std::pair<std::string, caf::actor>> roles;

  node_info info() const {
    return info_of(task, node, roles);
  }

  caf::actor role(size_t i = 0) const {
    return roles.at(i).second;
  }
};

} // namespace syncfac::testing
