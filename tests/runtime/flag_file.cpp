#define BOOST_TEST_MODULE runtime_flag_file
#include <boost/test/unit_test.hpp>

// The pure parts of the command line: edit distance, the closest flag to a
// typo, and the INI-style --config-file. The programs' command lines are
// tested as real processes in tests/observability/command_line.sh.

#include <cmath>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/flag_file.hpp"
#include "runtime/flag_range.hpp"

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

BOOST_AUTO_TEST_CASE(a_line_of_flags_reads_as_the_command_line) {
  // examples/main_job/*.flags: one line of flags as on the command line.
  auto s = parse_flag_file("# the main job\n"
                           "--optimizer kfac --learning_rate 0.0003 "
                           "--fake_data --steps=800 --data_dir \"/a b\"\n"
                           "--seed = 3\n"
                           "--no_progress\n",
                           "job.flags");
  BOOST_REQUIRE(s);
  BOOST_REQUIRE_EQUAL(s->size(), 7u);
  auto at = [&](size_t i) { return (*s)[i]; };
  BOOST_TEST(at(0).name == "optimizer");
  BOOST_TEST(at(0).value == "kfac");
  BOOST_TEST(!at(0).bare);
  BOOST_TEST(at(0).line == 2u);
  BOOST_TEST(at(1).name == "learning_rate");
  BOOST_TEST(at(1).value == "0.0003");
  BOOST_TEST(at(2).name == "fake_data");
  BOOST_TEST(at(2).bare);
  BOOST_TEST(at(3).name == "steps");
  BOOST_TEST(at(3).value == "800");
  BOOST_TEST(at(4).name == "data_dir");
  BOOST_TEST(at(4).value == "/a b");
  // "--seed = 3" is the INI setting, as before.
  BOOST_TEST(at(5).name == "seed");
  BOOST_TEST(at(5).value == "3");
  BOOST_TEST(!at(5).bare);
  BOOST_TEST(at(6).name == "no_progress");
  BOOST_TEST(at(6).bare);
  // A negative number is a value, not a flag.
  auto neg = parse_flag_file("--learning_rate -3\n", "f");
  BOOST_REQUIRE(neg);
  BOOST_TEST(neg->at(0).value == "-3");
}

BOOST_AUTO_TEST_CASE(a_bad_line_of_flags_is_refused_naming_the_line) {
  auto stray = parse_flag_file("\n--steps 10 20\n", "job.flags");
  BOOST_REQUIRE(!stray);
  BOOST_TEST(render(stray.error()).find(
               "job.flags:2: expected a flag (--name), got '20'")
             != std::string::npos,
             render(stray.error()));
  auto quote = parse_flag_file("--data_dir \"/a b\n", "job.flags");
  BOOST_REQUIRE(!quote);
  BOOST_TEST(render(quote.error()).find("job.flags:1: a quote is not "
                                            "closed")
             != std::string::npos);
  auto in_section = parse_flag_file("[scheduler]\n--steps 3\n", "f");
  BOOST_REQUIRE(!in_section);
  BOOST_TEST(render(in_section.error()).find("inside section [scheduler]")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_flag_range_says_what_a_value_must_be) {
  BOOST_TEST(positive().text() == "> 0");
  BOOST_TEST(positive().refusal(-3) == "must be > 0");
  BOOST_TEST(positive().refusal(0) == "must be > 0");
  BOOST_TEST(positive().refusal(1e-9).empty());
  BOOST_TEST(at_least(1).text() == ">= 1");
  BOOST_TEST(at_least(1).refusal(0) == "must be >= 1");
  BOOST_TEST(at_least(1).refusal(1).empty());
  BOOST_TEST(at_least(-1).refusal(-1).empty());
  BOOST_TEST(between(0, 65535).text() == "0 to 65535");
  BOOST_TEST(between(0, 65535).refusal(65536) == "must be 0 to 65535");
  BOOST_TEST(between(0, 65535).refusal(0).empty());
  BOOST_TEST(between(2, 1 << 24).text() == "2 to 16777216");
  BOOST_TEST(decay_fraction().text() == ">= 0 and < 1");
  BOOST_TEST(decay_fraction().refusal(1) == "must be >= 0 and < 1");
  BOOST_TEST(decay_fraction().refusal(0.95).empty());
  BOOST_TEST(decay_fraction().refusal(-0.1) == "must be >= 0 and < 1");
  BOOST_TEST(positive().refusal(std::nan("")) == "must be > 0");
  BOOST_TEST(flag_range{}.text() == "any number");
}
