#include "runtime/cgroup.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/comma_list.hpp"

namespace syncfac {

std::vector<std::string> cgroup_chain(std::string group) {
  std::vector<std::string> chain;
  while (!group.empty()) {
    chain.push_back(group);
    if (group == "/")
      break;
    auto slash = group.find_last_of('/');
    group = slash == 0 || slash == std::string::npos ? "/"
                                                     : group.substr(0, slash);
  }
  return chain;
}

std::vector<cgroup_dir> cgroup_dirs(const std::string& controller) {
  namespace fs = std::filesystem;
  std::vector<cgroup_dir> result;
  auto add = [&](const std::string& root, const std::string& group, bool v2) {
    for (const auto& g : cgroup_chain(group))
      result.push_back({root + (g == "/" ? std::string{} : g), g, v2});
  };
  std::ifstream in{"/proc/self/cgroup"};
  for (std::string line; std::getline(in, line);) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos)
      continue;
    auto controllers = line.substr(first + 1, second - first - 1);
    auto group = line.substr(second + 1);
    if (controllers.empty()) {
      for (std::string root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
        if (fs::exists(root + "/cgroup.controllers")) {
          add(root, group, true);
          break;
        }
      continue;
    }
    auto names = comma_items(controllers);
    if (std::find(names.begin(), names.end(), controller) == names.end())
      continue;
    for (auto root : {"/sys/fs/cgroup/" + controllers,
                      "/sys/fs/cgroup/" + controller})
      if (fs::is_directory(root)) {
        add(root, group, false);
        break;
      }
  }
  return result;
}

} // namespace syncfac
