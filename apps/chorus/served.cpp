#include "apps/chorus/served.h"

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iterator>
#include <thread>

#include "apps/chorus/commands.h"
#include "apps/chorus/gpu_choice.h"
#include "engine/step/trace.h"
#include "gateway/auth.h"
#include "gateway/metrics_server.h"

namespace chorus::app {
namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}
}  // namespace

void stop_on_signals() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
void request_stop() {
  g_stop = true;
}
bool stop_requested() {
  return g_stop;
}
bool read_chat_template(const char* cmd, const std::string& file, std::string* out) {
  if (file.empty()) return true;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "chorus %s: --chat-template %s: cannot be read\n", cmd, file.c_str());
    return false;
  }
  out->assign(std::istreambuf_iterator<char>(in), {});
  return true;
}

bool gather_api_keys(const char* cmd, const std::vector<std::string>& keys,
                     const std::vector<std::string>& files, std::vector<std::string>* out) {
  *out = keys;
  for (const std::string& f : files) {
    auto more = read_key_file(f);
    if (!report(cmd, more)) return false;
    out->insert(out->end(), more->begin(), more->end());
  }
  for (const std::string& k : *out)
    if (k.empty()) {
      std::fprintf(stderr, "chorus %s: an empty --api-key would let anyone in\n", cmd);
      return false;
    }
  return true;
}

std::string served_model_name(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name;
}

std::string default_member_name(const std::string& port) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + port;
}

void wait_for_stop() {
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

std::unique_ptr<Served> load_served(const char* cmd, const std::string& model_path, int threads,
                                    int64_t pages, int budget, int64_t max_view_tokens,
                                    const std::string& device_name, int linear_slots,
                                    std::shared_ptr<Trace> trace, const std::string& kv_type) {
  auto s = std::make_unique<Served>();
  auto model = Model::load(model_path);
  if (!report(cmd, model)) return nullptr;
  s->model = std::move(*model);
  show_load_progress(cmd, *s->model);
  CpuDeviceOptions dev;
  dev.n_threads = threads;
  dev.kv_type = kv_type_flag(kv_type);
  auto device = CpuDevice::create(dev);
  if (!report(cmd, device)) return nullptr;
  s->device = std::move(*device);
  auto gpu = open_gpu(cmd, device_name, *s->model);
  if (!report(cmd, gpu)) return nullptr;
  s->gpu = std::move(*gpu);
  EngineOptions eo;
  eo.n_pages = pages;
  eo.token_budget = budget;
  eo.linear_slots = linear_slots;
  if (max_view_tokens > 0) eo.max_view_tokens = max_view_tokens;
  eo.trace = std::move(trace);
  auto engine = Engine::create(*s->model, *s->device, eo, s->gpu.get());
  if (!report(cmd, engine)) return nullptr;
  s->engine = std::move(*engine);
  return s;
}

bool open_trace(const char* cmd, const std::string& path, std::shared_ptr<Trace>* out) {
  out->reset();
  if (path.empty()) return true;
  if (!std::ofstream(path, std::ios::app)) {
    std::fprintf(stderr, "chorus %s: cannot write the trace to %s\n", cmd, path.c_str());
    return false;
  }
  *out = std::make_shared<Trace>();
  return true;
}

void show_load_progress(const char* cmd, const Model& model) {
  if (!::isatty(STDERR_FILENO)) return;
  const auto t0 = std::chrono::steady_clock::now();
  model.weights.on_panel_progress([cmd = std::string(cmd), t0](size_t done, size_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\rchorus %s: preparing the weights for this CPU: %3d%% (%.1f of %.1f MB, %.1f s)",
                 cmd.c_str(), total ? static_cast<int>(100 * done / total) : 100,
                 static_cast<double>(done) / (1 << 20), static_cast<double>(total) / (1 << 20), s);
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
  });
}

std::optional<std::unique_ptr<MetricsServer>> start_metrics(const char* cmd, const std::string& host,
                                                            int port, std::function<std::string()> text) {
  if (port < 0) return std::unique_ptr<MetricsServer>();
  auto m = MetricsServer::start(host, port, std::move(text));
  if (!report(cmd, m)) return std::nullopt;
  return std::move(*m);
}

void write_trace(const char* cmd, const std::shared_ptr<Trace>& trace, const std::string& path) {
  if (!trace) return;
  if (Status s = trace->write(path); !s.ok()) {
    std::fprintf(stderr, "chorus %s: %s\n", cmd, s.error().message.c_str());
    return;
  }
  std::fprintf(stderr, "chorus %s: trace of %zu events written to %s (%lld older ones dropped)\n", cmd,
               trace->size(), path.c_str(), static_cast<long long>(trace->dropped()));
}

}  // namespace chorus::app
