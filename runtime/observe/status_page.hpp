#pragma once

// The chief's live status page ("/" on its metrics port): the tasks and
// their health, the step rate, the loss and accuracy curves so far, the
// faults and restarts. One HTML document with no external assets: the
// state it was served with is embedded (so it renders at once, also in a
// headless browser), and a small inline script redraws it from
// /status.json every few seconds.

#include <string>

namespace syncfac::observe {

/// The page, with `status_json` (run_status::json()) embedded and `title`
/// (the run's job and task) in its heading.
std::string status_page(const std::string& title,
                        const std::string& status_json);

} // namespace syncfac::observe
