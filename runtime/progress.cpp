#include "runtime/progress.hpp"

#include <unistd.h>

namespace syncfac {

progress_line::progress_line(int64_t total_steps, bool enabled,
                             std::FILE* out)
  : total_(total_steps),
    active_(enabled && isatty(fileno(out)) != 0),
    out_(out),
    start_(clock::now()),
    last_draw_(start_) {
}

progress_line::~progress_line() {
  clear();
}

void progress_line::update(int64_t step) {
  if (!active_)
    return;
  auto now = clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(250)
      && step < total_)
    return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(step) / elapsed : 0.0;
  double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : 0.0;
  std::fprintf(out_, "\r\033[K[%lld/%lld] %.1f steps/s, ETA %.0f s",
               static_cast<long long>(step), static_cast<long long>(total_),
               rate, eta);
  std::fflush(out_);
  drawn_ = true;
}

void progress_line::clear() {
  if (!active_ || !drawn_)
    return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

} // namespace syncfac
