#define BOOST_TEST_MODULE launch_options
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/cluster/cluster_spec.hpp"
#include "runtime/base/error.hpp"
#include "runtime/launch/launcher.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
namespace fs = std::filesystem;

namespace {

using args = std::vector<std::string>;

cluster_spec small_cluster() {
  auto spec = cluster_spec::parse(
    R"({"cluster": {"chief": ["localhost:47900"],
                    "worker": ["localhost:47901", "localhost:47902"],
                    "ps": ["localhost:47903"]}})",
    "small.json");
  BOOST_REQUIRE_MESSAGE(spec, test::why(spec));
  return *spec;
}

void check_message(const caf::error& err, const std::string& part) {
  BOOST_REQUIRE(err);
  BOOST_CHECK_MESSAGE(render(err).find(part) != std::string::npos,
                      "'" << part << "' not in: " << render(err));
}

template <class T>
void check_refused(const caf::expected<T>& x, const std::string& part) {
  BOOST_REQUIRE_MESSAGE(!x, "accepted, expected: " << part);
  check_message(x.error(), part);
}

} // namespace

BOOST_AUTO_TEST_SUITE(hooks)

BOOST_AUTO_TEST_CASE(kill_hook_defaults_to_sigkill) {
  auto k = kill_hook::parse("worker:1@100");
  BOOST_REQUIRE_MESSAGE(k, test::why(k));
  BOOST_CHECK_EQUAL(k->task.str(), "worker:1");
  BOOST_CHECK_EQUAL(k->step, 100);
  BOOST_CHECK_EQUAL(k->signal, SIGKILL);
}

BOOST_AUTO_TEST_CASE(kill_hook_takes_signal_names) {
  for (auto [text, sig] : std::vector<std::pair<std::string, int>>{
         {"ps:0@5:STOP", SIGSTOP},
         {"ps:0@5:CONT", SIGCONT},
         {"ps:0@5:TERM", SIGTERM},
         {"ps:0@5:SIGTERM", SIGTERM},
         {"ps:0@5:term", SIGTERM},
         {"ps:0@5:KILL", SIGKILL},
         {"ps:0@5:INT", SIGINT},
         {"ps:0@5:15", SIGTERM}}) {
    auto k = kill_hook::parse(text);
    BOOST_REQUIRE_MESSAGE(k, text << ": " << test::why(k));
    BOOST_CHECK_EQUAL(k->signal, sig);
  }
}

BOOST_AUTO_TEST_CASE(kill_hook_takes_a_thaw_delay_for_stop) {
  auto k = kill_hook::parse("ps:0@20:STOP+2500");
  BOOST_REQUIRE_MESSAGE(k, test::why(k));
  BOOST_CHECK_EQUAL(k->signal, SIGSTOP);
  BOOST_CHECK_EQUAL(k->step, 20);
  BOOST_CHECK_EQUAL(k->thaw_after_ms, 2500);
  auto plain = kill_hook::parse("ps:0@20:STOP");
  BOOST_REQUIRE_MESSAGE(plain, test::why(plain));
  BOOST_CHECK_EQUAL(plain->thaw_after_ms, 0);
  check_refused(kill_hook::parse("ps:0@20:KILL+100"), "only STOP");
  check_refused(kill_hook::parse("ps:0@20:STOP+"), "thaw delay");
  check_refused(kill_hook::parse("ps:0@20:STOP+0"), "thaw delay");
  check_refused(kill_hook::parse("ps:0@20:STOP+x"), "thaw delay");
}

BOOST_AUTO_TEST_CASE(kill_hook_refusals) {
  check_refused(kill_hook::parse("worker:1"), "no '@STEP'");
  check_refused(kill_hook::parse("worker@1"), "expected JOB:INDEX");
  check_refused(kill_hook::parse("worker:1@"), "step must be a number");
  check_refused(kill_hook::parse("worker:1@-3"), "step must be a number");
  check_refused(kill_hook::parse("worker:1@ten"), "step must be a number");
  check_refused(kill_hook::parse("worker:1@10:NOPE"), "unknown signal 'NOPE'");
  check_refused(kill_hook::parse("worker:1@10:"), "unknown signal");
  check_refused(kill_hook::parse("worker:x@10"), "index must be a number");
  auto k = kill_hook::parse("worker:1@10:NOPE");
  BOOST_REQUIRE(!k);
  BOOST_CHECK_EQUAL(static_cast<ec>(k.error().code()), ec::invalid_argument);
  check_message(k.error(), "--kill 'worker:1@10:NOPE'");
}

BOOST_AUTO_TEST_CASE(restart_hook_parses) {
  auto r = restart_hook::parse("ps:0@250");
  BOOST_REQUIRE_MESSAGE(r, test::why(r));
  BOOST_CHECK_EQUAL(r->task.str(), "ps:0");
  BOOST_CHECK_EQUAL(r->delay_ms, 250);
  check_refused(restart_hook::parse("ps:0"), "no '@MS'");
  check_refused(restart_hook::parse("ps:0@-1"), "delay must be");
  check_refused(restart_hook::parse("ps:0@1s"), "delay must be");
  check_refused(restart_hook::parse("ps@1"), "--restart 'ps@1'");
}

BOOST_AUTO_TEST_CASE(signal_names) {
  BOOST_CHECK_EQUAL(signal_by_name("KILL"), SIGKILL);
  BOOST_CHECK_EQUAL(signal_by_name("SIGSTOP"), SIGSTOP);
  BOOST_CHECK_EQUAL(signal_by_name("9"), SIGKILL);
  BOOST_CHECK_EQUAL(signal_by_name("BOGUS"), 0);
  BOOST_CHECK_EQUAL(signal_by_name("999"), 0);
  BOOST_CHECK_EQUAL(signal_name(SIGTERM), "SIGTERM");
  BOOST_CHECK_EQUAL(signal_name(SIGCONT), "SIGCONT");
}

BOOST_AUTO_TEST_CASE(global_step_in_log_lines) {
  BOOST_CHECK_EQUAL(
    parse_global_step("global_step: 100 | loss: 0.5 | accuracy: 0.8"), 100);
  BOOST_CHECK_EQUAL(parse_global_step("[chief] global_step: 7"), 7);
  BOOST_CHECK_EQUAL(parse_global_step("global_step 12 of 40"), 12);
  BOOST_CHECK_EQUAL(parse_global_step("{\"global_step=\": 3}"), -1);
  BOOST_CHECK_EQUAL(parse_global_step("global_step=42"), 42);
  BOOST_CHECK_EQUAL(parse_global_step("loss: 0.5"), -1);
  BOOST_CHECK_EQUAL(parse_global_step("global_step: n/a, global_step: 9"), 9);
  BOOST_CHECK_EQUAL(parse_global_step("global_step:"), -1);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(command_line)

BOOST_AUTO_TEST_CASE(launcher_flags_and_program_flags) {
  auto opts = parse_launch_args(
    {"--cluster", "c.json", "--steps", "40", "--grace_ms=500", "--kill",
     "worker:1@10", "--kill=ps:0@20:STOP", "--restart", "worker:1@300",
     "--log_dir", "logs", "--optimizer", "kfac", "--max_wall_s", "2.5",
     "--term_ms", "100", "--program", "/bin/true"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK_EQUAL(opts->cluster_file, "c.json");
  BOOST_CHECK_EQUAL(opts->grace_ms, 500);
  BOOST_CHECK_EQUAL(opts->term_ms, 100);
  BOOST_CHECK_EQUAL(opts->max_wall_s, 2.5);
  BOOST_CHECK_EQUAL(opts->log_dir, "logs");
  BOOST_CHECK_EQUAL(opts->program, "/bin/true");
  BOOST_REQUIRE_EQUAL(opts->kills.size(), 2u);
  BOOST_CHECK_EQUAL(opts->kills[1].signal, SIGSTOP);
  BOOST_REQUIRE_EQUAL(opts->restarts.size(), 1u);
  args want = {"--steps", "40", "--optimizer", "kfac"};
  BOOST_CHECK_EQUAL_COLLECTIONS(opts->program_args.begin(),
                                opts->program_args.end(), want.begin(),
                                want.end());
}

BOOST_AUTO_TEST_CASE(defaults) {
  auto opts = parse_launch_args({"--cluster", "c.json"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK_EQUAL(opts->grace_ms, 10000);
  BOOST_CHECK_EQUAL(opts->max_wall_s, 0.0);
  BOOST_CHECK(opts->program.empty());
  BOOST_CHECK(opts->log_dir.empty());
  BOOST_CHECK(opts->program_args.empty());
}

BOOST_AUTO_TEST_CASE(everything_after_double_dash_is_the_programs) {
  auto opts = parse_launch_args(
    {"--cluster", "c.json", "--", "--grace_ms", "5", "--kill", "x"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK_EQUAL(opts->grace_ms, 10000);
  BOOST_CHECK(opts->kills.empty());
  args want = {"--grace_ms", "5", "--kill", "x"};
  BOOST_CHECK_EQUAL_COLLECTIONS(opts->program_args.begin(),
                                opts->program_args.end(), want.begin(),
                                want.end());
}

BOOST_AUTO_TEST_CASE(refusals) {
  check_refused(parse_launch_args({}), "--cluster FILE is required");
  check_refused(parse_launch_args({"--steps", "3"}),
                "--cluster FILE is required");
  check_refused(parse_launch_args({"--cluster"}), "--cluster needs a value");
  check_refused(parse_launch_args({"--cluster", "c", "--grace_ms", "soon"}),
                "--grace_ms 'soon'");
  check_refused(parse_launch_args({"--cluster", "c", "--grace_ms", "-5"}),
                "--grace_ms '-5'");
  check_refused(parse_launch_args({"--cluster", "c", "--max_wall_s", "x"}),
                "--max_wall_s 'x'");
  check_refused(parse_launch_args({"--cluster", "c", "--kill", "w"}),
                "--kill 'w'");
  check_refused(parse_launch_args({"--cluster", "c", "--task", "1"}),
                "gives every task --cluster, --job_name and --task itself");
  check_refused(parse_launch_args({"--cluster", "c", "--", "--job_name=x"}),
                "program flag '--job_name=x'");
  check_refused(parse_launch_args({"--cluster", "c", "--", "--cluster", "d"}),
                "program flag '--cluster'");
}

BOOST_AUTO_TEST_CASE(help) {
  auto opts = parse_launch_args({"--help"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK(opts->help);
  auto usage = launch_usage();
  for (auto flag : {"--cluster", "--program", "--log_dir", "--grace_ms",
                    "--term_ms", "--max_wall_s", "--kill", "--restart"})
    BOOST_CHECK_MESSAGE(usage.find(flag) != std::string::npos, flag);
}

BOOST_AUTO_TEST_CASE(hooks_must_name_tasks_of_the_cluster) {
  auto spec = small_cluster();
  auto opts = parse_launch_args({"--cluster", "c", "--kill", "worker:1@5",
                                 "--restart", "ps:0@10"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK(!opts->validate(spec));
  opts = parse_launch_args({"--cluster", "c", "--kill", "worker:2@5"});
  BOOST_REQUIRE(opts);
  check_message(opts->validate(spec),
                "--kill worker:2@5: no task worker:2 in the cluster (worker "
                "has 2 tasks)");
  opts = parse_launch_args({"--cluster", "c", "--restart", "inverse:0@5"});
  BOOST_REQUIRE(opts);
  check_message(opts->validate(spec),
                "--restart inverse:0@5: no task inverse:0 in the cluster (no "
                "job \"inverse\")");
}

BOOST_AUTO_TEST_CASE(program_resolution) {
  auto p = resolve_program("/bin/sh");
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  BOOST_CHECK_EQUAL(*p, "/bin/sh");
  p = resolve_program("sh"); // on PATH
  BOOST_REQUIRE_MESSAGE(p, test::why(p));
  BOOST_CHECK(p->size() > 3 && p->substr(p->size() - 3) == "/sh");
  check_refused(resolve_program("/nonexistent/node"),
                "--program '/nonexistent/node': not an executable file");
  // A plain file without execute permission.
  auto plain = fs::temp_directory_path()
               / ("syncfac_plain_" + std::to_string(::getpid()));
  std::ofstream{plain} << "not a program\n";
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write);
  check_refused(resolve_program(plain.string()), "not an executable file");
  fs::remove(plain);
  // A directory is not a program either.
  check_refused(resolve_program(fs::temp_directory_path().string()),
                "not an executable file");
  check_refused(resolve_program("no-such-program-here"),
                "not found next to the launcher");
}

BOOST_AUTO_TEST_SUITE_END()
