#pragma once

// The timestamp in front of every line the launcher prints
// (--log_timestamps, on by default): ISO 8601 in UTC with milliseconds,
// "2026-12-01T13:56:35.123Z", so that the lines of tasks on several
// machines, or of a launcher and a scheduler's own log, sort together.

#include <chrono>
#include <string>

namespace syncfac {

/// "YYYY-MM-DDTHH:MM:SS.mmmZ" for `t`.
std::string iso8601_utc(std::chrono::system_clock::time_point t);

} // namespace syncfac
