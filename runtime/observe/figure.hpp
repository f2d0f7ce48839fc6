#pragma once

// One figure of a status table: what a number is called in every output,
// declared once. The roles' tables (actors/role_figures.hpp) and the log
// window's (runtime/observe/window_figures.hpp) are lists of these, and
// the summary JSON, /metrics, the metrics lines, TensorBoard and the
// status page are written from them, so a figure cannot reach one output
// and miss another (tests/actors/status_tables.cpp).

#include "runtime/observe/prometheus_text.hpp"

namespace syncfac::observe {

/// How the run's summary folds a figure over the actors of one role.
enum class figure_fold {
  /// Counts: the actors' sum.
  sum,
  /// A position every actor shares (a step): the highest.
  max,
  /// A share or a factor: the actors' mean.
  mean,
};

struct figure {
  /// The key in JSON (the summary, the metrics lines, /status.json) and
  /// the TensorBoard tag.
  const char* key;
  /// The Prometheus family (a counter's ends in "_total").
  const char* metric;
  metric_type type;
  /// "" for a plain number; "seconds", "bytes", "steps", "share".
  const char* unit;
  /// One sentence: the family's HELP, the status page's tooltip.
  const char* help;
  figure_fold fold = figure_fold::sum;
};

} // namespace syncfac::observe
