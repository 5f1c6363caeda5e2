// chorus embedded in a robotics or monitoring process: the topology is a string in the program,
// a sensor loop feeds readings from code at a fixed rate, and the writer's status lines come
// back through a callback — no files, no sockets.
//   ./build/examples/embedded_sensor [seconds]      (default 5; the loop runs at 10 Hz)
#include <caf/all.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "actors/program.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/model/model_paths.h"
#include "topology/topology.h"

using namespace chorus;

// Readings go into a window of the last 20 lines; every 10 readings a writer reads the window
// and says, in a few words, how the robot is doing.
const char* kTopology = R"(
name: robot_status
budget: {seconds: 120}
blocks:
  system:
    chat: system
    text: "You watch a mobile robot's sensors and tell its operator how it is doing."
  sensors:
    view: [system, sensors]
  status:
actors:
  imu:
    kind: source
    from: api
    writes: sensors
    view: [system, sensors]
    keep_lines: 20
    every_lines: 10
    emit: readings
  reporter:
    kind: writer
    on: [readings]
    view: [system, sensors, status]
    writes: status
    prefill: "<|im_start|>user\nLatest readings:\n{{event}}How is the robot doing, in a few words?<|im_end|>\n<|im_start|>assistant\n"
    max_tokens: 24
    stop: ["\n", "<|im_end|>"]
    to: [operator]
  operator:
    kind: sink
    to: callback
)";

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  auto topo = topology::load_string(kTopology, "robot_status");
  if (!topo) {
    std::fprintf(stderr, "%s\n", topo.error().message.c_str());
    return 1;
  }
  auto model = Model::load(default_model_path());
  auto device = CpuDevice::create();
  if (!model || !device) {
    std::fprintf(stderr, "%s\n", (!model ? model.error() : device.error()).to_string().c_str());
    return 1;
  }
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};

  std::mutex out;
  int lines = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  ProgramHooks hooks;
  hooks.sink = [&](const std::string&, const std::string& line) {  // the writer's status lines
    std::lock_guard<std::mutex> l(out);
    ++lines;
    std::printf("[%5.2fs] status: %s", now(), line.c_str());
    std::fflush(stdout);
  };
  auto program = Program::start(sys, *topo, **model, **device, hooks);
  if (!program) {
    std::fprintf(stderr, "%s\n", program.error().message.c_str());
    return 1;
  }

  // The sensor loop: 10 Hz, a battery draining and an obstacle coming closer.
  const auto period = std::chrono::milliseconds(100);
  auto next = std::chrono::steady_clock::now();
  int fed = 0;
  for (int i = 0; now() < seconds; ++i, ++fed) {
    char reading[128];
    std::snprintf(reading, sizeof reading, "t=%.1fs battery=%d%% obstacle=%.1fm speed=%.1fm/s", i * 0.1,
                  100 - i / 2, std::max(0.2, 5.0 - 0.08 * i), 0.5 + 0.3 * std::sin(i * 0.2));
    if (Status s = (*program)->feed("imu", reading); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.error().message.c_str());
      break;
    }
    next += period;
    std::this_thread::sleep_until(next);
  }
  (void)(*program)->close("imu");  // no more readings: the program ends once they are all read
  const ProgramReport r = (*program)->wait();
  std::lock_guard<std::mutex> l(out);
  std::printf("[%5.2fs] %s: %d readings in, %d status lines, %lld tokens generated%s%s\n", now(),
              r.ended_by.c_str(), fed, lines, static_cast<long long>(r.generated_tokens), r.ok() ? "" : ": ",
              r.error.c_str());
  return r.ok() ? 0 : 1;
}
