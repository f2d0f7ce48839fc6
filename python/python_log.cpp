#include "python/python_log.hpp"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace syncfac::python {

python_line_buffer::~python_line_buffer() = default;

void python_line_buffer::write(const std::string& line) const {
  py::gil_scoped_acquire gil;
  try {
    auto out = py::module_::import("sys").attr(stream_);
    if (!out.is_none())
      out.attr("write")(line);
  } catch (py::error_already_set& err) {
    // A closed or broken sys.stdout loses the line, not the run.
    err.discard_as_unraisable("syncfac log line");
  }
}

void python_line_buffer::append(const char* s, size_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  pending_.append(s, n);
  auto end = pending_.rfind('\n');
  if (end == std::string::npos)
    return;
  write(pending_.substr(0, end + 1));
  pending_.erase(0, end + 1);
}

void python_line_buffer::finish() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (pending_.empty())
    return;
  write(pending_ + "\n");
  pending_.clear();
}

python_line_buffer::int_type python_line_buffer::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof()))
    return traits_type::not_eof(ch);
  char c = traits_type::to_char_type(ch);
  append(&c, 1);
  return ch;
}

std::streamsize python_line_buffer::xsputn(const char* s, std::streamsize n) {
  append(s, static_cast<size_t>(n));
  return n;
}

} // namespace syncfac::python
