// `chorus generate`: text generation with the CPU engine, streamed as it is produced.
#include <cstdio>

#include "apps/chorus/commands.h"
#include "engine/detokenizer.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "gpu/cpu_device.h"

namespace chorus::app {

int run_generate(const GenerateArgs& args) {
  auto model = Model::load(args.model);
  if (!report("generate", model)) return 1;
  const Model& m = **model;
  auto device = CpuDevice::create({.n_threads = args.threads, .isa = args.isa});
  if (!report("generate", device)) return 1;
  std::string prompt = args.prompt;
  if (args.chat) {
    if (!m.chat) {
      std::fprintf(stderr, "chorus generate: --chat: this model's chat template is not ChatML\n");
      return 2;
    }
    std::vector<ChatMessage> messages;
    if (!args.system.empty()) messages.push_back({"system", args.system});
    messages.push_back({"user", prompt});
    prompt = m.chat->apply(messages);
  }
  const auto ids = m.tokenizer.encode(prompt, {.add_special = true, .parse_special = !args.no_special});
  GenerateOptions opts;
  opts.max_new_tokens = args.n_predict < 0 ? args.n_ctx : args.n_predict;
  opts.n_ctx = args.n_ctx;
  opts.sampling.temperature = args.temperature;
  opts.sampling.top_k = args.top_k;
  opts.sampling.top_p = args.top_p;
  opts.sampling.min_p = args.min_p;
  opts.sampling.repeat_penalty = args.repeat_penalty;
  opts.sampling.seed = args.seed;
  auto gen = Generator::create(m, **device, 1, opts);
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
    std::fprintf(stderr, "[%s] prompt %lld tokens in %.3f s (%.1f tok/s), generated %lld tokens in %.3f s (%.1f tok/s)\n",
                 (*device)->describe().c_str(), static_cast<long long>(stats->prompt_tokens), stats->prefill_seconds,
                 stats->prompt_tokens / std::max(stats->prefill_seconds, 1e-9),
                 static_cast<long long>(stats->generated_tokens), stats->decode_seconds,
                 stats->generated_tokens / std::max(stats->decode_seconds, 1e-9));
  return 0;
}

}  // namespace chorus::app
