// `chorus generate`: text generation, streamed as it is produced (on the CPU, or the GPU that
// --device picks).
#include <cstdio>

#include <chrono>
#include <map>
#include "apps/chorus/commands.h"
#include "apps/chorus/gpu_choice.h"

#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/step/generator.h"
#include "engine/tokenizer/detokenizer.h"

namespace chorus::app {
namespace {

// --parallel N: the prompt goes into one block once; N generates each write their own block
// with the prompt block in their view, and every step decodes all of them together.
int run_parallel(const GenerateArgs& args, const Model& m, CpuDevice& device, CudaDevice* gpu,
                 const std::vector<TokenId>& ids) {
  if (ids.empty()) {
    std::fprintf(stderr, "chorus generate: the prompt is empty\n");
    return 2;
  }
  const int n_new = args.n_predict < 0 ? args.n_ctx - static_cast<int>(ids.size()) : args.n_predict;
  EngineOptions eo;
  eo.max_view_tokens = args.n_ctx;
  eo.n_pages = (args.n_ctx / KvCache::page_size() + 2) * (args.parallel + 1);
  auto engine = Engine::create(m, device, eo, gpu);
  if (!report("generate", engine)) return 1;
  Engine& e = **engine;
  const auto t0 = std::chrono::steady_clock::now();
  // The prompt block holds all but the last prompt token; each answer starts from that token.
  const BlockId prompt = e.blocks().create("prompt");
  if (ids.size() > 1) {
    Request fwd;
    fwd.kind = RequestKind::forward;
    fwd.write_to = prompt;
    fwd.tokens.assign(ids.begin(), ids.end() - 1);
    if (!report("generate", e.submit(fwd))) return 1;
  }
  std::vector<BlockId> answers;
  std::map<RequestId, int> index;
  for (int i = 0; i < args.parallel; ++i) {
    answers.push_back(e.blocks().create("answer " + std::to_string(i + 1)));
    Request g;
    g.kind = RequestKind::generate;
    g.view = {prompt};
    g.write_to = answers.back();
    g.tokens = {ids.back()};
    g.sampling.temperature = args.temperature;
    g.sampling.top_k = args.top_k;
    g.sampling.top_p = args.top_p;
    g.sampling.min_p = args.min_p;
    g.sampling.repeat_penalty = args.repeat_penalty;
    g.sampling.seed = args.seed + static_cast<uint64_t>(i);
    g.stop.max_tokens = std::max(1, n_new);
    auto id = e.submit(g);
    if (!report("generate", id)) return 1;
    index[*id] = i;
  }
  std::vector<std::unique_ptr<IncrementalDecoder>> text;
  std::vector<std::string> out(static_cast<size_t>(args.parallel));
  for (int i = 0; i < args.parallel; ++i)
    text.push_back(std::make_unique<IncrementalDecoder>(m.tokenizer, DecodeOptions{.render_special = false}));
  int64_t generated = 0;
  while (!e.idle()) {
    auto ev = e.step();
    if (!report("generate", ev)) return 1;
    for (const Event& x : *ev) {
      if (!index.count(x.request)) continue;
      const auto i = static_cast<size_t>(index[x.request]);
      if (x.type == Event::Type::token) {
        out[i] += text[i]->push(x.token);
        ++generated;
      } else if (x.type == Event::Type::finished) {
        out[i] += text[i]->flush();
        std::printf("[%zu] %s\n\n", i + 1, out[i].c_str());
        std::fflush(stdout);
      }
    }
  }
  if (args.verbose) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "[%s] %d generations over one %zu-token prompt block: %lld tokens in %lld steps, %.2f s "
                 "(%.1f tok/s aggregate); KV pages in use %lld of %lld\n",
                 e.describe().c_str(), args.parallel, ids.size() - 1, static_cast<long long>(generated),
                 static_cast<long long>(e.steps()), secs, generated / std::max(secs, 1e-9),
                 static_cast<long long>(e.blocks().kv().n_pages() - e.blocks().kv().n_free()),
                 static_cast<long long>(e.blocks().kv().n_pages()));
  }
  return 0;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  auto model = Model::load(args.model);
  if (!report("generate", model)) return 1;
  show_load_progress("generate", **model);
  const Model& m = **model;
  auto device = CpuDevice::create({.n_threads = args.threads,
                                   .isa = args.isa,
                                   .llama_order = args.llama_order,
                                   .kv_type = kv_type_flag(args.kv_type)});
  if (!report("generate", device)) return 1;
  auto gpu = open_gpu("generate", args.device, m);
  if (!report("generate", gpu)) return 1;
  std::string prompt = args.prompt;
  if (args.chat) {
    if (!m.chat) {
      std::fprintf(stderr, "chorus generate: --chat: %s\n", m.chat_error.to_string().c_str());
      return 2;
    }
    std::vector<ChatMessage> messages;
    if (!args.system.empty()) messages.push_back({"system", args.system});
    messages.push_back({"user", prompt});
    auto rendered = m.chat->apply(messages);
    if (!report("generate", rendered)) return 2;
    prompt = std::move(*rendered);
  }
  // A chat prompt has the BOS its template writes; a plain one gets the vocabulary's.
  const auto ids = m.tokenizer.encode(prompt, {.add_special = !args.chat, .parse_special = !args.no_special});
  if (args.parallel > 1) return run_parallel(args, m, **device, gpu->get(), ids);
  GenerateOptions opts;
  opts.max_new_tokens = args.n_predict < 0 ? args.n_ctx : args.n_predict;
  opts.n_ctx = args.n_ctx;
  opts.sampling.temperature = args.temperature;
  opts.sampling.top_k = args.top_k;
  opts.sampling.top_p = args.top_p;
  opts.sampling.min_p = args.min_p;
  opts.sampling.repeat_penalty = args.repeat_penalty;
  opts.sampling.seed = args.seed;
  auto gen = Generator::create(m, **device, 1, opts, gpu->get());
  if (!report("generate", gen)) return 1;
  IncrementalDecoder stream(m.tokenizer, {.render_special = false});
  auto stats = (*gen)->run(ids, [&](int, TokenId tok) {
    const std::string text = stream.push(tok);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  const std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  if (stats) std::printf("\n");
  if (!stats) {
    std::fprintf(stderr, "chorus generate: %s\n", stats.error().to_string().c_str());
    return 1;
  }
  if (args.verbose)
    std::fprintf(
        stderr,
        "[%s] prompt %lld tokens in %.3f s (%.1f tok/s), generated %lld tokens in %.3f s (%.1f tok/s)\n",
        (*gpu ? (*gpu)->describe() : (*device)->describe()).c_str(),
        static_cast<long long>(stats->prompt_tokens), stats->prefill_seconds,
        stats->prompt_tokens / std::max(stats->prefill_seconds, 1e-9),
        static_cast<long long>(stats->generated_tokens), stats->decode_seconds,
        stats->generated_tokens / std::max(stats->decode_seconds, 1e-9));
  return 0;
}

}  // namespace chorus::app
