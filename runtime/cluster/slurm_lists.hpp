#pragma once

// Slurm's two list syntaxes, as its environment variables write them:
//
//   host lists (SLURM_JOB_NODELIST):   "node[01-04,07]", "a[1-2],b3",
//                                      "n[001-003]x", "r[1-2]n[1-2]"
//   task counts (SLURM_TASKS_PER_NODE): "2(x3),1"
//
// Pure functions; docs/distributed.md ("Under Slurm") describes them. Errors are
// ec::invalid_config naming `variable` and its value.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace syncfac {

/// Expands a Slurm host list: comma-separated names, each with any number
/// of bracket groups of numbers and ranges ("01-04"); a range keeps the
/// width of its lower bound ("n[08-10]" is n08 n09 n10). Several groups
/// multiply, the first varying slowest ("r[1-2]n[1-2]" is r1n1 r1n2 r2n1
/// r2n2). Refused: an empty list or name, an unbalanced bracket, an empty
/// or non-numeric group entry, a reversed range ("[5-2]").
caf::expected<std::vector<std::string>>
expand_slurm_hostlist(const std::string& variable, const std::string& value);

/// Expands Slurm's task counts per node: comma-separated counts, each
/// optionally repeated ("2(x3)" is 2,2,2). Every count must be >= 1.
caf::expected<std::vector<int32_t>>
expand_slurm_tasks_per_node(const std::string& variable,
                            const std::string& value);

} // namespace syncfac
