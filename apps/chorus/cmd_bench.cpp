// `chorus bench`: prompt processing and decode throughput, for 1..N concurrent sequences, on
// the CPU or the GPU --device picks. Prints a table and optionally writes JSON (the side-by-side script
// tools/bench/bench_vs_llamacpp.py runs it next to llama.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/chorus/commands.h"
#include "apps/chorus/gpu_choice.h"
#include "device/cpu_device.h"
#include "device/cpu_features.h"
#include "engine/model/model.h"
#include "engine/step/generator.h"
#include "engine/step/trace.h"

namespace chorus::app {

int run_bench_views(const BenchArgs& args, const Model& m, CpuDevice& device, CudaDevice* gpu,
                    nlohmann::json& out);
int run_bench_hybrid(const BenchArgs& args, const Model& m, CpuDevice& device, nlohmann::json& out);

namespace {

// A deterministic prompt of exactly n tokens: English prose, repeated.
std::vector<TokenId> bench_prompt(const Tokenizer& tok, int n) {
  const std::string para =
      "The history of computing is a story of layers. Each generation of engineers builds on the "
      "abstractions of the last, hiding complexity behind interfaces that are simpler to reason about. "
      "Memory hierarchies, compilers and operating systems all follow this pattern, and so do the "
      "runtimes that serve language models today. ";
  std::vector<TokenId> ids;
  while (static_cast<int>(ids.size()) < n) {
    const auto more = tok.encode(para);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  ids.resize(static_cast<size_t>(n));
  return ids;
}

struct DecodeResult {
  int64_t tokens = 0;       // after the first of each sequence (it comes from the prefill)
  double seconds = 0;       // best of the timed runs
  int steps = 0;            // of that run
  double cold_step_ms = 0;  // the warm-up run's (a constraint's masks computed for the first time)
  int64_t total_steps = 0;  // decode steps of every run, the warm-up's too
  double step_ms() const { return steps > 0 ? 1e3 * seconds / steps : 0; }
};

Result<DecodeResult> decode_test(const Model& m, CpuDevice& device, CudaDevice* gpu, const BenchArgs& args,
                                 int n, const OutputConstraint& constraint,
                                 std::shared_ptr<Trace> trace = nullptr) {
  GenerateOptions o;
  o.trace = std::move(trace);
  o.n_ctx = args.prompt + args.tg + 8;
  o.prefill_chunk = 64;
  o.max_new_tokens = args.tg;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  o.sampling.constraint = constraint;
  CHORUS_ASSIGN_OR_RETURN(auto gen, Generator::create(m, device, n, o, gpu));
  const auto prompt = bench_prompt(m.tokenizer, args.prompt);
  DecodeResult best;
  best.seconds = 1e30;
  for (int r = 0; r <= args.reps; ++r) {
    CHORUS_ASSIGN_OR_RETURN(auto st, gen->run(prompt, nullptr));
    best.total_steps += st.steps;
    if (r == 0) {
      best.cold_step_ms = st.steps > 0 ? 1e3 * st.decode_seconds / st.steps : 0;
      continue;
    }
    if (st.decode_seconds < best.seconds) {
      best.seconds = st.decode_seconds;
      best.steps = st.steps;
      best.tokens = st.generated_tokens - n;
    }
  }
  return best;
}

}  // namespace

int run_bench(const BenchArgs& args) {
  auto model = Model::load(args.model);
  if (!report("bench", model)) return 1;
  const Model& m = **model;
  auto device = CpuDevice::create({.n_threads = args.threads,
                                   .isa = args.isa,
                                   .llama_order = args.llama_order,
                                   .kv_type = kv_type_flag(args.kv_type)});
  if (!report("bench", device)) return 1;
  auto gpu_or = open_gpu("bench", args.device, m);
  if (!report("bench", gpu_or)) return 1;
  CudaDevice* gpu = gpu_or->get();
  if (gpu && args.hybrid) {
    std::fprintf(
        stderr,
        "chorus bench: --hybrid runs on the CPU only (the CUDA runner has no Gated DeltaNet layers yet)\n");
    return 2;
  }
  const std::string where = gpu ? gpu->describe() : (*device)->describe();
  nlohmann::json out;
  out["model"] = args.model;
  out["device"] = where;
  out["cpu"] = cpu_features().model_name;
  out["threads"] = (*device)->n_threads();
  std::printf("chorus bench: %s, %s\n", m.config.name.c_str(), where.c_str());
  if (args.views || args.hybrid) {
    const int rc =
        args.hybrid ? run_bench_hybrid(args, m, **device, out) : run_bench_views(args, m, **device, gpu, out);
    if (rc != 0) return rc;
    if (!args.json.empty()) {
      std::ofstream f(args.json);
      f << out.dump(2) << "\n";
    }
    return 0;
  }

  // Prompt processing: one forward over pp tokens (best of reps, after a warm-up).
  if (args.pp > 0) {
    GenerateOptions o;
    o.n_ctx = args.pp + 8;
    o.prefill_chunk = args.pp;
    o.max_new_tokens = 1;
    o.sampling = SamplingParams::greedy();
    auto gen = Generator::create(m, **device, 1, o, gpu);
    if (!report("bench", gen)) return 1;
    const auto prompt = bench_prompt(m.tokenizer, args.pp);
    double best = 1e30;
    for (int r = 0; r <= args.reps; ++r) {
      auto st = (*gen)->run(prompt, nullptr);
      if (!report("bench", st)) return 1;
      if (r > 0) best = std::min(best, st->prefill_seconds);
    }
    const double tps = args.pp / best;
    std::printf("  pp%-4d            %9.1f tok/s\n", args.pp, tps);
    out["pp"] = {{"tokens", args.pp}, {"tok_s", tps}, {"seconds", best}};
  }

  // Decode: n sequences, each after its own copy of a prompt, tg tokens each (greedy, no early
  // stop); with --schema, again under the schema (a constrained sequence ends when its JSON is
  // whole, so steps, not tokens, are compared).
  OutputConstraint constraint;
  if (!args.schema.empty()) {
    std::ifstream f(args.schema);
    constraint = OutputConstraint::json_schema_of(std::string(std::istreambuf_iterator<char>(f), {}));
    if (auto g = grammar_of(constraint); !g) {
      std::fprintf(stderr, "chorus bench: %s: %s\n", args.schema.c_str(), g.error().message.c_str());
      return 1;
    }
  }
  nlohmann::json dec = nlohmann::json::array();
  double single = 0;
  for (int n : args.seqs) {
    auto plain = decode_test(m, **device, gpu, args, n, {});
    if (!report("bench", plain)) return 1;
    const double tps = plain->tokens / plain->seconds;
    if (n == 1) single = tps;
    std::printf(
        "  decode x%-3d        %9.1f tok/s aggregate%s\n", n, tps,
        single > 0 && n > 1 ? (" (" + std::to_string(tps / single).substr(0, 4) + "x single)").c_str() : "");
    nlohmann::json row = {{"sequences", n},
                          {"tok_s", tps},
                          {"tokens", plain->tokens},
                          {"seconds", plain->seconds},
                          {"step_ms", plain->step_ms()}};
    if (!constraint.empty()) {
      auto c = decode_test(m, **device, gpu, args, n, constraint);
      if (!report("bench", c)) return 1;
      std::printf(
          "    under --schema    %9.3f ms/step vs %.3f (%+.1f %%), first run %.3f ms/step, %lld tokens\n",
          c->step_ms(), plain->step_ms(), 100.0 * (c->step_ms() / plain->step_ms() - 1.0), c->cold_step_ms,
          static_cast<long long>(c->tokens));
      row["schema"] = {{"step_ms", c->step_ms()},
                       {"cold_step_ms", c->cold_step_ms},
                       {"tokens", c->tokens},
                       {"overhead", c->step_ms() / plain->step_ms() - 1.0}};
    }
    if (!args.trace.empty()) {  // the same test recorded into a trace: its cost per step
      // Untraced again after it, and the better of the two untraced runs is the base: the order
      // of the runs favours neither.
      auto trace = std::make_shared<Trace>();
      auto t = decode_test(m, **device, gpu, args, n, {}, trace);
      if (!report("bench", t)) return 1;
      auto again = decode_test(m, **device, gpu, args, n, {});
      if (!report("bench", again)) return 1;
      const double base = std::min(plain->step_ms(), again->step_ms());
      // Measured inside: the time the engine spent recording, per step of all the runs.
      const double rec_ms = 1e3 * trace->recording_seconds() / static_cast<double>(t->total_steps);
      std::printf(
          "    traced            %9.3f ms/step vs %.3f untraced, before and after (%+.1f %%); recording "
          "%.4f ms/step (%.2f %%), %zu events\n",
          t->step_ms(), base, 100.0 * (t->step_ms() / base - 1.0), rec_ms, 100.0 * rec_ms / base,
          trace->size());
      row["traced"] = {{"step_ms", t->step_ms()},
                       {"untraced_ms", base},
                       {"overhead", t->step_ms() / base - 1.0},
                       {"recording_ms", rec_ms}};
      write_trace("bench", trace, args.trace);
    }
    dec.push_back(row);
  }
  out["decode"] = dec;
  if (!args.json.empty()) {
    std::ofstream f(args.json);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "chorus bench: cannot write %s\n", args.json.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace chorus::app
