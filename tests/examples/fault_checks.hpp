#pragma once

// What the fault suites (faults.cpp, fault_digests.cpp) share: the
// launcher's command line for a cluster run with fault flags, and checks
// of what the run said and of its summary, the account of updates first.

#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "tests/examples/process.hpp"

namespace syncfac::test {

/// syncfac-launch running convnet_mnist_distributed on `cluster` with the
/// launcher's `faults` and the program's `flags`, for 300 s at most, each
/// node waiting a minute for its connections; the chief writes its
/// summary to `summary`.
inline std::string fault_run_command(const std::string& cluster,
                                     const std::string& faults,
                                     const std::string& flags,
                                     const std::string& summary) {
  return bin + "syncfac-launch --cluster " + cluster + " --program " + bin
         + "convnet_mnist_distributed --max_wall_s 300 " + faults + " -- "
         + flags + " --connect_timeout_ms 60000 --summary " + summary;
}

/// `output` contains every one of `texts`.
inline void check_said(const std::string& output,
                       const std::vector<std::string>& texts) {
  for (const auto& text : texts)
    BOOST_TEST(said(output, text), "no '" << text << "' in the output");
}

/// The account of updates: inherited + applied - rolled back is the
/// final step, every update a rollback threw away was applied again, and
/// the chief's count of the steps it did again says the same. Returns
/// the updates rolled back.
inline double check_account(const std::string& summary) {
  auto step = number(summary, "global_step");
  auto inherited = number(summary, "updates_inherited");
  auto applied = number(summary, "updates_applied");
  auto back = number(summary, "updates_rolled_back");
  BOOST_TEST(inherited + applied - back == step,
             "inherited " << inherited << " + applied " << applied
                          << " - rolled back " << back << " vs global step "
                          << step);
  BOOST_TEST(number(summary, "updates_redone") == back);
  BOOST_TEST(number(summary, "rolled_back_steps") == back);
  return back;
}

} // namespace syncfac::test
