// `chorus info`: what a GGUF file holds and what this machine offers.
#include <cstdio>
#include <map>

#include "actors/runtime_check.h"
#include "apps/chorus/commands.h"
#include "device/cpu_features.h"
#include "device/cuda_info.h"
#include "engine/forward/cuda/cuda_runner.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus::app {
namespace {

std::string meta_or(const GgufFile& g, const std::string& key, const std::string& fallback = "-") {
  const GgufValue* v = g.find(key);
  if (v == nullptr) return fallback;
  if (const auto* s = std::get_if<std::string_view>(&v->v)) return std::string(*s);
  return v->to_string();
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return out;
}

}  // namespace

int run_info(const InfoArgs& args) {
  auto gguf = GgufFile::open(args.model);
  if (!report("info", gguf)) return 1;
  const GgufFile& g = *gguf;
  const std::string arch = meta_or(g, "general.architecture");
  std::printf("file        %s\n", g.name().c_str());
  std::printf("format      GGUF v%u, %.1f MiB, alignment %llu, %zu metadata keys\n", g.version(),
              g.file_size() / 1048576.0, static_cast<unsigned long long>(g.alignment()), g.metadata().size());
  std::printf("name        %s\n", meta_or(g, "general.name").c_str());
  std::printf("arch        %s\n", arch.c_str());
  const std::string p = arch + ".";
  std::printf("context     %s\n", meta_or(g, p + "context_length").c_str());
  std::printf("embedding   %s\n", meta_or(g, p + "embedding_length").c_str());
  std::printf("layers      %s\n", meta_or(g, p + "block_count").c_str());
  std::printf("heads       %s (kv heads %s)\n", meta_or(g, p + "attention.head_count").c_str(),
              meta_or(g, p + "attention.head_count_kv").c_str());
  std::printf("ffn         %s\n", meta_or(g, p + "feed_forward_length").c_str());
  std::printf("rope base   %s\n", meta_or(g, p + "rope.freq_base").c_str());
  std::printf("norm eps    %s\n", meta_or(g, p + "attention.layer_norm_rms_epsilon").c_str());
  // Read once, for what is printed below and for the runners' verdicts.
  const auto config = ModelConfig::from_gguf(g);
  if (const auto& c = config; c && c->hybrid()) {
    std::string lin, att;
    for (int l = 0; l < c->n_layer; ++l) {
      std::string& list = c->is_linear(l) ? lin : att;
      list += (list.empty() ? "" : ", ") + std::to_string(l);
    }
    const GdnConfig& d = c->gdn;
    std::printf("linear      layers %s: Gated DeltaNet, %d key / %d value heads of %d, conv %d\n",
                lin.c_str(), d.n_k_heads, d.n_v_heads, d.head_dim, d.conv_kernel);
    std::printf("attention   layers %s: head %d, rope over %d dims%s\n", att.c_str(), c->head_dim, c->n_rot,
                c->attn_output_gate ? ", output gate" : "");
  }

  if (const auto& c = config; c && c->n_swa > 0) {
    std::string global;
    int n_local = 0;
    for (int l = 0; l < c->n_layer; ++l) {
      if (c->is_swa(l))
        ++n_local;
      else
        global += (global.empty() ? "" : ", ") + std::to_string(l);
    }
    std::printf("window      %d positions on %d of %d layers (rope base %g there); global layers: %s\n",
                c->n_swa, n_local, c->n_layer, c->rope_base_swa, global.empty() ? "none" : global.c_str());
  }

  std::map<std::string, std::pair<int, uint64_t>> hist;  // type -> (tensors, bytes)
  uint64_t n_params = 0, n_bytes = 0;
  for (const GgufTensor& t : g.tensors()) {
    auto& h = hist[std::string(tensor_type_name(t.type))];
    ++h.first;
    h.second += t.n_bytes;
    n_params += t.n_elements;
    n_bytes += t.n_bytes;
  }
  std::printf("tensors     %zu, %.1f M parameters, %.1f MiB\n", g.tensors().size(), n_params / 1e6,
              n_bytes / 1048576.0);
  for (const auto& [name, h] : hist)
    std::printf("  %-9s %4d tensors  %8.1f MiB\n", name.c_str(), h.first, h.second / 1048576.0);

  auto tok = Tokenizer::from_gguf(g);
  if (tok) {
    if (tok->model() == TokenizerModel::spm)
      std::printf("vocab       %zu tokens, model llama (SentencePiece), space prefix %s\n", tok->vocab_size(),
                  tok->add_space_prefix() ? "yes" : "no");
    else
      std::printf("vocab       %zu tokens, %zu merges, model gpt2 (byte-level BPE), pre %s\n",
                  tok->vocab_size(), tok->n_merges(), std::string(pre_tokenizer_name(tok->pre())).c_str());
    auto show = [&](const char* label, std::optional<TokenId> id) {
      if (id) std::printf("  %-9s %d \"%s\"\n", label, *id, printable(tok->token_text(*id)).c_str());
    };
    show("bos", tok->bos());
    show("eos", tok->eos());
    if (tok->model() == TokenizerModel::spm) show("unk", tok->unk());
    std::printf("  add bos   %s, add eos %s\n", tok->add_bos() ? "yes" : "no", tok->add_eos() ? "yes" : "no");
    std::printf("  special   %zu:", tok->special_tokens().size());
    size_t shown = 0;
    for (TokenId id : tok->special_tokens()) {
      if (shown++ == 12) {
        std::printf(" ...");
        break;
      }
      std::printf(" %d=%s", id, printable(tok->token_text(id)).c_str());
    }
    std::printf("\n");
  } else {
    std::printf("vocab       (no usable tokenizer: %s)\n", tok.error().message.c_str());
  }

  const CpuFeatures& cpu = cpu_features();
  std::printf("cpu         %s: %s\n", cpu.model_name.c_str(), cpu.summary().c_str());
  // Whether chorus runs this model on the CPU (the default device), and if not, why: the first
  // refusal of the config, the weights or the tokenizer, as a load would report it.
  const Result<Weights> weights = config ? Weights::from_gguf(g, *config) : Result<Weights>(config.error());
  std::string cpu_verdict = "runs this model";
  if (!weights)  // the config's refusal, else the weights'
    cpu_verdict = "refuses it: " + weights.error().message;
  else if (!tok)
    cpu_verdict = "refuses it: " + tok.error().message;
  std::printf("cpu runner  %s\n", cpu_verdict.c_str());
  const CudaInfo cuda = cuda_info();
  if (!cuda.built) {
    std::printf("cuda        not built\n");
  } else {
    std::printf("cuda        runtime %d, NCCL %d, %d device(s)%s%s\n", cuda.runtime_version,
                cuda.nccl_version, cuda.device_count, cuda.error.empty() ? "" : ": ", cuda.error.c_str());
    // Whether `--device cuda` would run this model (asks no device).
    std::string verdict = "runs this model";
    if (!weights)
      verdict = weights.error().message;
    else if (Status st = CudaRunner::check(*config, *weights); !st.ok())
      verdict = st.error().message;
    std::printf("cuda runner %s\n", verdict.c_str());
  }

  if (args.check_runtime) {
    const auto rc = check_actor_runtime(2);
    if (!rc) {
      std::fprintf(stderr, "chorus info: actor runtime check failed: %s\n", rc.error().to_string().c_str());
      return 1;
    }
    std::printf("actors      CAF %s, self-test ok (%s)\n", rc->caf_version.c_str(), rc->reply.c_str());
  }
  if (args.metadata) {
    std::printf("\nmetadata:\n");
    for (const GgufKv& kv : g.metadata())
      std::printf("  %-44s %s\n", std::string(kv.key).c_str(), kv.value.to_string().c_str());
  }
  if (args.tensors) {
    std::printf("\ntensors:\n");
    for (const GgufTensor& t : g.tensors())
      std::printf("  %-36s %-6s %-18s %10zu bytes @ %llu\n", std::string(t.name).c_str(),
                  std::string(tensor_type_name(t.type)).c_str(), t.shape_string().c_str(), t.n_bytes,
                  static_cast<unsigned long long>(g.data_offset() + t.offset));
  }
  return 0;
}

}  // namespace chorus::app
