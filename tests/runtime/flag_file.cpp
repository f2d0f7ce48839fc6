#define BOOST_TEST_MODULE runtime_flag_file
#include <boost/test/unit_test.hpp>

// The pure parts of the command line: edit distance, the closest flag to a
// typo, and the INI-style --config-file. The programs' command lines are
// tested as real processes in tests/observability/command_line.sh.

#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/flag_file.hpp"

using namespace syncfac;

BOOST_AUTO_TEST_CASE(edit_distance_counts_single_character_edits) {
  BOOST_TEST(edit_distance("", "") == 0u);
  BOOST_TEST(edit_distance("steps", "steps") == 0u);
  BOOST_TEST(edit_distance("stepz", "steps") == 1u);
  BOOST_TEST(edit_distance("bach_size", "batch_size") == 1u);
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(edit_distance("", "abc") == 3u);
}

BOOST_AUTO_TEST_CASE(the_closest_name_is_a_likely_typo_or_nothing) {
  std::vector<std::string> flags{"steps", "batch_size", "seed", "optimizer"};
  BOOST_TEST(closest_name("stepz", flags) == "steps");
  BOOST_TEST(closest_name("optimiser", flags) == "optimizer");
  BOOST_TEST(closest_name("bach_size", flags) == "batch_size");
  BOOST_TEST(closest_name("completely_different", flags).empty());
  BOOST_TEST(closest_name("x", {}).empty());
}

BOOST_AUTO_TEST_CASE(a_flag_file_has_settings_sections_and_comments) {
  auto s = parse_flag_file("# comment\n"
                           "steps = 400\n"
                           "  optimizer=kfac   ; why\n"
                           "\n"
                           "data_dir = \"/a b/#c\"\n"
                           "--seed = 3\n"
                           "[scheduler]\n"
                           "max-threads = 2\n"
                           "[global]\n"
                           "fake_data = true\n",
                           "f.ini");
  BOOST_REQUIRE(s);
  BOOST_REQUIRE_EQUAL(s->size(), 6u);
  BOOST_TEST((*s)[0].name == "steps");
  BOOST_TEST((*s)[0].value == "400");
  BOOST_TEST((*s)[0].line == 2u);
  BOOST_TEST((*s)[1].value == "kfac");
  BOOST_TEST((*s)[2].value == "/a b/#c");
  BOOST_TEST((*s)[3].name == "seed");
  BOOST_TEST((*s)[4].name == "scheduler.max-threads");
  BOOST_TEST((*s)[5].name == "fake_data");
}

BOOST_AUTO_TEST_CASE(a_malformed_line_is_named_by_file_and_line) {
  auto s = parse_flag_file("steps = 1\njust words\n", "run.ini");
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("run.ini:2") != std::string::npos);
  auto t = parse_flag_file("[broken\n", "run.ini");
  BOOST_REQUIRE(!t);
  BOOST_TEST(render(t.error()).find("run.ini:1") != std::string::npos);
}
