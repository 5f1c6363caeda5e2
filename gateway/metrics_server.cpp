// The /metrics listener of node and run (gateway/metrics_server.h).
#include "gateway/metrics_server.h"

#include "gateway/http_listen.h"

#include <thread>

#include "engine/step/engine.h"

namespace chorus {

struct MetricsServer::Impl {
  HttpListener http;
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() = default;

int MetricsServer::port() const {
  return impl_->http.port;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            std::function<std::string()> text) {
  auto impl = std::make_unique<Impl>();
  impl->http.svr.new_task_queue = [] { return new httplib::ThreadPool(1); };  // scrapes are rare
  impl->http.svr.Get("/metrics", [text](const httplib::Request&, httplib::Response& r) {
    r.set_content(text(), "text/plain; version=0.0.4");
  });
  impl->http.svr.Get("/health", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("{\"status\": \"ok\"}", "application/json");
  });
  if (!impl->http.start(host, port))
    return make_error(
        Errc::io, "metrics: cannot bind " + host + ":" + (port == 0 ? "(any port)" : std::to_string(port)));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

void append_metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(value) + "\n";
}

std::string engine_metrics_text(const EngineCounters& c, int64_t pages_used, int64_t pages_total) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    append_metric(out, name, type, help, v);
  };
  auto n = [](const std::atomic<int64_t>& a) {
    return static_cast<double>(a.load(std::memory_order_relaxed));
  };
  metric("chorus_engine_steps_total", "counter", "engine steps that ran a forward pass", n(c.steps));
  metric("chorus_engine_decode_tokens_total", "counter",
         "tokens decoded (one per generating request and step)", n(c.decode_tokens));
  metric("chorus_engine_prefill_tokens_total", "counter", "prompt and forward tokens run",
         n(c.prefill_tokens));
  metric("chorus_engine_probe_tokens_total", "counter", "tokens of probes' questions run", n(c.probe_tokens));
  metric("chorus_engine_requests_total", "counter", "requests submitted to the engine", n(c.requests));
  metric("chorus_engine_finished_total", "counter", "requests that ended, for any reason", n(c.finished));
  metric("chorus_engine_in_flight", "gauge", "requests in the engine now (as of its last step)",
         n(c.in_flight));
  metric("chorus_engine_busy_seconds_total", "counter", "seconds spent in steps that ran a forward pass",
         n(c.busy_ns) * 1e-9);
  if (pages_total > 0) {
    metric("chorus_pool_pages", "gauge", "KV pages of the pool", static_cast<double>(pages_total));
    if (pages_used >= 0)
      metric("chorus_pool_used_pages", "gauge", "KV pages of the pool in use now (shared pages once)",
             static_cast<double>(pages_used));
  }
  return out;
}

}  // namespace chorus
