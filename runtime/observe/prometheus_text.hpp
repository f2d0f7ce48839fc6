#pragma once

// Prometheus's text exposition format (version 0.0.4), written by hand:
// Debian has no prometheus-cpp. Pure: families of samples in, the text of
// a /metrics answer out. docs/observability.md lists the metrics syncfac
// serves.
//
//   # HELP syncfac_global_step The run's global step.
//   # TYPE syncfac_global_step gauge
//   syncfac_global_step{job="chief",task="0"} 120

#include <string>
#include <utility>
#include <vector>

namespace syncfac::observe {

/// One line of a family: its labels (in order) and its value.
struct metric_sample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

enum class metric_type { counter, gauge };

/// A metric family: name (a counter's ends in "_total"), help, type and
/// its samples.
struct metric_family {
  std::string name;
  std::string help;
  metric_type type = metric_type::gauge;
  std::vector<metric_sample> samples;
};

/// The exposition text of `families` (the Content-Type is
/// exposition_content_type). Families without samples are left out,
/// families of one name are written as one (the first one's help and
/// type); characters a name may not hold become '_'.
std::string exposition_text(const std::vector<metric_family>& families);

inline constexpr const char* exposition_content_type
  = "text/plain; version=0.0.4; charset=utf-8";

/// A label value escaped for the text format (\\, \" and \n).
std::string escape_label_value(const std::string& value);

/// A sample value as the format writes it: NaN, +Inf, -Inf, or the
/// shortest decimal that reads back as the same double.
std::string format_sample_value(double value);

/// `name` with every character outside [a-zA-Z0-9_:] (and a leading
/// digit) replaced by '_'.
std::string sanitize_metric_name(const std::string& name);

} // namespace syncfac::observe
