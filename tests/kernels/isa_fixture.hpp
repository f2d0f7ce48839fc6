#pragma once

// Runs a kernel suite at the instruction-set level SYNCFAC_TEST_ISA names
// (kernels/cpu/isa.hpp), so that CTest runs the same checks once per level
// (tests/kernels/CMakeLists.txt, syncfac_add_isa_levels). Unset: the
// start-up choice. "lowest": the baseline. A level this CPU lacks skips the
// suite (tests/hardware_skip.hpp); a name the build does not have fails the suite.

#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/test/unit_test.hpp>

#include "kernels/cpu/isa.hpp"
#include "runtime/base/error.hpp"
#include "tests/hardware_skip.hpp"

namespace syncfac::test {

struct isa_from_environment {
  isa_from_environment() {
    const char* wanted = std::getenv("SYNCFAC_TEST_ISA");
    if (wanted == nullptr || *wanted == '\0')
      return;
    std::string name = wanted;
    if (name == "lowest")
      name = cpu::built_isas().front();
    auto err = cpu::select_isa(name);
    if (err && err.category() == error_category
        && err.code() == static_cast<uint8_t>(ec::unavailable)) {
      skip_for_missing(missing_hardware::cpu_level,
                       "SYNCFAC_TEST_ISA=" + name + ": " + render(err));
    }
    if (err) {
      std::cerr << "SYNCFAC_TEST_ISA=" << name << ": " << render(err) << "\n";
      std::exit(EXIT_FAILURE);
    }
    std::cerr << "kernels at instruction-set level " << cpu::isa_name()
              << "\n";
  }
};

BOOST_TEST_GLOBAL_FIXTURE(isa_from_environment);

} // namespace syncfac::test
