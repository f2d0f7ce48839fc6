#pragma once

// The one way a suite skips: it exits 77 (CTest's SKIP_RETURN_CODE, see
// tests/CMakeLists.txt) before its first case, because this machine lacks
// the hardware the whole suite is about: a GPU, or a CPU instruction-set
// level (AVX-512, AMX). A missing tool is never a reason: the tools come
// from scripts/install-deps.sh, and a test that cannot find one fails.
//
// The line printed here is what scripts/test.sh's closing block reports for
// the entry (scripts/skipped_tests.py); a skip without it fails the run.
// tests/tree/skips.cpp checks that no other file of tests/ exits 77.

#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/test/framework.hpp>
#include <boost/test/tree/test_unit.hpp>

namespace syncfac::test {

/// What a machine may lack for a suite to skip.
enum class missing_hardware { gpu, cpu_level };

/// The marker of the skip line: scripts/skipped_tests.py matches it.
inline constexpr const char* hardware_skip_marker = "syncfac-skip";

/// Exits 77 naming what this machine lacks (`what`); called from a suite's
/// main or a global fixture. Inside a case it fails the suite instead: a
/// skip there would hide the cases before it and drop the ones after it.
[[noreturn]] inline void skip_for_missing(missing_hardware kind,
                                          const std::string& what) {
  namespace ut = boost::unit_test;
  auto running = ut::framework::current_test_case_id();
  if (running != ut::INV_TEST_UNIT_ID
      && ut::ut_detail::test_id_2_unit_type(running) == ut::TUT_CASE) {
    std::cerr << "a suite may skip only before its first case, and "
              << ut::framework::current_test_case().full_name()
              << " is running (it wanted to skip: " << what << ")"
              << std::endl;
    std::exit(EXIT_FAILURE);
  }
  std::cout << hardware_skip_marker << " ("
            << (kind == missing_hardware::gpu ? "GPU" : "CPU level")
            << "): " << what << std::endl;
  std::exit(77);
}

} // namespace syncfac::test
