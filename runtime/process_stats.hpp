#pragma once

namespace syncfac {

/// Peak resident set size of this process so far, in MiB.
double peak_rss_mib();

/// Current resident set size of this process, in MiB.
double current_rss_mib();

} // namespace syncfac
