// The `chorus` subcommands. main.cpp parses the command line (CLI11 stays in that one TU)
// and calls these; each returns the process exit code and prints its own errors.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace chorus {
class Trace;
class MetricsServer;
struct Model;
}  // namespace chorus

namespace chorus::app {

struct InfoArgs {
  std::string model;
  bool metadata = false;       // print every metadata key/value
  bool tensors = false;        // list every tensor
  bool check_runtime = false;  // run the actor-runtime self-test
};
int run_info(const InfoArgs& args);

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string decode_ids;     // "1, 2, 3": decode instead of encode
  bool parse_special = true;  // match <|im_start|> and other control tokens in the text
  bool add_special = false;   // add BOS/EOS as the model asks
  bool pieces = false;        // print one line per token: id and its text
  bool chat = false;          // wrap TEXT as a user turn of the model's chat template
};
int run_tokenize(const TokenizeArgs& args);

struct TemplateArgs {
  std::string model;                  // render this GGUF's chat template ...
  std::string template_file;          // ... or this Jinja file, with the variables as given
  std::string input;                  // the variables (a JSON object); "" or "-": stdin
  bool add_generation_prompt = true;  // when the input does not say
  bool batch = false;                 // the input is a list; print a JSON list of {text} / {error}
};
int run_template(const TemplateArgs& args);

struct GenerateArgs {
  std::string model;
  std::string prompt;
  bool chat = false;        // wrap the prompt as a user turn of the chat template
  std::string system;       // with chat: the system message (default: the template's own)
  bool no_special = false;  // do not match control tokens in the prompt text
  int n_predict = 256;      // tokens to generate (-1: until the context is full)
  int n_ctx = 4096;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  int threads = 0;             // 0: one per core
  std::string isa;             // "": best for this CPU
  bool llama_order = false;    // Q4_0, Q4_1, Q8_0 in llama.cpp's order (CpuDeviceOptions::llama_order)
  std::string kv_type;         // --kv-type: f32 or f16 ("": $CHORUS_KV_TYPE, else f32)
  bool verbose = false;        // timing line on stderr
  int parallel = 1;            // generations sharing one prompt block, batched
  std::string device = "cpu";  // cpu, cuda or auto (apps/chorus/gpu_choice.h)
};
int run_generate(const GenerateArgs& args);

struct BenchArgs {
  std::string model;
  int pp = 512;     // prompt tokens for the prompt-processing test (0: skip)
  int tg = 128;     // tokens generated per sequence
  int prompt = 16;  // prompt tokens per sequence before the decode test
  std::vector<int> seqs = {1, 2, 4, 8, 16};
  int reps = 3;  // timed repetitions after one warm-up (best is reported)
  int threads = 0;
  std::string isa;
  bool llama_order = false;
  std::string kv_type;         // --kv-type: f32 or f16 ("": $CHORUS_KV_TYPE, else f32)
  std::string json;            // write results here
  bool views = false;          // the cache-block benchmarks instead (views, sharing, probes)
  bool hybrid = false;         // block views over a hybrid (Gated DeltaNet) model instead
  std::string device = "cpu";  // cpu, cuda or auto (apps/chorus/gpu_choice.h)
  std::string schema;          // a JSON Schema file: the decode test also runs constrained by it
  std::string trace;           // each decode test again, recorded into a trace written here: the trace's cost
};
int run_bench(const BenchArgs& args);

struct NodeArgs {
  std::string model;
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string events_endpoint = "tcp://127.0.0.1:*";  // PUB socket for event frames; "" none
  int64_t pages = 2048;                               // KV pages of 16 positions
  int64_t host_pages = 0;  // pages of host memory a coordinator may offload programs to (0: pauses drop)
  int linear_slots = 0;    // hybrid models: blocks holding a linear state at once (EngineOptions)
  int budget = 256;        // tokens per engine step
  int threads = 0;
  std::string kv_type;  // --kv-type: f32 or f16 ("": $CHORUS_KV_TYPE, else f32)
  size_t max_frame_bytes = 64u << 20;
  std::string device = "cpu";  // cpu, cuda or auto (apps/chorus/gpu_choice.h)
  // Cluster membership (docs/cluster.md); no --etcd: a node on its own, as before.
  std::string etcd;  // http://HOST:PORT
  std::string cluster = "default";
  std::string name;       // "": <hostname>-<port>
  std::string advertise;  // the node port as others reach it ("": the bound endpoint)
  int64_t lease_ttl_s = 3;
  // CURVE (docs/security.md): the node's key pair and the files of client keys it accepts.
  std::string curve_key;
  std::vector<std::string> allow_keys;
  std::string trace;  // --trace FILE: Chrome/Perfetto trace-event JSON of the engine (engine/step/trace.h)
  int metrics_port = -1;  // --metrics-port: GET /metrics there (0: any free port; -1: none)
  std::string metrics_host = "127.0.0.1";
  // Placing actors (docs/cluster.md): labels topologies place by (KEY=VALUE), an actors-only node
  // (no model, no engine: it hosts other programs' sinks and tool sandboxes), and tool sandboxes
  // hosted without the isolation this machine lacks.
  std::vector<std::string> labels;
  bool no_model = false;
  bool unsafe_tools = false;
};
int run_node(const NodeArgs& args);

struct KeygenArgs {
  std::string base;  // writes base.key and base.pub
  bool force = false;
};
int run_keygen(const KeygenArgs& args);

struct CoordinatorArgs {
  std::string model;  // the cluster's model (its tokenizer and chat template)
  std::string etcd = "http://127.0.0.1:2379";
  std::string cluster = "default";
  std::string name;  // "": <hostname>-<port>
  std::string host = "127.0.0.1";
  int port = 8100;  // 0: any free port (printed)
  int64_t lease_ttl_s = 3;
  double heartbeat_s = 0.5;
  double dead_after_s = 2.0;
  double placement_wait_s = 30;   // a `node:` placement waits this long for a live node that satisfies it
  int ctx = 4096;                 // longest conversation (tokens)
  double lease_s = 600;           // idle programs are released after this long
  double check_period_s = 1;      // each node's program scheduler checks this often
  double migrate_after_s = 1;     // a request waiting this long for room moves to a node with room (0: never)
  double restore_wait_s = 300;    // a request for a paused program waits this long, then 503
  std::string move_by = "cost";   // how a moving program's conversation goes along: cost, recompute or kv
  double transfer_mb_per_s = 80;  // the cost model's constants (gateway/gateway_moves.h)
  double recompute_tokens_per_s = 250;
  std::vector<std::string> api_keys;   // --api-key (repeatable)
  std::string chat_template;           // --chat-template FILE: instead of the model's own, as `chorus serve`
  std::vector<std::string> key_files;  // --api-key-file
  bool metrics_public = false;
  std::string curve_key;  // its CURVE key pair, for nodes with one
  std::string trace;      // --trace FILE: requests, membership and placement (engine/step/trace.h)
};
int run_coordinator(const CoordinatorArgs& args);

struct RunArgs {
  std::string file;                // the topology (check)
  std::vector<std::string> files;  // the topologies (run: one program each, on one engine)
  int copies = 1;                  // run: programs per file
  std::vector<std::string> set;    // KEY=VALUE: parameters and key paths
  std::string input;               // the parameter "input"
  bool input_given = false;
  std::string server;              // run on a coordinator or `chorus serve` at this URL (cmd_run_remote.cpp)
  std::string model;               // overrides the topology's model
  int threads = 0;                 // overrides engine.threads
  std::string kv_type;             // --kv-type: f32 or f16 ("": $CHORUS_KV_TYPE, else f32)
  bool events = false;             // print every event to stderr as it fires
  bool quiet = false;              // no report line at the end
  std::string device = "cpu";      // cpu, cuda or auto (apps/chorus/gpu_choice.h)
  std::string policy = "program";  // several programs: program (ProgramManager) or none
  double check_period_s = 5.0;     // the program policy's periodic check
  int64_t host_pages = 0;          // pages host memory may hold for offloaded programs (0: drop only)
  double tool_lease_s = 60;        // a paused program's tool sandbox is removed after this long idle
  bool unsafe_tools = false;       // run tools even where the sandbox's isolation is missing
  std::string trace;  // --trace FILE: Chrome/Perfetto trace-event JSON of the engine (engine/step/trace.h)
  int metrics_port = -1;  // --metrics-port: GET /metrics there (0: any free port; -1: none)
  std::string metrics_host = "127.0.0.1";
  int control_port = -1;  // --control-port: list and patch the programs over HTTP (gateway/control_server.h)
  std::string control_host = "127.0.0.1";
};
int run_check(const RunArgs& args);  // validates without loading a model
int run_run(const RunArgs& args);
int run_remote(const RunArgs& args);  // chorus run --cluster URL (cmd_run_remote.cpp)

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (printed)
  std::string model_name;          // as /v1/models lists it ("": the model's name)
  int64_t pages = 2048;            // KV pages of 16 positions, shared by all programs
  int linear_slots = 0;            // hybrid models: blocks holding a linear state at once (EngineOptions)
  int64_t host_pages = 8192;       // pages host memory may hold for offloaded programs
  int budget = 256;                // tokens per engine step
  int ctx = 4096;                  // longest conversation (tokens)
  double lease_s = 600;            // idle programs are released after this long
  double check_period_s = 5;       // the scheduling policy's period
  double aging_s = 10;             // the restore queue's aging (a waiting program's key halves)
  size_t stored_responses = 4096;  // /v1/responses kept for GET, DELETE and previous_response_id
  double restore_wait_s = 300;     // a request for a paused program waits this long, then 503
  int http_threads = 128;          // requests served at once (each waits for its restore on one)
  bool displace = false;           // ready programs displace acting ones that offload cheaply
  std::string policy = "program";  // program, lru, ttl
  double ttl_s = 2;                // --policy ttl: seconds an idle program stays pinned
  double high_watermark = 0.95;    // program policy: pause above this share of the pages ...
  double low_watermark = 0.85;     // ... restore below this one
  int threads = 0;
  std::string kv_type;                 // --kv-type: f32 or f16 ("": $CHORUS_KV_TYPE, else f32)
  std::string device = "cpu";          // cpu, cuda or auto (apps/chorus/gpu_choice.h)
  std::vector<std::string> api_keys;   // --api-key (repeatable)
  std::string chat_template;           // --chat-template FILE: instead of the model's own
  std::vector<std::string> key_files;  // --api-key-file (one key per line)
  bool metrics_public = false;         // /metrics and /health without a key
  std::string trace;  // --trace FILE: Chrome/Perfetto trace-event JSON of the engine (engine/step/trace.h)
};
int run_serve(const ServeArgs& args);

struct SimulateArgs {
  std::vector<int> concurrency = {8, 16, 32, 64, 128, 256};
  int steps = 8;
  int64_t pages = 2048;
  double duration_s = 600;  // simulated seconds per point
  double tool_scale_s = 1.0;
  int64_t host_pages = 0;  // host memory for the program policy's offloaded pauses
  bool displace = false;   // program policy: ready programs displace acting ones that offload cheaply
  double aging_s = 10;     // program policy: a waiting program's key halves every aging_s
  uint64_t seed = 1;
  std::string json;
  std::vector<int> nodes;    // not empty: the cluster simulator (engine/sched/cluster_sim.h), per size
  double tool_spread = 2.0;  // cluster: log2 of the widest factor on a program's tool outputs
};
int run_simulate(const SimulateArgs& args);

struct TraceArgs {
  std::string file;   // a trace written by --trace
  std::string html;   // "": print the summary only; else write the timeline page here
  std::string title;  // the page's title (default: the file's name)
};
int run_trace(const TraceArgs& args);

// What a serving command (node, serve) loads: the model, a CPU device (and the GPU `device`
// asks for), an engine over them.
struct Served;
// Loads them or prints "chorus CMD: <error>" and returns nullptr.
std::unique_ptr<Served> load_served(const char* cmd, const std::string& model, int threads, int64_t pages,
                                    int budget, int64_t max_view_tokens = 0,
                                    const std::string& device = "cpu", int linear_slots = 0,
                                    std::shared_ptr<Trace> trace = nullptr, const std::string& kv_type = "");
// --trace FILE: a trace the engine records into (engine/step/trace.h), the file checked writable
// now; null for "" (no trace). False (printed as "chorus CMD: ...") when the file cannot be written.
bool open_trace(const char* cmd, const std::string& path, std::shared_ptr<Trace>* out);
// When stderr is a terminal: a progress line while the engine repacks `model`'s weights for the
// CPU kernels (the slow part of loading a large model), "chorus CMD: preparing the weights ...".
void show_load_progress(const char* cmd, const Model& model);
// --metrics-port P (gateway/metrics_server.h): a listener serving `text` at /metrics, or null for
// P < 0. Nothing (printed as "chorus CMD: ...") when it cannot be bound.
std::optional<std::unique_ptr<MetricsServer>> start_metrics(const char* cmd, const std::string& host,
                                                            int port, std::function<std::string()> text);
// Writes it (nothing for a null trace), with one line on stderr: events, dropped, the file.
void write_trace(const char* cmd, const std::shared_ptr<Trace>& trace, const std::string& path);

// The serving commands (serve, node, coordinator) run until SIGINT or SIGTERM, and `run` stops its
// programs at one: stop_on_signals() installs the handlers, stop_requested() says whether one came
// (or request_stop() was called), wait_for_stop() returns once it has.
void stop_on_signals();
void request_stop();
bool stop_requested();
void wait_for_stop();
// --api-key and --api-key-file, read into `out`; false (the error printed as "chorus CMD: ...")
// for a file that cannot be read or an empty key.
bool gather_api_keys(const char* cmd, const std::vector<std::string>& keys,
                     const std::vector<std::string>& files, std::vector<std::string>* out);
// --chat-template FILE read into `out` ("" leaves it empty); false (printed) when it cannot be read.
bool read_chat_template(const char* cmd, const std::string& file, std::string* out);
// The model's id in /v1/models: the file's name without its directory and `.gguf`.
std::string served_model_name(const std::string& path);
// A cluster member's default name: HOSTNAME-PORT.
std::string default_member_name(const std::string& port);

// Prints "chorus CMD: <error>" to stderr when `r` holds an error; returns whether it holds a value.
template <class R>
bool report(const char* cmd, const R& r) {
  if (r.ok()) return true;
  std::fprintf(stderr, "chorus %s: %s\n", cmd, r.error().to_string().c_str());
  return false;
}

}  // namespace chorus::app
