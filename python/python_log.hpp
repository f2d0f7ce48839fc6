#pragma once

// The run's log lines (global_step: N | loss: ...) on Python's sys.stdout
// rather than the process's file descriptor 1: a notebook or pytest sees
// them where they see print(). Actors write from their own threads while
// the interpreter's thread waits without the GIL; each whole line is
// handed over under the GIL.

#include <mutex>
#include <ostream>
#include <streambuf>
#include <string>

namespace syncfac::python {

/// Unbuffered, so that every character passes through the lock: lines of
/// two actors never interleave.
class python_line_buffer : public std::streambuf {
public:
  /// Lines go to sys.<stream>: "stdout" or "stderr".
  explicit python_line_buffer(const char* stream) : stream_(stream) {
  }

  ~python_line_buffer() override;

  /// Hands over a partial last line (call with the GIL released).
  void finish();

protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

private:
  /// Appends under the lock; writes every completed line.
  void append(const char* s, size_t n);
  /// Writes `line` to sys.<stream_> under the GIL.
  void write(const std::string& line) const;

  const char* stream_;
  std::mutex mtx_;
  std::string pending_;
};

/// A log on sys.stdout (or, given "stderr", sys.stderr).
class python_log : public std::ostream {
public:
  explicit python_log(const char* stream = "stdout")
    : std::ostream(nullptr), buf_(stream) {
    rdbuf(&buf_);
  }

  void finish() {
    buf_.finish();
  }

private:
  python_line_buffer buf_;
};

} // namespace syncfac::python
