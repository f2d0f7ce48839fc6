// What may skip (docs/testing.md, "Skips"): a suite skips only before its
// first case and only for hardware the machine lacks, through
// tests/hardware_skip.hpp (or tests/capped.sh, the capped entries' runner).
// Read from the source tree: a test that exits 77 elsewhere, a case that
// skips itself through a Boost precondition or a disabled decorator, or a
// new caller of the skip that is no suite's main or global fixture fails
// here, naming the file and the line.

#define BOOST_TEST_MODULE tree_skips
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path source_dir{SYNCFAC_SOURCE_DIR};

/// A line of a file under tests/ that matched.
struct hit {
  std::string file;
  int line = 0;
  std::string text;
};

/// Every line of every text file under tests/ that matches `pattern`.
std::vector<hit> lines_matching(const std::regex& pattern) {
  std::vector<hit> result;
  for (auto& e : fs::recursive_directory_iterator(source_dir / "tests")) {
    if (!e.is_regular_file())
      continue;
    auto ext = e.path().extension().string();
    auto name = e.path().filename().string();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".sh" && ext != ".py"
        && name != "CMakeLists.txt")
      continue;
    std::ifstream in{e.path()};
    std::string text;
    for (int n = 1; std::getline(in, text); ++n)
      if (std::regex_search(text, pattern))
        result.push_back(
          {fs::relative(e.path(), source_dir).generic_string(), n, text});
  }
  return result;
}

/// Fails for each hit outside `allowed`, naming it.
void check_only_in(const std::vector<hit>& hits,
                   const std::set<std::string>& allowed,
                   const std::string& why) {
  for (const auto& h : hits)
    BOOST_CHECK_MESSAGE(allowed.count(h.file) == 1,
                        h.file << ":" << h.line << ": " << why << ": "
                               << h.text);
}

} // namespace

BOOST_AUTO_TEST_CASE(only_the_hardware_skip_exits_77) {
  // exit(77), exit 77, sys.exit(77), return 77, SKIP = 77: what CTest
  // counts as skipped. The property that lets an entry skip is no skip
  // by itself, so CMake files may name it.
  static const std::regex exits_77{
    R"((exit\s*\(?\s*77\b|return\s+77\b|SKIP\w*\s*=\s*77\b))"};
  auto hits = lines_matching(exits_77);
  // skip_report.py holds CTest's report of a skip as test data.
  check_only_in(hits, {"tests/hardware_skip.hpp", "tests/capped.sh",
                       "tests/tree/skips.cpp", "tests/tree/skip_report.py"},
                "a test skips only through tests/hardware_skip.hpp");
  // The two that may, do (a change of this file's patterns that matched
  // nothing would pass silently otherwise).
  std::set<std::string> files;
  for (const auto& h : hits)
    files.insert(h.file);
  BOOST_TEST(files.count("tests/hardware_skip.hpp") == 1);
  BOOST_TEST(files.count("tests/capped.sh") == 1);
}

BOOST_AUTO_TEST_CASE(the_skip_is_called_only_before_the_first_case) {
  // A suite's main (the CUDA suites, the bfloat16 one) or its global fixture
  // (the instruction-set levels): before any case runs.
  static const std::regex calls{R"(\bskip_for_missing\s*\()"};
  auto hits = lines_matching(calls);
  check_only_in(hits,
                {"tests/hardware_skip.hpp", "tests/kernels/cuda_test_utils.hpp",
                 "tests/kernels/bf16_gemm.cpp", "tests/kernels/isa_fixture.hpp",
                 "tests/tree/skips.cpp"},
                "skip_for_missing outside a suite's main or global fixture");
  BOOST_TEST(hits.size() >= 4u);
}

BOOST_AUTO_TEST_CASE(no_case_skips_itself) {
  // Boost's precondition and disabled decorators report a case as
  // skipped inside a passing suite: nobody reads that.
  static const std::regex decorators{
    R"(unit_test::(precondition|disabled|enable_if)\b)"};
  check_only_in(lines_matching(decorators), {"tests/tree/skips.cpp"},
                "a case that skips itself");
}
