#pragma once

// What --metrics_port serves: /metrics (Prometheus text: the process, the
// run's figures where this process has them, and whatever the node's
// collectors add: the roles it hosts), and on the process that has the
// run's status, the live status page "/" and its data "/status.json".
// docs/observability.md lists the metrics.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/observe/http_server.hpp"
#include "runtime/observe/prometheus_text.hpp"
#include "runtime/observe/run_status.hpp"

namespace syncfac::observe {

/// More families for /metrics, asked for at each scrape (on the server's
/// thread; must be bounded in time and not throw).
using metric_collector = std::function<std::vector<metric_family>(
  const std::vector<std::pair<std::string, std::string>>& labels)>;

struct metrics_endpoint_config {
  http_server_options server;
  /// The labels of every sample: job and task.
  std::string job = "chief";
  int32_t task = 0;
  /// The run's figures and the status page; null: only /metrics with the
  /// process's figures and the collectors'.
  std::shared_ptr<run_status> status;
  std::vector<metric_collector> collectors;
};

class metrics_endpoint {
public:
  /// Starts serving; an error names the address and port.
  static caf::expected<std::unique_ptr<metrics_endpoint>>
  start(metrics_endpoint_config cfg);

  uint16_t port() const noexcept {
    return server_->port();
  }

  /// Where a browser finds `path` here ("http://127.0.0.1:9400/metrics").
  std::string url(const std::string& path) const;

  /// The answer to a GET of `path` (what the server sends).
  http_response answer(const std::string& path) const;

private:
  metrics_endpoint() = default;

  std::string metrics_text() const;

  metrics_endpoint_config cfg_;
  std::unique_ptr<http_server> server_;
};

/// An endpoint on `port` (nullptr when it is 0: off) labelled `job` and
/// `task`; an error names the port.
caf::expected<std::unique_ptr<metrics_endpoint>>
serve_metrics(int32_t port, const std::string& bind, const std::string& job,
              int32_t task, std::shared_ptr<run_status> status,
              std::vector<metric_collector> collectors);

} // namespace syncfac::observe
