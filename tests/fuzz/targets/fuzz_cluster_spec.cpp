// libFuzzer target: the cluster file parser (runtime/cluster/
// cluster_spec.*) on arbitrary text, the host:port and job:index parsers
// it uses, and the parsers of a launcher's environment: Slurm's host lists
// and task counts (slurm_lists.*) and --layout (rank_layout.*).
//
// A spec that parse() accepts is valid by its contract, and its to_json()
// parses back to an equal spec (docs/cluster.md); an accepted address or
// task prints back to itself. Refusals are fine; crashes, uncaught
// exceptions (nlohmann's) and hangs are not.

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/cluster/rank_layout.hpp"
#include "runtime/cluster/slurm_lists.hpp"

namespace {

using namespace syncfac;

[[noreturn]] void broken() {
  __builtin_trap();
}

void whole_file(const std::string& text) {
  auto spec = cluster_spec::parse(text, "fuzz.json");
  if (!spec)
    return;
  if (spec->validate())
    broken();
  auto again = cluster_spec::parse(spec->to_json(), "fuzz.json");
  if (!again || !(*again == *spec))
    broken();
}

// An accepted T (host_port, task_id) prints back to itself.
template <class T>
void prints_back(const std::string& text) {
  auto x = T::parse(text);
  if (!x)
    return;
  auto again = T::parse(x->str());
  if (!again || *again != *x)
    broken();
}

// An expanded list is never empty and holds no empty name; a layout that
// fits gives every rank a task.
void launcher_lists(const std::string& text) {
  auto hosts = expand_slurm_hostlist("SLURM_JOB_NODELIST", text);
  if (hosts && (hosts->empty() || hosts->front().empty()))
    broken();
  auto counts = expand_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", text);
  if (counts && counts->empty())
    broken();
  auto tasks = assign_ranks(text, 8, "8 ranks");
  if (tasks && tasks->size() != 8)
    broken();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  whole_file(text);
  prints_back<host_port>(text);
  prints_back<task_id>(text);
  launcher_lists(text);
  return 0;
}
