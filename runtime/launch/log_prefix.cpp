#include "runtime/launch/log_prefix.hpp"

#include <cstdio>
#include <ctime>

namespace syncfac {

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  auto secs = static_cast<std::time_t>(ms / 1000);
  auto frac = ms % 1000;
  if (frac < 0) { // before 1970
    frac += 1000;
    --secs;
  }
  std::tm parts{};
  ::gmtime_r(&secs, &parts);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                parts.tm_hour, parts.tm_min, parts.tm_sec,
                static_cast<int>(frac));
  return buf;
}

} // namespace syncfac
