// chorus: command-line entry point. Parses arguments (CLI11 lives only in this file) and
// dispatches to the subcommands in commands.h.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "apps/chorus/commands.h"
#include "engine/model/model_paths.h"

namespace {

constexpr const char* kLlamaOrderHelp =
    "Q4_0, Q4_1 and Q8_0 matrices on llama.cpp's row kernels, in its order of operations: logits "
    "bit-identical to llama.cpp's where the integer matrices are of those types, slower than the "
    "default weight panels (also CHORUS_LLAMA_ORDER=1, which every command reads)";

constexpr const char* kKvTypeHelp =
    "The KV cache's element type: f32 (the default: exact, llama.cpp's f32 set-up) or f16 (half the "
    "pages' bytes and attention's reads; docs/engine.md). Also CHORUS_KV_TYPE=f16|f32, which every "
    "command reads (this flag wins)";

// `--kv-type` (generate, bench, node, serve, run): CpuDeviceOptions::kv_type.
void add_kv_type(CLI::App* cmd, std::string* kv_type) {
  cmd->add_option("--kv-type", *kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "f16"}));
}

// `--linear-slots` (node, serve): EngineOptions::linear_slots.
void add_linear_slots(CLI::App* cmd, int* slots) {
  cmd->add_option(
         "--linear-slots", *slots,
         "Hybrid models: blocks whose linear state is held at once (each written or read; a paused one "
         "holds none); 0: on a GPU 64 or what half its memory holds, on the CPU no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// `--metrics-port`, `--metrics-host` (node, run): gateway/metrics_server.h.
void add_metrics(CLI::App* cmd, int* port, std::string* host) {
  cmd->add_option(
         "--metrics-port", *port,
         "Serve Prometheus text at http://HOST:PORT/metrics (engine steps, tokens, requests, the pool); "
         "0: any free port, printed")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-host", *host, "Where --metrics-port listens")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "chorus: a runtime for asynchronous LLM agents that share one model's KV cache.\n"
      "The default model is SmolLM2-135M-Instruct (Q4_1), fetched by scripts/setup.sh into\n"
      "$CHORUS_HOME/models (default ~/.cache/chorus/models); --model or $CHORUS_MODEL override it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "chorus " CHORUS_VERSION_STRING);
  std::string log_level = "warn";
  auto* log_opt =
      app.add_option("--log-level", log_level,
                     "trace, debug, info, warn, error, off (default: info for serve, coordinator and node, "
                     "which log a line per request, placement and membership change; warn otherwise)")
          ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  chorus::app::InfoArgs info;
  info.model = chorus::default_model_path();
  auto* info_cmd =
      app.add_subcommand("info", "Describe a GGUF model: architecture, sizes, tensor types, special tokens");
  info_cmd->add_option("--model,-m", info.model, "GGUF file")->capture_default_str();
  info_cmd->add_flag("--metadata", info.metadata, "Print every metadata key and value");
  info_cmd->add_flag("--tensors", info.tensors, "List every tensor: name, type, shape, size, offset");
  info_cmd->add_flag("--check-runtime", info.check_runtime,
                     "Also self-test the actor runtime (CAF + FlatBuffers)");

  chorus::app::TokenizeArgs tok;
  tok.model = chorus::default_model_path();
  auto* tok_cmd = app.add_subcommand("tokenize", "Text to token ids (or ids to text with --decode)");
  tok_cmd->add_option("--model,-m", tok.model, "GGUF file")->capture_default_str();
  tok_cmd->add_option("text", tok.text, "Text to tokenize");
  tok_cmd->add_option("--decode,-d", tok.decode_ids,
                      "Token ids to turn back into text, e.g. \"1, 9159, 28\"");
  tok_cmd->add_flag("!--no-special", tok.parse_special,
                    "Treat <|im_start|> and other control-token text as plain text");
  tok_cmd->add_flag("--add-special", tok.add_special, "Add BOS/EOS if the model asks for them");
  tok_cmd->add_flag("--pieces,-p", tok.pieces, "Print one line per token: id and the text it stands for");
  tok_cmd->add_flag("--chat", tok.chat, "Wrap the text as a user turn of the chat template");

  chorus::app::TemplateArgs tmpl;
  tmpl.model = chorus::default_model_path();
  auto* tmpl_cmd = app.add_subcommand("template", "Render a chat template (the model's, or a Jinja file)");
  tmpl_cmd->add_option("--model,-m", tmpl.model, "GGUF file whose chat template to render")
      ->capture_default_str();
  tmpl_cmd->add_option("--template,-t", tmpl.template_file,
                       "A Jinja file to render instead, variables as given");
  tmpl_cmd->add_option("--input,-i", tmpl.input,
                       "JSON variables: {\"messages\": [...], \"tools\": [...], ...} (default: stdin)");
  tmpl_cmd->add_flag("!--no-generation-prompt", tmpl.add_generation_prompt,
                     "Do not end ready for the assistant (unless the input says add_generation_prompt)");
  tmpl_cmd->add_flag("--batch", tmpl.batch, "The input is a list; print a JSON list of {text} or {error}");

  chorus::app::GenerateArgs gen;
  gen.model = chorus::default_model_path();
  auto* gen_cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed as it is produced");
  gen_cmd->add_option("--model,-m", gen.model, "GGUF file")->capture_default_str();
  gen_cmd->add_option("prompt", gen.prompt, "The prompt (with --chat: the user's message)")->required();
  gen_cmd->add_flag("--chat", gen.chat, "Apply the model's chat template to the prompt");
  gen_cmd->add_option("--system", gen.system,
                      "With --chat: the system message (default: the template's own, if any)");
  gen_cmd->add_flag("--no-special", gen.no_special, "Treat control-token text in the prompt as plain text");
  gen_cmd->add_option("-n,--n-predict", gen.n_predict, "Tokens to generate; -1 until the context is full")
      ->capture_default_str();
  gen_cmd->add_option("--ctx", gen.n_ctx, "Context size in tokens (prompt + generated)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  gen_cmd->add_option("--temp", gen.temperature, "Temperature; 0 is greedy")->capture_default_str();
  gen_cmd->add_option("--top-k", gen.top_k, "Keep the k most likely tokens; 0 off")->capture_default_str();
  gen_cmd->add_option("--top-p", gen.top_p, "Nucleus sampling threshold; 1 off")->capture_default_str();
  gen_cmd->add_option("--min-p", gen.min_p, "Drop tokens below min-p times the best one's probability; 0 off")
      ->capture_default_str();
  gen_cmd->add_option("--repeat-penalty", gen.repeat_penalty, "Penalty for the last 64 tokens; 1 off")
      ->capture_default_str();
  gen_cmd->add_option("--seed", gen.seed, "Random seed")->capture_default_str();
  gen_cmd->add_option("-t,--threads", gen.threads, "Compute threads; 0 one per core")->capture_default_str();
  gen_cmd
      ->add_option(
          "--device", gen.device,
          "Where the forward passes run: cpu, cuda, or auto (CUDA when a GPU is present and runs the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  gen_cmd->add_option("--isa", gen.isa, "Force a kernel set: scalar, avx2, avx512");
  gen_cmd->add_flag("--llama-order", gen.llama_order, kLlamaOrderHelp);
  add_kv_type(gen_cmd, &gen.kv_type);
  gen_cmd->add_flag("-v,--verbose", gen.verbose, "Print timings to stderr");
  gen_cmd
      ->add_option("--parallel", gen.parallel,
                   "Generations sharing one prompt block (each writes its own block; all batched)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));

  chorus::app::BenchArgs bench;
  bench.model = chorus::default_model_path();
  auto* bench_cmd =
      app.add_subcommand("bench", "Measure prompt processing and decode throughput (1..N sequences)");
  bench_cmd->add_option("--model,-m", bench.model, "GGUF file")->capture_default_str();
  bench_cmd->add_option("--pp", bench.pp, "Prompt tokens for the prompt-processing test; 0 skips it")
      ->capture_default_str();
  bench_cmd->add_option("--tg", bench.tg, "Tokens generated per sequence")->capture_default_str();
  bench_cmd
      ->add_option("--prompt", bench.prompt,
                   "Prompt tokens of each sequence before the decode test (llama-batched-bench's -npp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  bench_cmd->add_option("--seqs", bench.seqs, "Concurrent sequence counts to measure")
      ->delimiter(',')
      ->capture_default_str();
  bench_cmd->add_option("--reps", bench.reps, "Timed repetitions after a warm-up; the best is reported")
      ->capture_default_str();
  bench_cmd->add_option("-t,--threads", bench.threads, "Compute threads; 0 one per core")
      ->capture_default_str();
  bench_cmd
      ->add_option(
          "--device", bench.device,
          "Where the forward passes run: cpu, cuda, or auto (CUDA when a GPU is present and runs the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  bench_cmd->add_option("--isa", bench.isa, "Force a kernel set: scalar, avx2, avx512");
  bench_cmd->add_flag("--llama-order", bench.llama_order, kLlamaOrderHelp);
  add_kv_type(bench_cmd, &bench.kv_type);
  bench_cmd->add_option(
      "--trace", bench.trace,
      "Run each decode test again recorded into a trace (its cost per step), written to FILE");
  bench_cmd->add_option("--json", bench.json, "Also write the results as JSON to this file");
  bench_cmd
      ->add_option(
          "--schema", bench.schema,
          "A JSON Schema file: each decode test runs again constrained by it (the mask's cost per step)")
      ->check(CLI::ExistingFile);
  bench_cmd->add_flag("--views", bench.views,
                      "Cache-block benchmarks: view of 4 blocks vs contiguous, 8 generations over a shared "
                      "prompt vs private copies, probe latency under load");
  bench_cmd->add_flag(
      "--hybrid", bench.hybrid,
      "Hybrid-model benchmarks (qwen35): decode with a view of 3 blocks vs contiguous for 1 and 8 "
      "generates, time spent composing view states, linear-layer memory per block (--pp sets the "
      "context length, --tg the tokens per generate)");

  chorus::app::NodeArgs node;
  node.model = chorus::default_model_path();
  auto* node_cmd =
      app.add_subcommand("node", "Serve the engine on a ZeroMQ node port (FlatBuffers frames; see schemas/)");
  node_cmd->add_option("--model,-m", node.model, "GGUF file")->capture_default_str();
  node_cmd
      ->add_option("--endpoint", node.endpoint,
                   "ZeroMQ endpoint to bind; tcp://127.0.0.1:* picks a free port")
      ->capture_default_str();
  node_cmd
      ->add_option("--events-endpoint", node.events_endpoint,
                   "ZeroMQ PUB endpoint for event frames (topics block:<id>); empty for none")
      ->capture_default_str();
  node_cmd->add_option(
      "--trace", node.trace,
      "Write a Chrome/Perfetto trace-event JSON of what the engine did to FILE at exit (docs/trace.md)");
  add_metrics(node_cmd, &node.metrics_port, &node.metrics_host);
  node_cmd->add_option("--pages", node.pages, "KV cache pages of 16 positions")->capture_default_str();
  node_cmd
      ->add_option(
          "--host-pages", node.host_pages,
          "In a cluster: pages of host memory the coordinator may offload this node's paused programs "
          "to (0: their KV is dropped and recomputed)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_linear_slots(node_cmd, &node.linear_slots);
  node_cmd->add_option("--budget", node.budget, "Tokens per engine step")->capture_default_str();
  add_kv_type(node_cmd, &node.kv_type);
  node_cmd->add_option("-t,--threads", node.threads, "Compute threads; 0 one per core")
      ->capture_default_str();
  node_cmd
      ->add_option(
          "--device", node.device,
          "Where the forward passes run: cpu, cuda, or auto (CUDA when a GPU is present and runs the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  node_cmd->add_option("--max-frame-bytes", node.max_frame_bytes, "Larger frames are refused")
      ->capture_default_str();
  node_cmd->add_option(
      "--etcd", node.etcd,
      "Join a cluster: etcd's client URL (http://HOST:PORT); without it the node runs on its own");
  node_cmd->add_option("--cluster", node.cluster, "The cluster's name (its keys in etcd: /chorus/NAME/)")
      ->capture_default_str();
  node_cmd->add_option("--name", node.name, "This node's name in the cluster (default: HOSTNAME-PORT)");
  node_cmd->add_option(
      "--label", node.labels,
      "KEY=VALUE: a label topologies place actors by (`node: {label: KEY=VALUE}`); repeatable");
  node_cmd->add_flag("--no-model", node.no_model,
                     "An actors-only node: no model and no engine; it hosts other programs' sinks and tool "
                     "sandboxes placed on it (docs/cluster.md, Placing actors)");
  node_cmd->add_flag("--unsafe-tools", node.unsafe_tools,
                     "Host tool sandboxes even without the isolation this machine lacks (bubblewrap, a pids "
                     "cgroup)");
  node_cmd->add_option("--advertise", node.advertise,
                       "The node port as other processes reach it (default: the bound endpoint)");
  node_cmd
      ->add_option("--lease-ttl", node.lease_ttl_s,
                   "Seconds a silent node stays a member (its etcd lease; renewed every third of it)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  node_cmd
      ->add_option(
          "--curve-key", node.curve_key,
          "CURVE: this node's key pair (NAME.key from `chorus keygen`); both sockets then accept only "
          "the clients of --allow-keys. Required on endpoints other machines reach")
      ->check(CLI::ExistingFile);
  node_cmd
      ->add_option(
          "--allow-keys", node.allow_keys,
          "CURVE: a file of client public keys (NAME.pub files, or their lines together); repeatable")
      ->check(CLI::ExistingFile);

  chorus::app::KeygenArgs keygen;
  auto* keygen_cmd = app.add_subcommand(
      "keygen", "Make a CURVE key pair for the node port and its clients: NAME.key (mode 0600) and NAME.pub");
  keygen_cmd->add_option("name", keygen.base, "Path and name of the pair, without suffix")->required();
  keygen_cmd->add_flag("--force", keygen.force, "Replace existing files");

  chorus::app::CoordinatorArgs coord;
  coord.model = chorus::default_model_path();
  auto* coord_cmd = app.add_subcommand(
      "coordinator",
      "A cluster's coordinator: the OpenAI-compatible API over the cluster's nodes, leader election, "
      "membership and heartbeats, GET /cluster (docs/cluster.md)");
  coord_cmd
      ->add_option("--model,-m", coord.model, "The cluster's GGUF file (its tokenizer and chat template)")
      ->capture_default_str();
  coord_cmd->add_option("--ctx", coord.ctx, "Longest conversation (tokens)")->capture_default_str();
  coord_cmd->add_option("--trace", coord.trace,
                        "Write a Chrome/Perfetto trace-event JSON of the requests, the membership and the "
                        "programs' placement to FILE at exit (docs/trace.md)");
  coord_cmd->add_option("--api-key", coord.api_keys,
                        "A key clients must send, as for `chorus serve`; repeatable");
  coord_cmd->add_option("--api-key-file", coord.key_files, "A file of keys, one per line; repeatable");
  coord_cmd->add_option("--chat-template", coord.chat_template,
                        "A Jinja chat template file to render prompts with, instead of the model's own");
  coord_cmd->add_flag("--metrics-public", coord.metrics_public,
                      "With keys: /metrics and /health answer without one");
  coord_cmd->add_option("--lease", coord.lease_s, "Seconds an idle program is kept")->capture_default_str();
  coord_cmd
      ->add_option("--check-period", coord.check_period_s, "Seconds between each node's scheduling checks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd
      ->add_option("--migrate-after", coord.migrate_after_s,
                   "Seconds a request waits for room on its node before it moves to a node with room (the "
                   "global waiting queue; 0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  coord_cmd
      ->add_option("--move-by", coord.move_by,
                   "How a program that moves takes its conversation along: its KV pages (kv), recomputed "
                   "from its history (recompute), or whichever the cost model finds cheaper (cost)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cost", "recompute", "kv"}));
  coord_cmd
      ->add_option("--transfer-mbps", coord.transfer_mb_per_s,
                   "The cost model: MB of KV a node link carries per second")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd
      ->add_option("--recompute-tps", coord.recompute_tokens_per_s,
                   "The cost model: positions a node prefills per second")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd
      ->add_option("--restore-wait", coord.restore_wait_s,
                   "Seconds a request waits for its program's room, then 503 program_paused")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd->add_option("--etcd", coord.etcd, "etcd's client URL")->capture_default_str();
  coord_cmd->add_option("--cluster", coord.cluster, "The cluster's name")->capture_default_str();
  coord_cmd->add_option("--name", coord.name, "This coordinator's name (default: HOSTNAME-PORT)");
  coord_cmd->add_option("--host", coord.host, "Address to listen on")->capture_default_str();
  coord_cmd->add_option("--port,-p", coord.port, "HTTP port; 0 picks a free one")->capture_default_str();
  coord_cmd->add_option("--lease-ttl", coord.lease_ttl_s, "Seconds its leadership outlives it (etcd lease)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  coord_cmd->add_option("--heartbeat", coord.heartbeat_s, "Seconds between heartbeats to each node")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd
      ->add_option("--dead-after", coord.dead_after_s,
                   "Seconds without an answer after which a node is down and its lease is revoked")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  coord_cmd
      ->add_option("--placement-wait", coord.placement_wait_s,
                   "Seconds a program's placed actor (`node:` in its topology) waits for a live node that "
                   "satisfies its placement, at its start and after its node was lost; then the program ends "
                   "with an error naming the placement")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  coord_cmd
      ->add_option("--curve-key", coord.curve_key,
                   "CURVE: this coordinator's key pair (NAME.key), for the nodes that have a CURVE key; "
                   "allow its NAME.pub on them")
      ->check(CLI::ExistingFile);

  chorus::app::RunArgs run;
  auto* run_cmd = app.add_subcommand(
      "run", "Run topology files (topologies/README.md), each as a program, on one engine until they end");
  run_cmd->add_option("files", run.files, "Topology file(s) (YAML); several run at once on one engine")
      ->required();
  run_cmd->add_option(
      "--trace", run.trace,
      "Write a Chrome/Perfetto trace-event JSON of what the engine did to FILE at exit (docs/trace.md)");
  add_metrics(run_cmd, &run.metrics_port, &run.metrics_host);
  run_cmd
      ->add_option(
          "--control-port", run.control_port,
          "List and patch the running programs over HTTP at http://HOST:PORT/programs (no "
          "authentication: loopback by default; topologies/README.md \"Patches\"); 0: any free port, printed")
      ->check(CLI::Range(0, 65535));
  run_cmd->add_option("--control-host", run.control_host, "Where --control-port listens")
      ->capture_default_str();
  run_cmd->add_option(
      "--cluster,--server", run.server,
      "Run it on a cluster: the coordinator's URL (or a `chorus serve`'s), which places it on the "
      "node with the most room; its stdout sinks and report come back when it ends "
      "(CHORUS_API_KEY: the key, where one is asked). Several coordinators, comma-separated: "
      "sent to the leader, and started again through the next one if its coordinator dies "
      "under it");
  run_cmd->add_option("--copies", run.copies, "Programs per file, all at once on the one engine")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  run_cmd->add_option("--set", run.set,
                      "KEY=VALUE: a parameter, or a key path such as budget.tokens=64 (repeatable)");
  auto* input_opt =
      run_cmd->add_option("--input,-i", run.input, "The parameter \"input\" (the user's question, say)");
  run_cmd->add_option("--model,-m", run.model,
                      "GGUF file (default: the topology's model, else the default model)");
  add_kv_type(run_cmd, &run.kv_type);
  run_cmd->add_option("-t,--threads", run.threads,
                      "Compute threads (default: the topology's engine.threads; 0 one per core)");
  run_cmd
      ->add_option(
          "--device", run.device,
          "Where the forward passes run: cpu, cuda, or auto (CUDA when a GPU is present and runs the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  run_cmd
      ->add_option(
          "--policy", run.policy,
          "With several programs: program (admit, pause and restore whole programs by the program-aware "
          "policy, docs/scheduling.md) or none (every program at once; the pool must hold them all)")
      ->capture_default_str()
      ->check(CLI::IsMember({"program", "none"}));
  run_cmd
      ->add_option("--check-period", run.check_period_s,
                   "Program policy: seconds between periodic checks (and at each tool call and result)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  run_cmd
      ->add_option("--host-pages", run.host_pages,
                   "Program policy: pages host memory may hold for offloaded programs (0: pauses drop)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run_cmd
      ->add_option("--tool-lease", run.tool_lease_s,
                   "Program policy: seconds a paused program waiting for an event keeps its tools' sandbox "
                   "(made again ahead of its restore)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  run_cmd->add_flag("--events", run.events, "Print every event to stderr as it fires");
  run_cmd->add_flag("-q,--quiet", run.quiet, "No report line at the end");
  run_cmd->add_flag("--unsafe-tools", run.unsafe_tools,
                    "Run tools even where the sandbox cannot isolate them (no bubblewrap or no pids cgroup): "
                    "a tool can then read and change what this user can");
  chorus::app::RunArgs check;
  auto* check_cmd = app.add_subcommand("check", "Validate a topology file without loading a model");
  check_cmd->add_option("file", check.file, "Topology file (YAML)")->required();
  check_cmd->add_option("--set", check.set, "KEY=VALUE, as for run");

  chorus::app::ServeArgs serve;
  serve.model = chorus::default_model_path();
  auto* serve_cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP API with program-aware scheduling (docs/serve.md)");
  serve_cmd->add_option("--model,-m", serve.model, "GGUF file")->capture_default_str();
  serve_cmd->add_option("--host", serve.host, "Address to listen on")->capture_default_str();
  serve_cmd->add_option("--port,-p", serve.port, "Port; 0 picks a free one")->capture_default_str();
  serve_cmd->add_option("--model-name", serve.model_name, "The model's id in /v1/models (default: its name)");
  serve_cmd->add_option("--api-key", serve.api_keys,
                        "A key clients must send (Authorization: Bearer KEY); repeat for several");
  serve_cmd->add_option("--api-key-file", serve.key_files,
                        "A file of keys, one per line (# comments); repeat for several files");
  serve_cmd->add_option("--chat-template", serve.chat_template,
                        "A Jinja chat template file to render prompts with, instead of the model's own");
  serve_cmd->add_flag("--metrics-public", serve.metrics_public,
                      "With keys: /metrics and /health answer without one");
  serve_cmd->add_option(
      "--trace", serve.trace,
      "Write a Chrome/Perfetto trace-event JSON of what the engine did and of each request to FILE at exit "
      "(docs/trace.md)");
  serve_cmd->add_option("--pages", serve.pages, "KV cache pages of 16 positions, shared by all programs")
      ->capture_default_str();
  serve_cmd->add_option("--host-pages", serve.host_pages, "Pages host memory may hold for offloaded programs")
      ->capture_default_str();
  add_linear_slots(serve_cmd, &serve.linear_slots);
  serve_cmd->add_option("--budget", serve.budget, "Tokens per engine step")->capture_default_str();
  serve_cmd->add_option("--ctx", serve.ctx, "Longest conversation in tokens; also the max_tokens limit")
      ->capture_default_str();
  serve_cmd->add_option("--lease", serve.lease_s, "Seconds after which an idle program is released")
      ->capture_default_str();
  serve_cmd->add_option("--check-period", serve.check_period_s, "Seconds between scheduling checks")
      ->capture_default_str();
  serve_cmd->add_option("--aging", serve.aging_s, "Seconds for a waiting program's restore key to halve")
      ->capture_default_str();
  serve_cmd->add_flag(
      "--displace", serve.displace,
      "Program policy: a ready program displaces acting ones that offload cheaply (host room)");
  serve_cmd
      ->add_option(
          "--stored-responses", serve.stored_responses,
          "Responses (/v1/responses, store: true) kept for GET, DELETE and previous_response_id; the "
          "oldest go first")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve_cmd
      ->add_option("--restore-wait", serve.restore_wait_s,
                   "Seconds a request for a paused program may wait for memory before a 503")
      ->capture_default_str();
  serve_cmd
      ->add_option("--policy", serve.policy,
                   "program (pause idle programs, ThunderAgent), lru or ttl (baselines)")
      ->capture_default_str()
      ->check(CLI::IsMember({"program", "lru", "ttl"}));
  serve_cmd->add_option("--ttl", serve.ttl_s, "With --policy ttl: seconds an idle program stays pinned")
      ->capture_default_str();
  serve_cmd
      ->add_option("--high-watermark", serve.high_watermark,
                   "Program policy: pause programs while the resident pages exceed this share of --pages")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  serve_cmd
      ->add_option(
          "--low-watermark", serve.low_watermark,
          "Program policy: restore programs while the weighted pages stay below this share (<= high)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  serve_cmd
      ->add_option("--http-threads", serve.http_threads,
                   "Requests handled at once; more wait unseen by the scheduler (keep it above the programs)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  add_kv_type(serve_cmd, &serve.kv_type);
  serve_cmd->add_option("-t,--threads", serve.threads, "Compute threads; 0 one per core")
      ->capture_default_str();
  serve_cmd
      ->add_option(
          "--device", serve.device,
          "Where the forward passes run: cpu, cuda, or auto (CUDA when a GPU is present and runs the model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));

  chorus::app::SimulateArgs sim;
  auto* sim_cmd =
      app.add_subcommand("simulate", "Simulate agent programs sharing KV pages: program-aware vs LRU vs TTL");
  sim_cmd->add_option("--concurrency", sim.concurrency, "Programs alive at once (a sweep)")
      ->delimiter(',')
      ->capture_default_str();
  sim_cmd->add_option("--steps", sim.steps, "Reason/act steps per program")->capture_default_str();
  sim_cmd->add_option("--pages", sim.pages, "KV pages of 16 tokens")->capture_default_str();
  sim_cmd->add_option("--duration", sim.duration_s, "Simulated seconds per point")->capture_default_str();
  sim_cmd->add_option("--tool-scale", sim.tool_scale_s, "Scale of the Pareto tool time (seconds)")
      ->capture_default_str();
  sim_cmd
      ->add_option("--host-pages", sim.host_pages,
                   "Host memory (pages) for the program policy's offloaded pauses")
      ->capture_default_str();
  sim_cmd->add_flag("--displace", sim.displace,
                    "Program policy: ready programs displace acting ones that offload cheaply");
  sim_cmd->add_option("--aging", sim.aging_s, "Program policy: seconds for a waiting program's key to halve")
      ->capture_default_str();
  sim_cmd->add_option("--seed", sim.seed, "Random seed")->capture_default_str();
  sim_cmd->add_option("--json", sim.json, "Also write the results as JSON to this file");
  sim_cmd
      ->add_option(
          "--nodes", sim.nodes,
          "Simulate clusters of these sizes instead: sticky routing against the global waiting queue "
          "(--concurrency is then programs per node)")
      ->delimiter(',');
  sim_cmd
      ->add_option("--tool-spread", sim.tool_spread,
                   "Cluster: log2 of the widest factor on a program's tool output tokens")
      ->capture_default_str();

  chorus::app::TraceArgs trace_args;
  auto* trace_cmd = app.add_subcommand(
      "trace", "Read a trace written by --trace: print its summary, or write its timeline page (--html)");
  trace_cmd->add_option("file", trace_args.file, "Trace-event JSON written by --trace")->required();
  trace_cmd->add_option("--html", trace_args.html,
                        "Write the timeline page here: one lane per block with its text as it grew, the "
                        "roles' events, the engine's steps beneath");
  trace_cmd->add_option("--title", trace_args.title, "The page's title (default: the trace file's name)");

  CLI11_PARSE(app, argc, argv);
  run.input_given = input_opt->count() > 0;
  if (log_opt->count() == 0 && (*serve_cmd || *coord_cmd || *node_cmd)) log_level = "info";
  // Logs go to stderr: stdout carries what a command prints for its user (and for scripts that
  // read the address a server listens on).
  spdlog::set_default_logger(spdlog::stderr_color_mt("chorus"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (*info_cmd) return chorus::app::run_info(info);
  if (*run_cmd) return run.server.empty() ? chorus::app::run_run(run) : chorus::app::run_remote(run);
  if (*serve_cmd) return chorus::app::run_serve(serve);
  if (*sim_cmd) return chorus::app::run_simulate(sim);
  if (*trace_cmd) return chorus::app::run_trace(trace_args);
  if (*check_cmd) return chorus::app::run_check(check);
  if (*gen_cmd) return chorus::app::run_generate(gen);
  if (*node_cmd) return chorus::app::run_node(node);
  if (*coord_cmd) return chorus::app::run_coordinator(coord);
  if (*keygen_cmd) return chorus::app::run_keygen(keygen);
  if (*bench_cmd) return chorus::app::run_bench(bench);
  if (*tmpl_cmd) return chorus::app::run_template(tmpl);
  if (*tok_cmd) {
    if (tok.text.empty() && tok.decode_ids.empty() && tok_cmd->count("text") == 0) {
      std::fprintf(stderr, "chorus tokenize: give TEXT to tokenize or --decode IDS\n");
      return 2;
    }
    return chorus::app::run_tokenize(tok);
  }
  return 0;
}
