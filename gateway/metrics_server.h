// /metrics for the processes that serve no HTTP API of their own: `chorus node --metrics-port P`
// and `chorus run --metrics-port P` answer GET /metrics (Prometheus text) and GET /health on
// 127.0.0.1 (or --metrics-host). `chorus serve` and the coordinator have /metrics in their API.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace chorus {

struct EngineCounters;

class MetricsServer {
 public:
  // Listens on host:port (0: any free port) until destroyed; `text` is called on each scrape
  // (from the listener's thread). Errors (io): the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port,
                                                      std::function<std::string()> text);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One series in Prometheus text (its HELP and TYPE lines, then its value), appended to `out`.
void append_metric(std::string& out, const char* name, const char* type, const char* help, double value);

// An engine's counters as Prometheus text (chorus_engine_*), with its pool when `pages_total`
// is known (> 0): chorus_pool_used_pages / chorus_pool_pages.
std::string engine_metrics_text(const EngineCounters& c, int64_t pages_used = -1, int64_t pages_total = 0);

}  // namespace chorus
