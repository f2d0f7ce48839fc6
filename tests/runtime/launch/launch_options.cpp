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
#include "runtime/launch/log_prefix.hpp"
#include "runtime/launch/progress_display.hpp"
#include "runtime/progress_record.hpp"
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
  // A delay after the step: the signal that many ms after it came.
  auto later = kill_hook::parse("ps:0@25+600");
  BOOST_REQUIRE(later);
  BOOST_CHECK_EQUAL(later->step, 25);
  BOOST_CHECK_EQUAL(later->delay_ms, 600);
  BOOST_CHECK_EQUAL(later->signal, 9);
  auto later_stop = kill_hook::parse("ps:0@25+600:STOP+2000");
  BOOST_REQUIRE(later_stop);
  BOOST_CHECK_EQUAL(later_stop->delay_ms, 600);
  BOOST_CHECK_EQUAL(later_stop->thaw_after_ms, 2000);
  check_refused(kill_hook::parse("ps:0@25+0"), "delay after the step");
  check_refused(kill_hook::parse("ps:0@25+x:KILL"), "delay after the step");
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

BOOST_AUTO_TEST_CASE(progress_records_read_back_what_was_written) {
  progress_record r{120, 500, 3.25};
  auto line = r.to_line();
  BOOST_CHECK_EQUAL(line.back(), '\n');
  BOOST_CHECK(line.find("\"record\": \"progress\"") != std::string::npos);
  auto back = progress_record::parse(line);
  BOOST_REQUIRE(back);
  BOOST_CHECK(*back == r);
  // Without the newline too.
  BOOST_CHECK(progress_record::parse(line.substr(0, line.size() - 1)));
  // The checkpoint a restart resumes from travels too; a record without
  // it (an older chief) says none.
  progress_record with_ckpt{120, 500, 3.25, 100};
  auto ckpt = progress_record::parse(with_ckpt.to_line());
  BOOST_REQUIRE(ckpt);
  BOOST_CHECK_EQUAL(ckpt->checkpoint_step, 100);
  auto older = progress_record::parse(
    R"({"record": "progress", "global_step": 7, "total_steps": 9, "wall_s": 1})");
  BOOST_REQUIRE(older);
  BOOST_CHECK_EQUAL(older->checkpoint_step, -1);
}

BOOST_AUTO_TEST_CASE(a_bad_progress_record_is_refused_by_name) {
  auto why = [](const std::string& line) {
    auto r = progress_record::parse(line);
    BOOST_REQUIRE_MESSAGE(!r, line << " was accepted");
    return render(r.error());
  };
  // Log text is not a record: the launcher no longer reads log lines.
  BOOST_CHECK(why("global_step: 100 | loss: 0.5").find("not a JSON object")
              != std::string::npos);
  BOOST_CHECK(why(R"({"record": "summary", "global_step": 1})")
                .find("no \"record\": \"progress\"")
              != std::string::npos);
  BOOST_CHECK(
    why(R"({"record": "progress", "global_step": -1, "total_steps": 5, "wall_s": 1})")
      .find("\"global_step\" integer >= 0")
    != std::string::npos);
  BOOST_CHECK(
    why(R"({"record": "progress", "global_step": 1, "total_steps": 5})")
      .find("\"wall_s\"")
    != std::string::npos);
  BOOST_CHECK(why("{\"record\": \"progress\"").find("progress record '")
              != std::string::npos);
  BOOST_CHECK(why(R"({"record": "progress", "global_step": 1, "total_steps": 5, "wall_s": 1, "checkpoint_step": -2})")
                .find("\"checkpoint_step\" is not an integer >= -1")
              != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_progress_line_shows_rate_and_eta) {
  using namespace std::chrono;
  progress_display d{"chief:0", seconds{10}};
  BOOST_CHECK(d.text().empty());
  auto t0 = steady_clock::time_point{} + hours{1};
  d.observe(progress_record{0, 500, 0}, t0);
  BOOST_CHECK_EQUAL(d.rate(), 0);
  BOOST_CHECK_EQUAL(d.text(), "[chief:0] global_step 0/500 (0%) | measuring "
                              "steps/s | ETA ?");
  d.observe(progress_record{100, 500, 2}, t0 + seconds{2});
  BOOST_CHECK_CLOSE(d.rate(), 50.0, 1e-9);
  BOOST_CHECK_CLOSE(d.eta_s(), 8.0, 1e-9);
  BOOST_CHECK_EQUAL(d.text(), "[chief:0] global_step 100/500 (20%) | 50.0 "
                              "steps/s | ETA 8 s");
  // The window forgets what is older than 10 s: the rate now.
  d.observe(progress_record{110, 500, 22}, t0 + seconds{22});
  d.observe(progress_record{130, 500, 24}, t0 + seconds{24});
  BOOST_CHECK_CLOSE(d.rate(), 10.0, 1e-9);
  BOOST_CHECK_EQUAL(d.text(), "[chief:0] global_step 130/500 (26%) | 10.0 "
                              "steps/s | ETA 37 s");
  // A rollback measures anew.
  d.observe(progress_record{40, 500, 25}, t0 + seconds{25});
  BOOST_CHECK_EQUAL(d.rate(), 0);
  BOOST_CHECK_EQUAL(format_duration(125), "2 min 05 s");
  BOOST_CHECK_EQUAL(format_duration(3 * 3600 + 7 * 60 + 5), "3 h 07 min");
}

BOOST_AUTO_TEST_CASE(timestamps_are_iso_8601_utc) {
  using namespace std::chrono;
  // 2026-12-01T13:56:35.123Z
  auto t = system_clock::time_point{seconds{1796133395} + milliseconds{123}};
  BOOST_CHECK_EQUAL(iso8601_utc(t), "2026-12-01T13:56:35.123Z");
  BOOST_CHECK_EQUAL(iso8601_utc(system_clock::time_point{}),
                    "1970-01-01T00:00:00.000Z");
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

BOOST_AUTO_TEST_CASE(task_log_dir_is_the_new_spelling_of_log_dir) {
  // Beside the program's --logdir (TensorBoard) the launcher's flag has a
  // name of its own; the old one is still accepted.
  auto opts = parse_launch_args({"--cluster", "c.json", "--task_log_dir",
                                 "out", "--logdir", "tb"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK_EQUAL(opts->log_dir, "out");
  args want = {"--logdir", "tb"};
  BOOST_CHECK_EQUAL_COLLECTIONS(opts->program_args.begin(),
                                opts->program_args.end(), want.begin(),
                                want.end());
  auto old = parse_launch_args({"--cluster", "c.json", "--log_dir=out"});
  BOOST_REQUIRE_MESSAGE(old, test::why(old));
  BOOST_CHECK_EQUAL(old->log_dir, "out");
}

BOOST_AUTO_TEST_CASE(defaults) {
  auto opts = parse_launch_args({"--cluster", "c.json"});
  BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
  BOOST_CHECK_EQUAL(opts->grace_ms, 10000);
  BOOST_CHECK_EQUAL(opts->max_wall_s, 0.0);
  BOOST_CHECK(opts->program.empty());
  BOOST_CHECK(opts->log_dir.empty());
  BOOST_CHECK(opts->program_args.empty());
  BOOST_CHECK(opts->log_timestamps);
  BOOST_CHECK_EQUAL(opts->progress_line, "auto");
  BOOST_CHECK(!opts->draws_progress()); // stdout not known to be a terminal
  opts->out_is_terminal = true;
  BOOST_CHECK(opts->draws_progress());
}

BOOST_AUTO_TEST_CASE(output_flags) {
  for (auto off : {"--no_log_timestamps", "--log_timestamps=false",
                   "--log_timestamps=0"}) {
    auto opts = parse_launch_args({"--cluster", "c.json", off});
    BOOST_REQUIRE_MESSAGE(opts, test::why(opts));
    BOOST_CHECK_MESSAGE(!opts->log_timestamps, off);
    BOOST_CHECK(opts->program_args.empty());
  }
  auto on = parse_launch_args(
    {"--cluster", "c.json", "--no_log_timestamps", "--log_timestamps"});
  BOOST_REQUIRE_MESSAGE(on, test::why(on));
  BOOST_CHECK(on->log_timestamps);
  auto never = parse_launch_args(
    {"--cluster", "c.json", "--progress_line", "never"});
  BOOST_REQUIRE_MESSAGE(never, test::why(never));
  never->out_is_terminal = true;
  BOOST_CHECK(!never->draws_progress());
  auto always = parse_launch_args(
    {"--cluster", "c.json", "--progress_line=always"});
  BOOST_REQUIRE_MESSAGE(always, test::why(always));
  BOOST_CHECK(always->draws_progress());
  check_refused(
    parse_launch_args({"--cluster", "c", "--log_timestamps=maybe"}),
    "--log_timestamps 'maybe': expected true or false");
  check_refused(parse_launch_args({"--cluster", "c", "--progress_line", "tty"}),
                "--progress_line 'tty': expected auto, always or never");
}

BOOST_AUTO_TEST_CASE(a_bad_progress_fd_variable_names_itself) {
  struct restore {
    ~restore() {
      ::unsetenv(progress_fd_variable);
    }
  } guard;
  ::unsetenv(progress_fd_variable);
  auto none = progress_record_writer::from_environment();
  BOOST_REQUIRE(none);
  BOOST_CHECK(!none->active());
  for (auto [value, why] :
       {std::pair{"three", "not a file descriptor number >= 3"},
        std::pair{"1", "not a file descriptor number >= 3"},
        std::pair{"987654", "not an open file descriptor"}}) {
    ::setenv(progress_fd_variable, value, 1);
    check_refused(progress_record_writer::from_environment(),
                  std::string{"SYNCFAC_PROGRESS_FD='"} + value + "': " + why);
  }
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  ::setenv(progress_fd_variable, std::to_string(fds[0]).c_str(), 1);
  check_refused(progress_record_writer::from_environment(),
                "open for reading only");
  ::setenv(progress_fd_variable, std::to_string(fds[1]).c_str(), 1);
  auto writer = progress_record_writer::from_environment();
  BOOST_REQUIRE_MESSAGE(writer, test::why(writer));
  BOOST_CHECK(writer->active());
  writer->write(progress_record{7, 9, 0.5});
  char buf[256] = {};
  auto n = ::read(fds[0], buf, sizeof(buf) - 1);
  BOOST_REQUIRE(n > 0);
  auto back = progress_record::parse(std::string(buf, static_cast<size_t>(n)));
  BOOST_REQUIRE_MESSAGE(back, test::why(back));
  BOOST_CHECK_EQUAL(back->global_step, 7);
  ::close(fds[0]); // fds[1] belongs to the writer
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
