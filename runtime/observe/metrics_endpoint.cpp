#include "runtime/observe/metrics_endpoint.hpp"

#include "runtime/observe/http_request.hpp"
#include "runtime/observe/status_page.hpp"
#include "runtime/process_stats.hpp"

namespace syncfac::observe {

caf::expected<std::unique_ptr<metrics_endpoint>>
metrics_endpoint::start(metrics_endpoint_config cfg) {
  std::unique_ptr<metrics_endpoint> ep{new metrics_endpoint};
  ep->cfg_ = std::move(cfg);
  auto* self = ep.get();
  auto srv = http_server::start(ep->cfg_.server, [self](const std::string& p) {
    return self->answer(p);
  });
  if (!srv)
    return srv.error();
  ep->server_ = std::move(*srv);
  return ep;
}

std::string metrics_endpoint::metrics_text() const {
  std::vector<std::pair<std::string, std::string>> labels{
    {"job", cfg_.job}, {"task", std::to_string(cfg_.task)}};
  std::vector<metric_family> fams;
  fams.push_back({"syncfac_up", "1 while this task's process serves metrics.",
                  metric_type::gauge, {{labels, 1.0}}});
  fams.push_back({"syncfac_process_resident_memory_bytes",
                  "Resident set size of this task's process.",
                  metric_type::gauge,
                  {{labels, current_rss_mib() * 1024.0 * 1024.0}}});
  fams.push_back({"syncfac_metrics_requests_total",
                  "HTTP requests this metrics server answered.",
                  metric_type::counter,
                  {{labels, static_cast<double>(server_ ? server_->requests()
                                                        : 0)}}});
  if (cfg_.status)
    for (auto& f : cfg_.status->families(labels))
      fams.push_back(std::move(f));
  for (const auto& collect : cfg_.collectors)
    for (auto& f : collect(labels))
      fams.push_back(std::move(f));
  return exposition_text(fams);
}

http_response metrics_endpoint::answer(const std::string& path) const {
  if (path == "/metrics")
    return {200, exposition_content_type, metrics_text()};
  if (cfg_.status && path == "/status.json")
    return {200, "application/json", cfg_.status->json()};
  if (cfg_.status && (path == "/" || path == "/index.html"))
    return {200, "text/html; charset=utf-8",
            status_page(cfg_.job + ":" + std::to_string(cfg_.task),
                        cfg_.status->json())};
  return {404, "text/plain; charset=utf-8",
          "not found: " + path + " (try /metrics"
            + (cfg_.status ? std::string{", / or /status.json)"}
                           : std::string{")"})
            + "\n"};
}

std::string metrics_endpoint::url(const std::string& path) const {
  return http_url(cfg_.server.bind_address, port(), path);
}

caf::expected<std::unique_ptr<metrics_endpoint>>
serve_metrics(int32_t port, const std::string& bind, const std::string& job,
              int32_t task, std::shared_ptr<run_status> status,
              std::vector<metric_collector> collectors) {
  if (port <= 0)
    return std::unique_ptr<metrics_endpoint>{};
  metrics_endpoint_config cfg;
  cfg.server.port = static_cast<uint16_t>(port);
  cfg.server.bind_address = bind;
  cfg.job = job;
  cfg.task = task;
  cfg.status = std::move(status);
  cfg.collectors = std::move(collectors);
  return metrics_endpoint::start(std::move(cfg));
}

} // namespace syncfac::observe
