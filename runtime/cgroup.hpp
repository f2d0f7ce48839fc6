#pragma once

// This process's cgroups (/proc/self/cgroup) and the directories whose
// limits bound it: its own group's and each parent's, in cgroup v2's
// unified hierarchy and in the v1 hierarchy of a controller (hosts still
// on cgroup v1, as Docker and Kubernetes nodes before v2 are). The CPU
// share (runtime/cpu_share.hpp) and the memory limit
// (runtime/host_limits.hpp) read their files there.

#include <string>
#include <vector>

namespace syncfac {

/// A directory of a cgroup that bounds this process.
struct cgroup_dir {
  /// Where its files are ("/sys/fs/cgroup/cpu,cpuacct/a/b").
  std::string path;
  /// The group, as /proc/self/cgroup names it ("/a/b").
  std::string group;
  /// In the unified (v2) hierarchy, else in the controller's v1 one.
  bool v2 = false;
};

/// The parents of a cgroup path, itself first, up to "/".
std::vector<std::string> cgroup_chain(std::string group);

/// The directories bounding this process for `controller` ("cpu",
/// "memory"): v2's where the unified hierarchy is mounted (/sys/fs/cgroup,
/// or /sys/fs/cgroup/unified on a hybrid host), then v1's where the
/// controller is on a v1 hierarchy (/sys/fs/cgroup/<its controllers>, e.g.
/// cpu,cpuacct, or /sys/fs/cgroup/<controller>); in each, its own group
/// first, then the parents (a parent's limit holds for its children).
std::vector<cgroup_dir> cgroup_dirs(const std::string& controller);

} // namespace syncfac
