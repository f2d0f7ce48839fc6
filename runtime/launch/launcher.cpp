#include "runtime/launch/launcher.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/error.hpp"
#include "runtime/exit_codes.hpp"
#include "runtime/launch/log_prefix.hpp"
#include "runtime/launch/progress_display.hpp"
#include "runtime/progress_record.hpp"

extern char** environ;

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;
using time_point = clock_type::time_point;

/// The node program without --program: the build's choice
/// (SYNCFAC_LAUNCH_DEFAULT_PROGRAM in CMakeLists.txt).
constexpr const char* default_program = SYNCFAC_LAUNCH_DEFAULT_PROGRAM;

/// How long a task may stay unreaped after SIGKILL before the launcher
/// stops waiting for it (a process stuck in the kernel).
constexpr auto kill_give_up = std::chrono::seconds{5};

/// The longest poll() wait, so that a lost wake-up costs little.
constexpr auto max_poll_wait = std::chrono::milliseconds{250};

/// Output kept at most per stream before a line without '\n' is emitted.
constexpr size_t max_line = 64 * 1024;

/// How often the progress line is redrawn at most.
constexpr auto progress_redraw = std::chrono::milliseconds{250};

/// Erases the line the cursor is on (the progress line).
constexpr const char* erase_line = "\r\033[K";

caf::error bad_arg(std::string what) {
  return make_error(ec::invalid_argument, std::move(what));
}

bool parse_int(const std::string& text, int64_t& result) {
  if (text.empty() || text.size() > 18)
    return false;
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size())
    return false;
  for (size_t k = i; k < text.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(text[k])))
      return false;
  result = std::stoll(text);
  return true;
}

bool parse_double(const std::string& text, double& result) {
  if (text.empty())
    return false;
  char* end = nullptr;
  errno = 0;
  result = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size();
}

/// The context of a syncfac error without the code's name.
std::string message_of(const caf::error& err) {
  auto text = render(err);
  auto colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

std::string ms_str(int64_t ms) {
  return std::to_string(ms) + " ms";
}

/// The directory of the running executable ("" if unknown).
std::string own_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return {};
  return exe.parent_path().string();
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)
         && ::access(path.c_str(), X_OK) == 0;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return; // a log that cannot be written does not stop the run
    }
    done += static_cast<size_t>(n);
  }
}

// -- signals ------------------------------------------------------------------

/// The self-pipe: signal handlers write the signal number, poll() wakes.
int signal_pipe[2] = {-1, -1};

extern "C" void on_launcher_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  if (signal_pipe[1] >= 0) {
    auto n = ::write(signal_pipe[1], &byte, 1);
    static_cast<void>(n);
  }
  errno = saved;
}

/// Installs the launcher's handlers for the lifetime of a run and restores
/// the previous ones afterwards.
class signal_scope {
public:
  signal_scope() {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      signal_pipe[0] = signal_pipe[1] = -1;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < handled_.size(); ++i)
      ::sigaction(handled_[i], &sa, &old_[i]);
    struct sigaction ignore;
    std::memset(&ignore, 0, sizeof(ignore));
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  }

  ~signal_scope() {
    for (size_t i = 0; i < handled_.size(); ++i)
      ::sigaction(handled_[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    for (auto& fd : signal_pipe) {
      if (fd >= 0)
        ::close(fd);
      fd = -1;
    }
  }

  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

  /// The signals received since the last call.
  std::vector<int> drain() {
    std::vector<int> result;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(signal_pipe[0], buf, sizeof(buf))) > 0)
      for (ssize_t i = 0; i < n; ++i)
        result.push_back(buf[i]);
    return result;
  }

  int fd() const {
    return signal_pipe[0];
  }

private:
  std::array<int, 6> handled_{{SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2,
                               SIGCHLD}};
  std::array<struct sigaction, 6> old_;
  struct sigaction old_pipe_;
};

// -- tasks --------------------------------------------------------------------

struct output_stream {
  int fd = -1;
  std::string buf;
};

struct task_proc {
  task_id id;
  std::string label; // "[worker:1] "
  pid_t pid = -1;
  bool running = false;
  int starts = 0;
  output_stream out;
  output_stream err;
  /// The chief's task only: its progress records (runtime/progress_record).
  output_stream progress;
  /// A bad record was reported (once per start).
  bool bad_record_reported = false;
  int log_fd = -1;
  /// The signal a --kill hook sent last (0: none).
  int hook_signal = 0;
  std::optional<time_point> restart_at;
  /// A --kill ...:STOP+MS hook's SIGCONT.
  std::optional<time_point> thaw_at;
  std::optional<time_point> term_at;
  std::optional<time_point> kill_at;
  std::optional<time_point> give_up_at;
  /// The last line it wrote to stderr (launch_report).
  std::string last_error_line;
  /// Why the launcher stopped waiting for it without an exit status
  /// (empty: it has one).
  std::string abandoned;
  /// The last stopping signal sent (SIGTERM, or a forwarded one) and how
  /// long it has before SIGKILL, for the report.
  int stop_signal = SIGTERM;
  int64_t stop_wait_ms = 0;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by " + signal_name(WTERMSIG(status))
           + (WCOREDUMP(status) ? " (core dumped)" : "");
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

class launcher {
public:
  launcher(const launch_options& opts, const cluster_spec& spec,
           std::string program, std::ostream& out, std::ostream& err)
    : opts_(opts),
      program_(std::move(program)),
      out_(out),
      err_(err),
      chief_(spec.chief_task()),
      display_(chief_.str()) {
    for (const auto& t : spec.tasks()) {
      task_proc p;
      p.id = t;
      p.label = "[" + t.str() + "] ";
      procs_.push_back(std::move(p));
    }
    kills_fired_.assign(opts.kills.size(), false);
    kill_due_.assign(opts.kills.size(), std::nullopt);
    restarts_used_.assign(opts.restarts.size(), false);
  }

  ~launcher() {
    for (auto& p : procs_) {
      close_streams(p);
      if (p.log_fd >= 0)
        ::close(p.log_fd);
    }
  }

  int run() {
    started_ = clock_type::now();
    if (opts_.max_wall_s > 0)
      wall_deadline_ = started_
                       + std::chrono::duration_cast<clock_type::duration>(
                         std::chrono::duration<double>(opts_.max_wall_s));
    if (!opts_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(opts_.log_dir, ec);
      if (ec) {
        report("cannot create --task_log_dir '" + opts_.log_dir
               + "': " + ec.message());
        return 2;
      }
    }
    report("starting " + std::to_string(procs_.size()) + " tasks of "
           + opts_.cluster_file + " with " + program_);
    for (auto& p : procs_) {
      if (!start(p)) {
        stop_all("a task could not be started");
        wait_all_bounded();
        return 127;
      }
    }
    loop();
    clear_progress();
    if (wall_hit_)
      return 124;
    if (!chief_done_)
      return 1;
    auto code = exit_code_of(chief_status_);
    if (signal_count_ > 0 && code == exit_codes::preempted)
      report(chief_.str() + " exited with " + std::to_string(code)
             + " (preempted) after the forwarded signal: the run can be "
               "requeued with the same flags, "
             + what_a_requeue_resumes() + " (docs/distributed.md, "
               "\"Preemption\")");
    return code;
  }

private:
  // -- reporting --------------------------------------------------------------

  /// Where a requeued run resumes, as the chief's progress records said
  /// last: the step of the checkpoint it wrote or restored, or global
  /// step 0 when it had none.
  std::string what_a_requeue_resumes() const {
    if (!display_.any())
      return "but " + chief_.str() + " sent no progress record, so "
             "where it resumes is not known here: see its log";
    if (checkpoint_step_ < 0)
      return "but " + chief_.str() + " reported no checkpoint (none "
             "written or restored; is --checkpoint_dir set?): a requeued "
             "run starts again at global step 0";
    return "which resume at global step " + std::to_string(checkpoint_step_)
           + " (the newest checkpoint " + chief_.str() + " reported)";
  }

  /// The timestamp in front of a line ("" with --no_log_timestamps).
  std::string stamp() const {
    if (!opts_.log_timestamps)
      return {};
    return iso8601_utc(std::chrono::system_clock::now()) + " ";
  }

  void report(const std::string& line) {
    clear_progress();
    err_ << stamp() << "syncfac-launch: " << line << '\n';
    err_.flush();
  }

  // -- the progress line ------------------------------------------------------

  /// Draws the progress line (at most every progress_redraw).
  void draw_progress() {
    if (!opts_.draws_progress() || !display_.any())
      return;
    auto now = clock_type::now();
    if (progress_drawn_ && now - last_draw_ < progress_redraw)
      return;
    out_ << erase_line << display_.text();
    out_.flush();
    progress_drawn_ = true;
    last_draw_ = now;
  }

  /// Erases the progress line before a line is printed; the loop draws it
  /// again after.
  void clear_progress() {
    if (!progress_drawn_)
      return;
    out_ << erase_line;
    out_.flush();
    progress_drawn_ = false;
  }

  /// A report about one task: also goes into its log file.
  void report(task_proc& p, const std::string& line) {
    report(p.id.str() + " " + line);
    if (p.log_fd >= 0)
      write_all(p.log_fd, "syncfac-launch: " + p.id.str() + " " + line + "\n");
  }

  // -- starting ---------------------------------------------------------------

  bool open_log(task_proc& p) {
    if (opts_.log_dir.empty() || p.log_fd >= 0)
      return true;
    auto path = (std::filesystem::path{opts_.log_dir}
                 / (p.id.job + "-" + std::to_string(p.id.index) + ".log"))
                  .string();
    p.log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                      0644);
    if (p.log_fd < 0) {
      report("cannot write " + path + ": " + std::strerror(errno));
      return false;
    }
    return true;
  }

  bool start(task_proc& p) {
    if (!open_log(p))
      return false;
    const auto& program = program_for(p.id.job);
    std::vector<std::string> args = {program,          "--cluster",
                                     opts_.cluster_file, "--job_name",
                                     p.id.job,         "--task",
                                     std::to_string(p.id.index)};
    auto own = opts_.job_args.find(p.id.job);
    const auto& extra = own != opts_.job_args.end() ? own->second
                                                    : opts_.program_args;
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    // The chief's task gets a pipe for its progress records, named by
    // SYNCFAC_PROGRESS_FD; the others get no such variable (not even one
    // inherited from a launcher around this one).
    int progress_pipe[2] = {-1, -1};
    if (p.id == chief_) {
      if (::pipe2(progress_pipe, O_CLOEXEC) != 0)
        return start_failed(p, "pipe", errno);
      if (progress_pipe[1] < 3) { // 0-2 become the child's stdio
        int moved = ::fcntl(progress_pipe[1], F_DUPFD_CLOEXEC, 3);
        ::close(progress_pipe[1]);
        progress_pipe[1] = moved;
      }
    }
    auto close_progress = [&] {
      for (int& fd : progress_pipe)
        if (fd >= 0) {
          ::close(fd);
          fd = -1;
        }
    };
    std::vector<std::string> env;
    const std::string env_key = std::string{progress_fd_variable} + "=";
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (std::string{*e}.rfind(env_key, 0) != 0)
        env.emplace_back(*e);
    if (progress_pipe[1] >= 0)
      env.push_back(env_key + std::to_string(progress_pipe[1]));
    std::vector<char*> envp;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    int out_pipe[2];
    int err_pipe[2];
    int exec_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      close_progress();
      return start_failed(p, "pipe", e);
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      close_progress();
      return start_failed(p, "pipe", e);
    }
    if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
        ::close(fd);
      close_progress();
      return start_failed(p, "pipe", e);
    }
    // Block the handled signals across fork so that the child never runs
    // the launcher's handler; the child resets them before exec.
    sigset_t block;
    sigset_t old_mask;
    sigemptyset(&block);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD})
      sigaddset(&block, sig);
    ::sigprocmask(SIG_BLOCK, &block, &old_mask);
    auto parent = ::getpid();
    auto pid = ::fork();
    if (pid == 0) {
      // The child: its own process group (a terminal's ^C reaches only the
      // launcher, which forwards it), killed if the launcher dies.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(1);
      for (int sig :
           {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE})
        ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) {
        ::dup2(null_fd, 0);
        ::close(null_fd);
      }
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      if (progress_pipe[1] >= 0) // inherited: no close-on-exec
        ::fcntl(progress_pipe[1], F_SETFD, 0);
      ::execvpe(argv[0], argv.data(), envp.data());
      int e = errno;
      auto n = ::write(exec_pipe[1], &e, sizeof(e));
      static_cast<void>(n);
      ::_exit(127);
    }
    int fork_errno = errno;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(exec_pipe[1]);
    if (progress_pipe[1] >= 0) {
      ::close(progress_pipe[1]);
      progress_pipe[1] = -1;
    }
    if (pid < 0) {
      for (int fd : {out_pipe[0], err_pipe[0], exec_pipe[0]})
        ::close(fd);
      close_progress();
      return start_failed(p, "fork", fork_errno);
    }
    ::setpgid(pid, pid); // also here: no race with the child's own call
    // Wait for exec: the pipe closes on success, carries errno on failure.
    int exec_errno = 0;
    ssize_t n;
    do {
      n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
    } while (n < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    if (n > 0) {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      close_progress();
      return start_failed(p, "exec " + program_for(p.id.job), exec_errno);
    }
    for (int fd : {out_pipe[0], err_pipe[0], progress_pipe[0]})
      if (fd >= 0)
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    p.out.fd = out_pipe[0];
    p.err.fd = err_pipe[0];
    p.progress.fd = progress_pipe[0];
    p.progress.buf.clear();
    p.bad_record_reported = false;
    p.pid = pid;
    p.running = true;
    p.abandoned.clear();
    p.hook_signal = 0;
    p.term_at.reset();
    p.kill_at.reset();
    p.give_up_at.reset();
    ++p.starts;
    report(p, std::string{p.starts == 1 ? "started" : "restarted"} + " (pid "
                + std::to_string(pid)
                + (p.starts > 1 ? ", start " + std::to_string(p.starts) : "")
                + ")");
    return true;
  }

  bool start_failed(task_proc& p, const std::string& what, int e) {
    report(p, "cannot be started: " + what + ": " + std::strerror(e));
    return false;
  }

  // -- output -----------------------------------------------------------------

  void emit(task_proc& p, const std::string& line, bool is_err) {
    clear_progress();
    auto& os = is_err ? err_ : out_;
    os << stamp() << p.label << line << '\n';
    os.flush();
    if (is_err && !line.empty())
      p.last_error_line = line;
    if (p.log_fd >= 0)
      write_all(p.log_fd, line + "\n");
  }

  // -- progress records -------------------------------------------------------

  /// Reads the chief's records that arrived; closes the pipe at EOF (a
  /// record cut off by it is dropped).
  void read_progress(task_proc& p) {
    read_available(p.progress, std::numeric_limits<size_t>::max(),
                   [&](output_stream& s) {
                     size_t begin = 0;
                     for (auto nl = s.buf.find('\n'); nl != std::string::npos;
                          nl = s.buf.find('\n', begin)) {
                       on_record(p, s.buf.substr(begin, nl - begin));
                       begin = nl + 1;
                     }
                     s.buf.erase(0, begin);
                     if (s.buf.size() > max_line)
                       s.buf.clear(); // not records: drop rather than grow
                   },
                   [](output_stream&) {});
  }

  void on_record(task_proc& p, const std::string& line) {
    auto rec = progress_record::parse(line);
    if (!rec) {
      if (!p.bad_record_reported)
        report(p, "sent a bad progress record (ignored, and any after it "
                  "not reported): " + message_of(rec.error()));
      p.bad_record_reported = true;
      return;
    }
    display_.observe(*rec, clock_type::now());
    checkpoint_step_ = rec->checkpoint_step;
    if (rec->global_step > chief_step_) {
      chief_step_ = rec->global_step;
      fire_kill_hooks();
    }
  }

  /// Emits the complete lines of `s` (all of it at EOF).
  void split_lines(task_proc& p, output_stream& s, bool is_err, bool eof) {
    size_t begin = 0;
    for (;;) {
      auto nl = s.buf.find('\n', begin);
      if (nl == std::string::npos)
        break;
      emit(p, s.buf.substr(begin, nl - begin), is_err);
      begin = nl + 1;
    }
    s.buf.erase(0, begin);
    if (!s.buf.empty() && (eof || s.buf.size() >= max_line)) {
      emit(p, s.buf, is_err);
      s.buf.clear();
    }
  }

  /// Reads what `s` has now; closes it at EOF. `limit` bounds the bytes
  /// read in one call (a descendant of an exited task may keep writing).
  void read_stream(task_proc& p, output_stream& s, bool is_err,
                   size_t limit) {
    read_available(
      s, limit,
      [&](output_stream& in) { split_lines(p, in, is_err, false); },
      [&](output_stream& in) { split_lines(p, in, is_err, true); });
  }

  /// Appends what `s` has now to its buffer, up to about `limit` bytes,
  /// calling `on_data` after each read; at EOF or an error closes it and
  /// calls `on_end`. Returns when the descriptor would block.
  template <class OnData, class OnEnd>
  static void read_available(output_stream& s, size_t limit, OnData on_data,
                             OnEnd on_end) {
    char buf[16384];
    size_t total = 0;
    while (s.fd >= 0 && total < limit) {
      auto n = ::read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        s.buf.append(buf, static_cast<size_t>(n));
        total += static_cast<size_t>(n);
        on_data(s);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == EAGAIN)
        return;
      // EOF or an error: the stream is done.
      ::close(s.fd);
      s.fd = -1;
      on_end(s);
    }
  }

  void close_streams(task_proc& p) {
    for (auto* s : {&p.out, &p.err, &p.progress}) {
      if (s->fd >= 0)
        ::close(s->fd);
      s->fd = -1;
    }
  }

  // -- hooks ------------------------------------------------------------------

  /// The hooks whose step came: each fires now, or its delay later.
  void fire_kill_hooks() {
    for (size_t i = 0; i < opts_.kills.size(); ++i) {
      const auto& hook = opts_.kills[i];
      if (kills_fired_[i] || kill_due_[i] || hook.step > chief_step_)
        continue;
      if (hook.delay_ms > 0)
        kill_due_[i] = clock_type::now()
                       + std::chrono::milliseconds{hook.delay_ms};
      else
        fire_kill_hook(i);
    }
  }

  /// The delayed hooks whose time came.
  void fire_due_kill_hooks(time_point now) {
    for (size_t i = 0; i < opts_.kills.size(); ++i)
      if (!kills_fired_[i] && kill_due_[i] && now >= *kill_due_[i])
        fire_kill_hook(i);
  }

  void fire_kill_hook(size_t i) {
    {
      const auto& hook = opts_.kills[i];
      kills_fired_[i] = true;
      auto* p = find(hook.task);
      auto what = "--kill " + hook.task.str() + "@" + std::to_string(hook.step)
                  + (hook.delay_ms > 0 ? "+" + std::to_string(hook.delay_ms)
                                       : std::string{})
                  + ":" + signal_name(hook.signal).substr(3);
      if (p == nullptr || !p->running) {
        report(what + ": " + hook.task.str() + " is not running; skipped");
        return;
      }
      if (hook.thaw_after_ms > 0)
        what += "+" + std::to_string(hook.thaw_after_ms);
      report(*p, "gets " + signal_name(hook.signal) + " at global_step "
                   + std::to_string(chief_step_) + " (" + what + ")");
      p->hook_signal = hook.signal;
      ::kill(p->pid, hook.signal);
      if (hook.thaw_after_ms > 0)
        p->thaw_at = clock_type::now()
                     + std::chrono::milliseconds{hook.thaw_after_ms};
    }
  }

  /// Schedules a restart of `p` if a --restart flag is left for it.
  bool schedule_restart(task_proc& p) {
    for (size_t i = 0; i < opts_.restarts.size(); ++i) {
      const auto& hook = opts_.restarts[i];
      if (restarts_used_[i] || hook.task != p.id)
        continue;
      restarts_used_[i] = true;
      p.restart_at = clock_type::now()
                     + std::chrono::milliseconds{hook.delay_ms};
      report(p, "restarts in " + ms_str(hook.delay_ms) + " (--restart "
                  + hook.task.str() + "@" + std::to_string(hook.delay_ms)
                  + ")");
      return true;
    }
    return false;
  }

  task_proc* find(const task_id& t) {
    for (auto& p : procs_)
      if (p.id == t)
        return &p;
    return nullptr;
  }

  // -- ending -----------------------------------------------------------------

  void cancel_restarts(const std::string& why) {
    for (auto& p : procs_)
      if (p.restart_at) {
        p.restart_at.reset();
        report(p, "is not restarted: " + why);
      }
  }

  /// Sends SIGTERM now (and SIGCONT, so that a stopped task sees it), then
  /// SIGKILL after term_ms.
  void terminate(task_proc& p) {
    ::kill(p.pid, SIGTERM);
    ::kill(p.pid, SIGCONT);
    p.term_at.reset();
    p.kill_at = clock_type::now() + std::chrono::milliseconds{opts_.term_ms};
    p.stop_signal = SIGTERM;
    p.stop_wait_ms = opts_.term_ms;
  }

  void stop_all(const std::string& why) {
    stopping_ = true;
    cancel_restarts(why);
    for (auto& p : procs_)
      if (p.running && !p.give_up_at) {
        report(p, "gets SIGTERM: " + why);
        terminate(p);
      }
  }

  void on_chief_done(task_proc& chief) {
    chief_done_ = true;
    chief_status_ = chief.status;
    cancel_restarts("the chief has exited");
    if (stopping_)
      return; // the others already have their deadlines
    auto at = clock_type::now() + std::chrono::milliseconds{opts_.grace_ms};
    for (auto& p : procs_)
      if (p.running)
        p.term_at = at;
  }

  void on_exit(task_proc& p, int status) {
    p.running = false;
    p.status = status;
    p.term_at.reset();
    p.kill_at.reset();
    p.give_up_at.reset();
    // Whatever it wrote before it exited is in the pipes now.
    read_stream(p, p.out, false, 1 << 20);
    read_stream(p, p.err, true, 1 << 20);
    read_progress(p);
    split_lines(p, p.out, false, true);
    split_lines(p, p.err, true, true);
    close_streams(p);
    auto text = describe_status(status);
    if (p.hook_signal != 0 && WIFSIGNALED(status)
        && WTERMSIG(status) == p.hook_signal)
      text += " (--kill)";
    bool chief = p.id == chief_;
    if (!chief && !chief_done_ && !stopping_
        && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      text += " before the chief; the chief decides how the run ends";
    report(p, text);
    if (!chief_done_ && !stopping_ && schedule_restart(p))
      return;
    if (chief)
      on_chief_done(p);
  }

  void reap() {
    for (auto& p : procs_) {
      if (!p.running)
        continue;
      int status = 0;
      auto r = ::waitpid(p.pid, &status, WNOHANG);
      if (r == p.pid)
        on_exit(p, status);
      else if (r < 0 && errno == ECHILD) {
        report(p, "vanished (no exit status)");
        p.abandoned = "vanished (no exit status)";
        p.running = false;
        close_streams(p);
        if (p.id == chief_) {
          p.status = 1 << 8; // as exit code 1
          on_chief_done(p);
        }
      }
    }
  }

  void on_timers() {
    auto now = clock_type::now();
    if (wall_deadline_ && now >= *wall_deadline_ && !wall_hit_) {
      wall_hit_ = true;
      wall_deadline_.reset();
      report("--max_wall_s " + seconds_str(opts_.max_wall_s)
             + " reached: stopping every task");
      stop_all("--max_wall_s reached");
    }
    if (!stopping_)
      fire_due_kill_hooks(now);
    for (auto& p : procs_) {
      if (p.restart_at && now >= *p.restart_at) {
        p.restart_at.reset();
        if (!start(p) && p.id == chief_) {
          p.status = 127 << 8;
          on_chief_done(p);
        }
        continue;
      }
      if (!p.running)
        continue;
      if (p.thaw_at && now >= *p.thaw_at) {
        p.thaw_at.reset();
        report(p, "gets SIGCONT (the --kill hook's thaw)");
        ::kill(p.pid, SIGCONT);
      }
      if (p.term_at && now >= *p.term_at) {
        report(p, "still running " + ms_str(opts_.grace_ms)
                    + " after the chief exited: sending SIGTERM");
        terminate(p);
      } else if (p.kill_at && now >= *p.kill_at) {
        report(p, "did not exit " + ms_str(p.stop_wait_ms) + " after "
                    + signal_name(p.stop_signal) + ": sending SIGKILL");
        ::kill(p.pid, SIGKILL);
        p.kill_at.reset();
        p.give_up_at = now + kill_give_up;
      } else if (p.give_up_at && now >= *p.give_up_at) {
        report(p, "(pid " + std::to_string(p.pid)
                    + ") did not die after SIGKILL; no longer waiting for it");
        p.abandoned = "did not die after SIGKILL";
        p.running = false;
        p.give_up_at.reset();
        close_streams(p);
        if (p.id == chief_) {
          p.status = SIGKILL; // as killed by SIGKILL
          on_chief_done(p);
        }
      }
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD)
      return; // reap() runs every round
    ++signal_count_;
    if (first_signal_ == 0)
      first_signal_ = sig;
    if (signal_count_ > 1) {
      report("got " + signal_name(sig) + " again: killing every task");
      stopping_ = true;
      cancel_restarts("the launcher was interrupted");
      auto now = clock_type::now();
      for (auto& p : procs_)
        if (p.running && !p.give_up_at) {
          ::kill(p.pid, SIGKILL);
          p.term_at.reset();
          p.kill_at.reset();
          p.give_up_at = now + kill_give_up;
        }
      return;
    }
    // SIGHUP (a closed terminal, some schedulers) and a site's requeue
    // signal (SIGUSR1/2) go on as SIGTERM, the stop signal every task
    // handles whatever its --requeue_signal; SIGINT as itself.
    int forward = sig == SIGINT ? SIGINT : SIGTERM;
    report("got " + signal_name(sig) + ": forwarding "
           + (forward == sig ? std::string{"it"} : signal_name(forward))
           + " to every task");
    stopping_ = true;
    cancel_restarts("the launcher was interrupted");
    auto at = clock_type::now() + std::chrono::milliseconds{opts_.grace_ms};
    for (auto& p : procs_)
      if (p.running) {
        ::kill(p.pid, forward);
        ::kill(p.pid, SIGCONT);
        p.term_at.reset();
        p.kill_at = at; // SIGKILL if still there after the grace period
        p.stop_signal = forward;
        p.stop_wait_ms = opts_.grace_ms;
      }
  }

  bool busy() const {
    for (const auto& p : procs_)
      if (p.running || p.restart_at)
        return true;
    return false;
  }

  std::chrono::milliseconds poll_wait() const {
    auto now = clock_type::now();
    auto next = now + max_poll_wait;
    auto consider = [&](const std::optional<time_point>& t) {
      if (t && *t < next)
        next = *t;
    };
    consider(wall_deadline_);
    for (const auto& due : kill_due_)
      consider(due);
    for (const auto& p : procs_) {
      consider(p.restart_at);
      consider(p.thaw_at);
      consider(p.term_at);
      consider(p.kill_at);
      consider(p.give_up_at);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next
                                                                      - now);
    return std::max(wait, std::chrono::milliseconds{0})
           + std::chrono::milliseconds{1};
  }

  void loop() {
    while (busy()) {
      enum class source { signals, out, err, progress };
      std::vector<pollfd> fds;
      std::vector<std::pair<task_proc*, source>> owners;
      fds.push_back(pollfd{signals_fd_, POLLIN, 0});
      owners.emplace_back(nullptr, source::signals);
      for (auto& p : procs_)
        for (auto [s, kind] : {std::pair{&p.out, source::out},
                               std::pair{&p.err, source::err},
                               std::pair{&p.progress, source::progress}})
          if (s->fd >= 0) {
            fds.push_back(pollfd{s->fd, POLLIN, 0});
            owners.emplace_back(&p, kind);
          }
      auto n = ::poll(fds.data(), fds.size(),
                      static_cast<int>(poll_wait().count()));
      if (n > 0) {
        for (size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents == 0)
            continue;
          if (i == 0) {
            for (int sig : signals_->drain())
              on_signal(sig);
            continue;
          }
          auto [p, kind] = owners[i];
          if (kind == source::progress)
            read_progress(*p);
          else
            read_stream(*p, kind == source::err ? p->err : p->out,
                        kind == source::err, 1 << 20);
        }
      }
      reap();
      on_timers();
      draw_progress();
    }
  }

  void wait_all_bounded() {
    loop();
  }

public:
  /// How every task ended, for launch_report.
  void fill(launch_report& report) const {
    report.tasks.clear();
    for (const auto& p : procs_) {
      task_end end;
      end.task = p.id;
      end.starts = p.starts;
      end.last_error_line = p.last_error_line;
      if (p.starts == 0) {
        end.status = "never started";
      } else if (p.running) {
        end.status = "still running";
      } else if (!p.abandoned.empty()) {
        end.status = p.abandoned;
      } else {
        end.exit_code = exit_code_of(p.status);
        end.status = describe_status(p.status);
      }
      report.tasks.push_back(std::move(end));
    }
    report.forwarded_signal = first_signal_;
    report.resume_step = checkpoint_step_;
    report.chief_step = chief_step_;
  }

  void attach(signal_scope& signals) {
    signals_ = &signals;
    signals_fd_ = signals.fd();
  }

  void set_job_programs(std::map<std::string, std::string> xs) {
    job_programs_ = std::move(xs);
  }

private:
  const std::string& program_for(const std::string& job) const {
    auto i = job_programs_.find(job);
    return i != job_programs_.end() ? i->second : program_;
  }

  const launch_options& opts_;
  std::string program_;
  /// Resolved --job_program paths.
  std::map<std::string, std::string> job_programs_;
  std::ostream& out_;
  std::ostream& err_;
  /// The task hosting the chief: chief:0, or worker:0 in a cluster
  /// without a chief job; its exit decides how the run ends.
  task_id chief_;
  std::vector<task_proc> procs_;
  std::vector<bool> kills_fired_;
  /// When each delayed --kill hook whose step came fires (unset: not due).
  std::vector<std::optional<time_point>> kill_due_;
  std::vector<bool> restarts_used_;
  signal_scope* signals_ = nullptr;
  int signals_fd_ = -1;
  time_point started_;
  std::optional<time_point> wall_deadline_;
  bool wall_hit_ = false;
  bool stopping_ = false;
  int signal_count_ = 0;
  /// The first signal received (launch_report::forwarded_signal).
  int first_signal_ = 0;
  bool chief_done_ = false;
  int chief_status_ = 0;
  int64_t chief_step_ = -1;
  /// The newest checkpoint a restart resumes from, as the chief's last
  /// record said (-1: none).
  int64_t checkpoint_step_ = -1;
  /// The progress line's state.
  progress_display display_;
  bool progress_drawn_ = false;
  time_point last_draw_;
};

struct signal_entry {
  const char* name;
  int number;
};

const signal_entry signal_table[] = {
  {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT},
  {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
  {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
  {"STOP", SIGSTOP},
};

} // namespace

// -- hooks and options --------------------------------------------------------

int signal_by_name(const std::string& name) {
  std::string upper;
  for (unsigned char c : name)
    upper += static_cast<char>(std::toupper(c));
  if (upper.rfind("SIG", 0) == 0)
    upper = upper.substr(3);
  for (const auto& e : signal_table)
    if (upper == e.name)
      return e.number;
  int64_t number = 0;
  if (parse_int(upper, number))
    for (const auto& e : signal_table)
      if (e.number == number)
        return e.number;
  return 0;
}

std::string signal_name(int sig) {
  for (const auto& e : signal_table)
    if (e.number == sig)
      return std::string{"SIG"} + e.name;
  return "signal " + std::to_string(sig);
}

namespace {

/// Splits a hook's "JOB:INDEX@WHEN" into its task and WHEN (named `when`
/// in the answer); what is wrong with it, if anything.
std::optional<std::string> split_hook(const std::string& text,
                                      const std::string& when, task_id& task,
                                      std::string& rest) {
  auto at = text.find('@');
  if (at == std::string::npos)
    return "no '@" + when + "'";
  auto parsed = task_id::parse(text.substr(0, at));
  if (!parsed)
    return message_of(parsed.error());
  task = std::move(*parsed);
  rest = text.substr(at + 1);
  return std::nullopt;
}

} // namespace

caf::expected<kill_hook> kill_hook::parse(const std::string& text) {
  auto fail = [&](const std::string& why) {
    return bad_arg("--kill '" + text + "': " + why
                   + " (expected JOB:INDEX@STEP[:SIGNAL], e.g. "
                     "worker:1@100 or worker:1@100:STOP)");
  };
  kill_hook result;
  std::string rest;
  if (auto why = split_hook(text, "STEP", result.task, rest))
    return fail(*why);
  auto colon = rest.find(':');
  auto step = rest.substr(0, colon);
  if (auto plus = step.find('+'); plus != std::string::npos) {
    if (!parse_int(step.substr(plus + 1), result.delay_ms)
        || result.delay_ms <= 0)
      return fail("the delay after the step's '+' must be a number of "
                  "milliseconds > 0");
    step = step.substr(0, plus);
  }
  if (!parse_int(step, result.step) || result.step < 0)
    return fail("the step must be a number >= 0");
  if (colon != std::string::npos) {
    auto name = rest.substr(colon + 1);
    auto plus = name.find('+');
    if (plus != std::string::npos) {
      if (!parse_int(name.substr(plus + 1), result.thaw_after_ms)
          || result.thaw_after_ms <= 0)
        return fail("the thaw delay after '+' must be a number of "
                    "milliseconds > 0");
      name = name.substr(0, plus);
    }
    result.signal = signal_by_name(name);
    if (result.signal == 0)
      return fail("unknown signal '" + name + "' (KILL, TERM, STOP, CONT, "
                  "INT, HUP, QUIT, ABRT, SEGV, USR1, USR2, ...)");
    if (result.thaw_after_ms > 0 && result.signal != SIGSTOP)
      return fail("only STOP takes a thaw delay (+MS)");
  }
  return result;
}

caf::expected<restart_hook> restart_hook::parse(const std::string& text) {
  auto fail = [&](const std::string& why) {
    return bad_arg("--restart '" + text + "': " + why
                   + " (expected JOB:INDEX@MS, e.g. worker:1@500)");
  };
  restart_hook result;
  std::string rest;
  if (auto why = split_hook(text, "MS", result.task, rest))
    return fail(*why);
  if (!parse_int(rest, result.delay_ms) || result.delay_ms < 0)
    return fail("the delay must be a number of milliseconds >= 0");
  return result;
}

caf::error launch_options::validate(const cluster_spec& spec) const {
  if (cluster_file.empty())
    return bad_arg("--cluster FILE is required");
  if (grace_ms < 0)
    return bad_arg("--grace_ms must be >= 0, got " + std::to_string(grace_ms));
  if (term_ms < 0)
    return bad_arg("--term_ms must be >= 0, got " + std::to_string(term_ms));
  if (!(max_wall_s >= 0))
    return bad_arg("--max_wall_s must be >= 0");
  auto check = [&](const std::string& flag, const task_id& t,
                   const std::string& spelt) -> caf::error {
    if (spec.contains(t))
      return caf::none;
    auto n = spec.count(t.job);
    return bad_arg(flag + " " + spelt + ": no task " + t.str()
                   + " in the cluster ("
                   + (n == 0 ? "no job \"" + t.job + "\""
                             : t.job + " has " + std::to_string(n)
                                 + (n == 1 ? " task" : " tasks"))
                   + ")");
  };
  for (const auto& k : kills)
    if (auto err = check("--kill", k.task,
                         k.task.str() + "@" + std::to_string(k.step)))
      return err;
  for (const auto& r : restarts)
    if (auto err = check("--restart", r.task,
                         r.task.str() + "@" + std::to_string(r.delay_ms)))
      return err;
  auto check_job = [&](const std::string& flag,
                       const std::string& job) -> caf::error {
    if (spec.count(job) > 0)
      return caf::none;
    return bad_arg(flag + " " + job + "=...: no job \"" + job
                   + "\" in the cluster");
  };
  for (const auto& kvp : job_programs)
    if (auto err = check_job("--job_program", kvp.first))
      return err;
  for (const auto& kvp : job_args)
    if (auto err = check_job("--job_flags", kvp.first))
      return err;
  return caf::none;
}

std::string launch_usage() {
  return R"(usage: syncfac-launch --cluster FILE [launcher flags] [--] [program flags...]

Starts every task of the cluster file as its own process on this machine:
  PROGRAM --cluster FILE --job_name JOB --task I [program flags...]
prefixes each output line with its time (ISO 8601, UTC) and "[job:index] ",
forwards SIGINT/SIGTERM once (SIGHUP, SIGUSR1 and SIGUSR2 as SIGTERM; a
second one kills every task at once), and
returns the chief's exit code (128+N if signal N ended it; 143 when the
chief stopped on a forwarded signal: preempted, requeue it).

  --cluster FILE       the cluster file (TF_CONFIG shape, docs/cluster.md)
  --program PATH       the node program; a bare name is looked up next to
                       the launcher, then on PATH (default: the build's,
                       )"
         + std::string{default_program} + R"( next to this launcher)
  --task_log_dir DIR   also write each task's output to DIR/job-index.log
                       (old spelling --log_dir; the program's --logdir is
                       its TensorBoard directory)
  --grace_ms N         how long the others may run on after the chief exited
                       before SIGTERM (default 10000)
  --term_ms N          how long after SIGTERM before SIGKILL (default 3000)
  --max_wall_s X       hard limit on the whole run; past it every task is
                       stopped and the launcher exits 124 (default 0: none)
  --log_timestamps[=true|false], --no_log_timestamps
                       a UTC timestamp (2026-12-01T13:56:35.123Z) in front
                       of every line (default true)
  --progress_line auto|always|never
                       the chief's global step, steps/s and ETA redrawn in
                       place on stdout (default auto: when stdout is a
                       terminal)
  --kill JOB:INDEX@STEP[+DELAY][:SIGNAL[+MS]]
                       send SIGNAL (default KILL; TERM, STOP, CONT, INT, ...)
                       to the task once the chief's progress record says
                       global step N >= STEP, or DELAY ms after that
                       (repeatable); STOP+MS sends SIGCONT MS ms later
  --restart JOB:INDEX@MS
                       start the task again MS ms after it died (once per
                       flag; repeatable)
  --job_program JOB=PATH
                       run PATH instead of the program for JOB's tasks
                       (e.g. an evaluator written outside the library)
  --job_flags JOB="FLAGS"
                       JOB's tasks get FLAGS (split at spaces) instead of
                       the program flags
  --help               this text

Every other argument, and everything after "--", goes to the program.
Exit codes: the chief's; 2 bad command line or cluster file; 124 max_wall_s
ran out; 127 the program could not be started.
)";
}

caf::expected<launch_options>
parse_launch_args(const std::vector<std::string>& args) {
  launch_options opts;
  bool any_cluster = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    if (arg == "--") {
      for (size_t k = i + 1; k < args.size(); ++k)
        opts.program_args.push_back(args[k]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
      continue;
    }
    if (arg == "--log_timestamps" || arg == "--no_log_timestamps") {
      opts.log_timestamps = arg == "--log_timestamps";
      continue;
    }
    if (arg.rfind("--log_timestamps=", 0) == 0) {
      auto v = arg.substr(std::strlen("--log_timestamps="));
      if (v == "true" || v == "1" || v == "on")
        opts.log_timestamps = true;
      else if (v == "false" || v == "0" || v == "off")
        opts.log_timestamps = false;
      else
        return bad_arg("--log_timestamps '" + v
                       + "': expected true or false");
      continue;
    }
    std::string name = arg;
    std::optional<std::string> value;
    auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    static const char* ours[] = {"--cluster",     "--program",  "--log_dir",
                                 "--task_log_dir",
                                 "--grace_ms",    "--term_ms",  "--max_wall_s",
                                 "--kill",        "--restart",  "--job_program",
                                 "--job_flags",   "--progress_line"};
    if (std::find_if(std::begin(ours), std::end(ours),
                     [&](const char* x) { return name == x; })
        == std::end(ours)) {
      opts.program_args.push_back(arg);
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size())
        return bad_arg(name + " needs a value");
      value = args[++i];
    }
    const auto& v = *value;
    if (name == "--cluster") {
      opts.cluster_file = v;
      any_cluster = true;
    } else if (name == "--program") {
      opts.program = v;
    } else if (name == "--task_log_dir" || name == "--log_dir") {
      opts.log_dir = v;
    } else if (name == "--progress_line") {
      if (v != "auto" && v != "always" && v != "never")
        return bad_arg("--progress_line '" + v
                       + "': expected auto, always or never");
      opts.progress_line = v;
    } else if (name == "--grace_ms" || name == "--term_ms") {
      int64_t ms = 0;
      if (!parse_int(v, ms) || ms < 0)
        return bad_arg(name + " '" + v
                       + "': expected a number of milliseconds >= 0");
      (name == "--grace_ms" ? opts.grace_ms : opts.term_ms) = ms;
    } else if (name == "--max_wall_s") {
      if (!parse_double(v, opts.max_wall_s) || !(opts.max_wall_s >= 0))
        return bad_arg("--max_wall_s '" + v
                       + "': expected a number of seconds >= 0");
    } else if (name == "--kill") {
      auto hook = kill_hook::parse(v);
      if (!hook)
        return hook.error();
      opts.kills.push_back(std::move(*hook));
    } else if (name == "--restart") {
      auto hook = restart_hook::parse(v);
      if (!hook)
        return hook.error();
      opts.restarts.push_back(std::move(*hook));
    } else if (name == "--job_program" || name == "--job_flags") {
      auto sep = v.find('=');
      if (sep == 0 || sep == std::string::npos)
        return bad_arg(name + " '" + v + "': expected JOB=VALUE");
      auto job = v.substr(0, sep);
      auto rest = v.substr(sep + 1);
      if (name == "--job_program") {
        opts.job_programs[job] = rest;
      } else {
        std::istringstream words{rest};
        auto& list = opts.job_args[job];
        for (std::string w; words >> w;)
          list.push_back(w);
      }
    }
  }
  for (const auto& a : opts.program_args)
    for (const char* taken : {"--cluster", "--job_name", "--task"}) {
      auto t = std::string{taken};
      if (a == t || a.rfind(t + "=", 0) == 0)
        return bad_arg("program flag '" + a
                       + "': the launcher gives every task --cluster, "
                         "--job_name and --task itself");
    }
  if (!any_cluster && !opts.help)
    return bad_arg("--cluster FILE is required");
  return opts;
}

caf::expected<std::string> resolve_program(const std::string& program) {
  auto dir = own_dir();
  if (program.empty()) {
    auto path = dir.empty() ? std::string{default_program}
                            : dir + "/" + default_program;
    if (is_executable_file(path))
      return path;
    return make_error(ec::io_error,
                      "no program: " + path
                        + " is not there (build the target "
                        + default_program + ", or give --program PATH)");
  }
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program))
      return program;
    return make_error(ec::io_error, "--program '" + program
                                      + "': not an executable file");
  }
  if (!dir.empty() && is_executable_file(dir + "/" + program))
    return dir + "/" + program;
  const char* path_env = std::getenv("PATH");
  std::string paths = path_env != nullptr ? path_env : "";
  size_t begin = 0;
  while (begin <= paths.size()) {
    auto end = paths.find(':', begin);
    if (end == std::string::npos)
      end = paths.size();
    auto entry = paths.substr(begin, end - begin);
    if (entry.empty())
      entry = ".";
    if (is_executable_file(entry + "/" + program))
      return entry + "/" + program;
    begin = end + 1;
  }
  return make_error(ec::io_error,
                    "--program '" + program + "': not found next to the "
                      "launcher (" + dir + ") or on PATH");
}

int run_launcher(const launch_options& opts, const cluster_spec& spec,
                 std::ostream& out, std::ostream& err,
                 launch_report* report) {
  auto program = resolve_program(opts.program);
  if (!program) {
    err << "syncfac-launch: " << render(program.error()) << '\n';
    return 127;
  }
  std::map<std::string, std::string> job_programs;
  for (const auto& [job, path] : opts.job_programs) {
    auto resolved = resolve_program(path);
    if (!resolved) {
      err << "syncfac-launch: --job_program " << job << ": "
          << render(resolved.error()) << '\n';
      return 127;
    }
    job_programs[job] = *resolved;
  }
  std::optional<signal_scope> signals;
  if (opts.take_signals)
    signals.emplace();
  launcher l{opts, spec, *program, out, err};
  l.set_job_programs(std::move(job_programs));
  if (signals)
    l.attach(*signals);
  auto code = l.run();
  if (report != nullptr)
    l.fill(*report);
  return code;
}

int launch_main(const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err, bool out_is_terminal) {
  auto opts = parse_launch_args(args);
  if (!opts) {
    err << "syncfac-launch: " << render(opts.error())
        << "\n(syncfac-launch --help lists the flags)\n";
    return 2;
  }
  if (opts->help) {
    out << launch_usage();
    return 0;
  }
  opts->out_is_terminal = out_is_terminal;
  auto spec = cluster_spec::load(opts->cluster_file);
  if (!spec) {
    err << "syncfac-launch: " << render(spec.error()) << '\n';
    return 2;
  }
  if (auto e = opts->validate(*spec)) {
    err << "syncfac-launch: " << render(e) << '\n';
    return 2;
  }
  return run_launcher(*opts, *spec, out, err);
}

} // namespace syncfac
