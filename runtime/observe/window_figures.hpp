#pragma once

// The log window's status table: the numbers of a training line of the
// run (every --log_every steps and the last step), declared once. The
// chief writes its lines with these keys (actors/chief_driver.cpp); the
// metrics file and TensorBoard get every number of a line
// (runtime/training_log.hpp), and /metrics, /status.json and the status
// page's figures are written from this list (runtime/observe/run_status.hpp),
// so a number of the line reaches all of them.

#include "runtime/observe/figure.hpp"

namespace syncfac::observe::window {

inline constexpr figure loss{"loss", "syncfac_train_loss",
                             metric_type::gauge, "",
                             "Mean training loss of the last log window."};
inline constexpr figure train_accuracy{
  "train_accuracy", "syncfac_train_accuracy", metric_type::gauge, "share",
  "Training accuracy of the last log window."};
inline constexpr figure stale_pushes{
  "stale_pushes", "syncfac_run_stale_pushes_total", metric_type::counter, "",
  "Gradient pushes dropped as stale, as the workers reported them."};
inline constexpr figure refused_pushes{
  "refused_pushes", "syncfac_run_refused_pushes_total",
  metric_type::counter, "",
  "Gradient pushes the PS shards refused as malformed."};
inline constexpr figure learning_rate{
  "learning_rate", "syncfac_learning_rate", metric_type::gauge, "",
  "The learning rate the last global step was applied with, as "
  "scheduled."};
inline constexpr figure gradient_norm{
  "gradient_norm", "syncfac_gradient_norm", metric_type::gauge, "",
  "The global norm of the last global step's averaged gradient, before "
  "--clip_norm clipped it."};
inline constexpr figure examples_per_s{
  "examples_per_s", "syncfac_examples_per_second", metric_type::gauge,
  "examples/s", "Training examples per second over the last log window."};
inline constexpr figure token_wait_share{
  "token_wait_share", "syncfac_run_token_wait_share", metric_type::gauge,
  "share",
  "The share of the last log window the workers' token requests waited at "
  "the chief."};
inline constexpr figure damping{"damping", "syncfac_kfac_damping",
                                metric_type::gauge, "",
                                "K-FAC's damping."};
inline constexpr figure inverse_sets{
  "inverse_sets", "syncfac_window_inverse_sets", metric_type::gauge, "",
  "K-FAC inverse sets the PS shards installed in the last log window."};
inline constexpr figure preconditioned_steps{
  "preconditioned_steps", "syncfac_window_preconditioned_steps",
  metric_type::gauge, "steps",
  "Steps of the last log window in which a PS shard preconditioned with "
  "K-FAC."};

/// Every figure of a training line, in the order the status page lists
/// them. A line has those its run measures (gradient_norm only with
/// --clip_norm, K-FAC's only under K-FAC, the plain runtime loss and
/// accuracy alone).
inline constexpr figure all[] = {
  loss,          train_accuracy,   examples_per_s, token_wait_share,
  stale_pushes,  refused_pushes,   learning_rate,  gradient_norm,
  damping,       inverse_sets,     preconditioned_steps};

} // namespace syncfac::observe::window
