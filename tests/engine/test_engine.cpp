// Engine pieces without a model (config, KV cache, sampler) and the engine's answers to bad
// input: unsupported architectures, prompts longer than the context, oversized requests.
#include <gtest/gtest.h>

#include <numeric>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "device/cpu_device.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/sampler.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/step/generator.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/model_fixture.h"
#include "tests/support/test_util.h"

namespace chorus {
namespace {

test::GgufBuilder llama_header(const std::string& arch = "llama") {
  test::GgufBuilder b;
  b.kv_string("general.architecture", arch);
  b.kv_u32(arch + ".embedding_length", 64);
  b.kv_u32(arch + ".block_count", 2);
  b.kv_u32(arch + ".attention.head_count", 4);
  b.kv_u32(arch + ".attention.head_count_kv", 2);
  b.kv_u32(arch + ".feed_forward_length", 128);
  b.kv_u32(arch + ".context_length", 256);
  b.tensor("token_embd.weight", 0, {64, 10}, std::vector<uint8_t>(64 * 10 * 4));
  return b;
}

Result<ModelConfig> config_of(const test::GgufBuilder& b) {
  static std::vector<uint8_t> bytes;  // GgufFile views into it
  bytes = b.build();
  auto g = GgufFile::parse({bytes.data(), bytes.size()}, "tiny.gguf");
  if (!g) return g.error();
  return ModelConfig::from_gguf(*g);
}

// Found by the fuzzer in CI: an embedding of no rows gave a vocabulary of 0, every output matrix
// empty, and its bytes per row a division by zero when the weights were read.
TEST(ModelConfig, AnEmbeddingOfNoRowsIsNoVocabulary) {
  test::GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.embedding_length", 64);
  b.kv_u32("llama.block_count", 2);
  b.kv_u32("llama.attention.head_count", 4);
  b.kv_u32("llama.attention.head_count_kv", 2);
  b.kv_u32("llama.feed_forward_length", 128);
  b.kv_u32("llama.context_length", 256);
  b.tensor("token_embd.weight", 0, {64, 0}, {});
  auto c = config_of(b);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::bad_format);
  EXPECT_NE(c.error().message.find("token_embd.weight' has shape"), std::string::npos) << c.error().message;
}

TEST(ModelConfig, ReadsLlamaHyperParameters) {
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->kv_dim(), 32);
  EXPECT_EQ(c->n_vocab, 10);
  EXPECT_TRUE(c->tied_output);
  EXPECT_EQ(c->rope_layout, RopeLayout::rope_normal);
}

TEST(ModelConfig, UnsupportedArchitectureIsNamed) {
  auto c = config_of(llama_header("mamba"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::unsupported);
  EXPECT_NE(c.error().message.find("architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, "
                                   "qwen35, qwen35moe, qwen3next, gemma3)"),
            std::string::npos)
      << c.error().message;
}

// A qwen35 header (2 layers) with some keys changed: `set` overrides the defaults by key suffix.
test::GgufBuilder qwen35_header(std::map<std::string, uint32_t> set = {}) {
  test::GgufBuilder b = llama_header("qwen35");
  const std::map<std::string, uint32_t> defaults = {
      {"attention.key_length", 32}, {"attention.value_length", 32}, {"rope.dimension_count", 8},
      {"ssm.conv_kernel", 4},       {"ssm.state_size", 16},         {"ssm.group_count", 2},
      {"ssm.time_step_rank", 4},    {"ssm.inner_size", 64}};
  for (const auto& [k, v] : defaults) b.kv_u32("qwen35." + k, set.count(k) ? set[k] : v);
  for (const auto& [k, v] : set)
    if (!defaults.count(k)) b.kv_u32("qwen35." + k, v);
  return b;
}

TEST(ModelConfig, ReadsHybridLayersAndShapes) {
  auto b = qwen35_header({{"full_attention_interval", 2}});
  b.kv_i32s("qwen35.rope.dimension_sections", {2, 1, 1, 0});
  auto c = config_of(b);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_TRUE(c->hybrid());
  EXPECT_TRUE(c->is_linear(0));
  EXPECT_FALSE(c->is_linear(1));
  EXPECT_EQ(c->n_kv_layer, 1);
  EXPECT_EQ(c->kv_layer[1], 0);
  EXPECT_EQ(c->kv_layer[0], -1);
  EXPECT_EQ(c->gdn.conv_dim(), 2 * 2 * 16 + 4 * 16);
  EXPECT_EQ(c->gdn.k_head_of(3), 1);  // tiled: value head h reads key head h % Hk
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->rope_layout, RopeLayout::rope_neox);
  // An explicit per-layer list (newer converters) decides over the interval.
  auto d = qwen35_header();
  d.kv_i32s("qwen35.attention.recurrent_layers", {0, 1});
  c = config_of(d);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_FALSE(c->is_linear(0));
  EXPECT_TRUE(c->is_linear(1));
}

TEST(ModelConfig, BadHybridHyperParametersAreNamed) {
  auto expect = [](test::GgufBuilder b, Errc code, const std::string& what) {
    auto c = config_of(b);
    ASSERT_FALSE(c.ok()) << what;
    EXPECT_EQ(c.error().code, code) << c.error().message;
    EXPECT_NE(c.error().message.find(what), std::string::npos) << c.error().message;
  };
  expect(qwen35_header({{"ssm.time_step_rank", 3}}), Errc::bad_format,
         "qwen35.ssm.time_step_rank 3 (value heads) is not a multiple of");
  expect(qwen35_header({{"ssm.inner_size", 60}}), Errc::bad_format,
         "qwen35.ssm.inner_size 60 is not value heads x state size = 64");
  expect(qwen35_header({{"ssm.conv_kernel", 1}}), Errc::unsupported,
         "qwen35.ssm.conv_kernel 1 is not supported");
  auto b = qwen35_header();
  b.kv_i32s("qwen35.rope.dimension_sections", {1, 1, 0, 2});
  expect(b, Errc::unsupported, "by the fourth position stream");
  b = qwen35_header();
  b.kv_i32s("qwen35.rope.dimension_sections", {1, 1});
  expect(b, Errc::bad_format, "rope.dimension_sections must be an array of 4 integers");
  b = qwen35_header();
  b.kv_i32s("qwen35.attention.recurrent_layers", {1});
  expect(b, Errc::bad_format, "recurrent_layers must be an array of 2 integers");
  expect(qwen35_header({{"attention.value_length", 16}}), Errc::unsupported,
         "value_length 16 differs from key_length 32");
  expect(qwen35_header({{"ssm.time_step_rank", 1u << 29}, {"ssm.inner_size", 1u << 30}}), Errc::unsupported,
         "qwen35.ssm.time_step_rank 536870912 is larger than 4096");  // found by the fuzzer: sizes overflowed
                                                                      // int
  expect(qwen35_header({{"full_attention_interval", 0}}), Errc::bad_format, "full_attention_interval");
}

TEST(ModelConfig, ReadsAndChecksExperts) {
  auto moe = [](std::map<std::string, uint32_t> set) {
    auto b = llama_header("qwen35moe");
    std::map<std::string, uint32_t> keys = {{"attention.key_length", 32},
                                            {"attention.value_length", 32},
                                            {"rope.dimension_count", 8},
                                            {"ssm.conv_kernel", 4},
                                            {"ssm.state_size", 16},
                                            {"ssm.group_count", 2},
                                            {"ssm.time_step_rank", 4},
                                            {"ssm.inner_size", 64},
                                            {"expert_count", 8},
                                            {"expert_used_count", 2},
                                            {"expert_feed_forward_length", 32}};
    for (const auto& [k, v] : set) keys[k] = v;
    for (const auto& [k, v] : keys)
      if (v != 0) b.kv_u32("qwen35moe." + k, v);
    return b;
  };
  auto c = config_of(moe({}));
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_TRUE(c->moe());
  EXPECT_EQ(c->n_expert, 8);
  EXPECT_EQ(c->n_expert_used, 2);
  EXPECT_EQ(c->n_ff_exp, 32);
  EXPECT_EQ(c->n_ff_shexp, 128) << "the shared expert defaults to feed_forward_length";
  c = config_of(moe({{"expert_used_count", 9}}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("expert_used_count 9 with expert_count 8"), std::string::npos)
      << c.error().message;
  c = config_of(moe({{"expert_count", 0}}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("qwen35moe.expert_count"), std::string::npos) << c.error().message;
}

TEST(ModelConfig, BadHyperParametersAreNamed) {
  auto b = llama_header();
  b.kv_u32("llama.attention.head_count_kv", 3);  // duplicate key: the loader rejects it first
  EXPECT_FALSE(config_of(b).ok());
  test::GgufBuilder g;
  g.kv_string("general.architecture", "llama");
  g.kv_u32("llama.embedding_length", 64);
  auto c = config_of(g);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::not_found);
  EXPECT_NE(c.error().message.find("'llama.block_count' is missing"), std::string::npos);
  // RoPE scaling chorus does not apply is refused by key and value, never run unscaled.
  test::GgufBuilder r = llama_header();
  r.kv_string("llama.rope.scaling.type", "longrope");
  c = config_of(r);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::unsupported);
  EXPECT_NE(c.error().message.find("llama.rope.scaling.type 'longrope' is not supported"), std::string::npos)
      << c.error().message;
  test::GgufBuilder y = llama_header();
  y.kv_string("llama.rope.scaling.type", "yarn");
  y.kv_f32("llama.rope.scaling.factor", 4.0f);
  y.kv_f32("llama.rope.scaling.yarn_log_multiplier", 0.1f);
  c = config_of(y);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("llama.rope.scaling.yarn_log_multiplier 0.1"), std::string::npos)
      << c.error().message;
}

TEST(KvCache, PagesReturnToThePool) {
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok());
  auto kv = KvCache::create(*c, 8);
  ASSERT_TRUE(kv.ok()) << kv.error().to_string();
  SequenceKv a, b;
  ASSERT_TRUE(kv->reserve(a, 17).ok());  // 2 pages
  ASSERT_TRUE(kv->reserve(b, 16 * 6).ok());
  EXPECT_EQ(kv->n_free(), 0);
  auto full = kv->reserve(a, 33);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, Errc::out_of_memory);
  EXPECT_NE(full.error().message.find("0 of 8 are free"), std::string::npos) << full.error().message;
  EXPECT_EQ(a.pages.size(), 2u) << "a failed reserve keeps what the sequence had";
  kv->release(a);
  kv->release(b);
  EXPECT_EQ(kv->n_free(), 8);
}

// Pages `from` saved to host memory, then loaded into pages `to` (an offload and a restore).
void through_host(KvCache& kv, std::span<const int32_t> from, std::span<const int32_t> to) {
  std::vector<std::byte> saved(from.size() * kv.page_bytes());
  ASSERT_TRUE(kv.save_pages(from, saved.data()).ok());
  ASSERT_TRUE(kv.load_pages(to, saved.data()).ok());
}

// Host pages saved and loaded into other pages carry every layer's K and V exactly.
TEST(KvCache, SavedPagesLoadIntoOtherPagesExactly) {
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok());
  auto kv = KvCache::create(*c, 6);
  ASSERT_TRUE(kv.ok()) << kv.error().to_string();
  const size_t floats = static_cast<size_t>(KvCache::page_size()) * static_cast<size_t>(c->kv_dim());
  ASSERT_EQ(kv->page_bytes(), static_cast<size_t>(c->n_kv_layer) * 2 * floats * sizeof(float));
  for (int32_t p = 0; p < 6; ++p)
    for (int l = 0; l < c->n_kv_layer; ++l)
      for (size_t i = 0; i < floats; ++i) {
        kv->k(l, p)[i] = static_cast<float>(p * 1000 + l * 100) + static_cast<float>(i) * 0.5f;
        kv->v(l, p)[i] = -static_cast<float>(p * 1000 + l * 100) - static_cast<float>(i) * 0.25f;
      }
  const int32_t from[] = {4, 1}, to[] = {0, 5};
  ASSERT_NO_FATAL_FAILURE(through_host(*kv, from, to));
  for (int j = 0; j < 2; ++j)
    for (int l = 0; l < c->n_kv_layer; ++l)
      for (size_t i = 0; i < floats; ++i) {
        ASSERT_EQ(kv->k(l, to[j])[i], kv->k(l, from[j])[i]) << "page " << to[j] << " layer " << l;
        ASSERT_EQ(kv->v(l, to[j])[i], kv->v(l, from[j])[i]) << "page " << to[j] << " layer " << l;
      }
}

// An f16 cache: half the bytes of an f32 one, its own page format (pages do not travel between
// the two), and its pages saved, loaded and copied on write exactly.
TEST(KvCache, F16PagesAreHalfTheBytesAndTravelExactly) {
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok());
  auto f32 = KvCache::create(*c, 6);
  auto kv = KvCache::create(*c, 6, KvType::f16);
  ASSERT_TRUE(kv.ok() && f32.ok());
  EXPECT_EQ(kv->type(), KvType::f16);
  EXPECT_EQ(2 * kv->page_bytes(), f32->page_bytes());
  EXPECT_EQ(2 * kv->bytes(), f32->bytes());
  EXPECT_EQ(kv->page_format(), "f16/L" + std::to_string(c->n_kv_layer) + "/D" + std::to_string(c->kv_dim()));
  EXPECT_NE(kv->page_format(), f32->page_format());
  const size_t n = static_cast<size_t>(KvCache::page_size()) * static_cast<size_t>(c->kv_dim());
  auto value = [](int32_t p, int l, size_t i, int kv) {
    return static_cast<uint16_t>(p * 7919 + l * 104729 + i * 31 + kv);
  };
  for (int32_t p = 0; p < 6; ++p)
    for (int l = 0; l < c->n_kv_layer; ++l)
      for (size_t i = 0; i < n; ++i) {
        kv->k_f16(l, p)[i] = value(p, l, i, 0);
        kv->v_f16(l, p)[i] = value(p, l, i, 1);
      }
  const int32_t from[] = {4, 1}, to[] = {0, 5};
  ASSERT_NO_FATAL_FAILURE(through_host(*kv, from, to));
  for (int j = 0; j < 2; ++j)
    for (int l = 0; l < c->n_kv_layer; ++l)
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(kv->k_f16(l, to[j])[i], value(from[j], l, i, 0)) << "page " << to[j] << " layer " << l;
        ASSERT_EQ(kv->v_f16(l, to[j])[i], value(from[j], l, i, 1)) << "page " << to[j] << " layer " << l;
      }
  // Copy on write: a shared page is copied whole before a write.
  SequenceKv a, b;
  ASSERT_TRUE(kv->reserve(a, 16).ok());
  a.n_tokens = 16;
  kv->share_prefix(a, 16, &b);
  ASSERT_TRUE(kv->copy_on_write(b, 3, c->n_kv_layer).ok());
  ASSERT_NE(b.pages[0], a.pages[0]);
  for (int l = 0; l < c->n_kv_layer; ++l)
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(kv->k_f16(l, b.pages[0])[i], kv->k_f16(l, a.pages[0])[i]);
      ASSERT_EQ(kv->v_f16(l, b.pages[0])[i], kv->v_f16(l, a.pages[0])[i]);
    }
}

// A cache whose data lives elsewhere (a GPU runner's pools) asks its store to copy a shared
// page before a write, and a failed copy leaves the sequence, the counts and the pool unchanged.
TEST(KvCache, PageStoreCopiesSharedPagesAndFailuresChangeNothing) {
  struct Store final : KvPageStore {
    std::vector<std::pair<int32_t, int32_t>> copies;
    bool fail = false;
    size_t page_bytes() const override { return 64; }
    Status copy_page(int32_t dst, int32_t src) override {
      if (fail) return make_error(Errc::internal, "device copy failed");
      copies.emplace_back(dst, src);
      return Status::success();
    }
    Status save_pages(std::span<const int32_t>, std::byte*) override { return Status::success(); }
    Status load_pages(std::span<const int32_t>, const std::byte*) override { return Status::success(); }
  } store;
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok());
  auto kv = KvCache::create(*c, 4, &store);
  ASSERT_TRUE(kv.ok()) << kv.error().to_string();
  EXPECT_EQ(kv->page_bytes(), 64u);
  EXPECT_EQ(kv->bytes(), 0u) << "no host data";
  SequenceKv a, b;
  ASSERT_TRUE(kv->reserve(a, 20).ok());
  a.n_tokens = 20;
  kv->share_prefix(a, 20, &b);
  ASSERT_EQ(kv->refs(a.pages[1]), 2);
  store.fail = true;
  const auto before = b.pages;
  Status s = kv->copy_on_write(b, 18, c->n_kv_layer);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("device copy failed"), std::string::npos);
  EXPECT_EQ(b.pages, before);
  EXPECT_EQ(kv->refs(a.pages[1]), 2);
  EXPECT_EQ(kv->n_free(), 2);
  store.fail = false;
  ASSERT_TRUE(kv->copy_on_write(b, 18, c->n_kv_layer).ok());
  ASSERT_EQ(store.copies.size(), 1u);
  EXPECT_EQ(store.copies[0].second, a.pages[1]);
  EXPECT_EQ(store.copies[0].first, b.pages[1]);
  EXPECT_NE(b.pages[1], a.pages[1]);
  EXPECT_EQ(b.pages[0], a.pages[0]) << "only the page written is copied";
  EXPECT_EQ(kv->refs(a.pages[1]), 1);
  EXPECT_EQ(kv->n_free(), 1);
}

TEST(KvCache, AbsurdSizeIsAnErrorNamingTheBytes) {
  auto c = config_of(llama_header());
  ASSERT_TRUE(c.ok());
  auto kv = KvCache::create(*c, int64_t{1} << 40);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.error().code, Errc::out_of_memory);
  EXPECT_NE(kv.error().message.find("GB"), std::string::npos) << kv.error().message;
}

TEST(Sampler, GreedyIsArgmaxAndTopKOneIsGreedy) {
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  Sampler g(SamplingParams::greedy());
  EXPECT_EQ(g.sample(logits, {}), 1);  // lowest id on ties
  SamplingParams p;
  p.top_k = 1;
  p.seed = 9;
  Sampler k1(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.sample(logits, {}), 1);
}

TEST(Sampler, SeedDeterminesTheDrawAndFiltersHold) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = static_cast<float>(i % 10) * 0.3f;
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 123;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits, {}), b.sample(logits, {}));
  // min-p keeps only tokens within a factor of the best: here only the 9s (p >= 0.9 p_max).
  p.min_p = 0.9f;
  Sampler m(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(m.sample(logits, {}) % 10, 9);
  // Forbidden tokens are never drawn.
  p.min_p = 0.0f;
  for (int i = 0; i < 100; ++i)
    if (i % 10 != 0) p.forbidden.push_back(i);
  Sampler f(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(f.sample(logits, {}) % 10, 0);
}

// token_logprobs is the log-softmax in float64 (computed here again, plainly), the top ones the
// most likely in order, lower ids first among equals.
TEST(Sampler, TokenLogprobsAreTheLogSoftmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(3000);
  for (float& x : logits) x = nd(rng);
  logits[17] = logits[18] = 40.0f;  // a tie at the top
  long double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<long double>(x) - 40.0L);
  const auto want = [&](TokenId t) { return static_cast<double>(logits[t] - 40.0L - std::log(sum)); };
  const auto got = token_logprobs(logits, 5, 6);
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got[0].token, 5);
  EXPECT_NEAR(got[0].logprob, want(5), 1e-5);
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return logits[a] > logits[b]; });
  for (size_t k = 1; k < got.size(); ++k) {
    EXPECT_EQ(got[k].token, order[k - 1]) << k;
    EXPECT_NEAR(got[k].logprob, want(order[k - 1]), 1e-5) << k;
  }
  EXPECT_EQ(token_logprobs(logits, 0, 0).size(), 1u);
}

// logit_bias moves a token's logit; presence and frequency penalties push down what was drawn:
// greedy on flat logits then walks the vocabulary (presence) or comes back once the counts even
// out (frequency), as OpenAI defines them.
TEST(Sampler, LogitBiasAndPenalties) {
  const std::vector<float> flat(4, 0.0f);
  SamplingParams p = SamplingParams::greedy();
  p.logit_bias = {{2, 0.5f}, {99, 5.0f}};  // 99: outside the vocabulary, ignored
  EXPECT_EQ(Sampler(p).sample(flat, {}), 2);
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Sampler(p).sample(flat, {}), 1);

  SamplingParams pres = SamplingParams::greedy();
  pres.presence_penalty = 1.0f;
  Sampler a(pres);
  std::vector<TokenId> got;
  for (int i = 0; i < 6; ++i) got.push_back(a.sample(flat, {}));
  EXPECT_EQ(got, (std::vector<TokenId>{0, 1, 2, 3, 0, 0}));  // once all are seen, presence is even

  SamplingParams freq = SamplingParams::greedy();
  freq.frequency_penalty = 0.5f;
  const std::vector<float> tilted = {1.2f, 0.0f, 0.0f, 0.0f};
  Sampler f(freq);
  got.clear();
  for (int i = 0; i < 5; ++i) got.push_back(f.sample(tilted, {}));
  // Token 0 scores 1.2, 0.7, 0.2 (above the others' 0), then -0.3: token 1, then 2 (1 is at -0.5).
  EXPECT_EQ(got, (std::vector<TokenId>{0, 0, 0, 1, 2}));
  // None of it can be drawn on a device.
  for (const SamplingParams& q : {pres, freq, p}) EXPECT_FALSE(Sampler(q).plan_draw(256).has_value());
  SamplingParams lp = SamplingParams::greedy();
  lp.logprobs = 0;
  EXPECT_FALSE(Sampler(lp).plan_draw(256).has_value());
}

// A planned draw is the draw sample() makes: sampling at it gives sample()'s token, and the
// generator moves on the same way; draws are planned only for what a device sampler can do.
TEST(Sampler, PlannedDrawsAreTheDrawsSampleMakes) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(500);
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.seed = 77;
  Sampler a(p), b(p);
  std::set<TokenId> seen;
  for (int i = 0; i < 200; ++i) {
    for (float& x : logits) x = nd(rng);
    const auto d = b.plan_draw(256);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->top_k, 40);
    EXPECT_EQ(d->temperature, 0.7f);
    EXPECT_GE(d->u, 0.0);
    EXPECT_LT(d->u, 1.0);
    const TokenId want = a.sample(logits, {});
    EXPECT_EQ(b.sample_at(logits, {}, d->u), want) << "step " << i;
    seen.insert(want);
  }
  EXPECT_GT(seen.size(), 20u) << "the draws vary";
  // Greedy: a draw without u, and the generator untouched.
  Sampler g(SamplingParams::greedy());
  const auto dg = g.plan_draw(256);
  ASSERT_TRUE(dg.has_value());
  EXPECT_LE(dg->temperature, 0.0f);
  // What a device sampler does not do: no draw, and sample() still gives the same sequence.
  SamplingParams q = p;
  q.repeat_penalty = 1.1f;
  EXPECT_FALSE(Sampler(q).plan_draw(256).has_value());
  q = p;
  q.forbidden = {3};
  EXPECT_FALSE(Sampler(q).plan_draw(256).has_value());
  q = p;
  q.top_k = 0;
  EXPECT_FALSE(Sampler(q).plan_draw(256).has_value());
  q.top_k = 300;
  Sampler c(q), e(q);
  EXPECT_FALSE(c.plan_draw(256).has_value());
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(c.sample(logits, {}), e.sample(logits, {})) << "a refused plan draws nothing";
}

// With many candidates and no top-p/min-p filter the draw sorts lazily, a chunk at a time: the
// tokens are those of a full sort and a walk down it (float64 weights, r = u * total).
TEST(Sampler, LazySortedDrawsEqualAFullSort) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  for (const int top_k : {0, 1000}) {
    for (const float sigma : {0.5f, 3.0f}) {  // a flat distribution (the walk goes deep) and a peaked one
      std::normal_distribution<float> nd(0.0f, sigma);
      SamplingParams p;
      p.temperature = 0.8f;
      p.top_k = top_k;
      p.top_p = 1.0f;
      p.min_p = 0.0f;
      Sampler sampler(p);
      std::vector<float> logits(5000);
      for (int i = 0; i < 100; ++i) {
        for (float& x : logits) x = nd(rng);
        const double u = ud(rng);
        std::vector<std::pair<float, TokenId>> c;
        for (size_t t = 0; t < logits.size(); ++t) c.emplace_back(logits[t], static_cast<TokenId>(t));
        std::sort(c.begin(), c.end(), [](auto& a, auto& b) {
          return a.first > b.first || (a.first == b.first && a.second < b.second);
        });
        if (top_k > 0) c.resize(static_cast<size_t>(top_k));
        double total = 0;
        for (auto& [l, t] : c) total += std::exp(static_cast<double>(l - c[0].first) / p.temperature);
        double r = u * total;
        TokenId want = c.back().second;
        for (auto& [l, t] : c) {
          r -= std::exp(static_cast<double>(l - c[0].first) / p.temperature);
          if (r <= 0.0) {
            want = t;
            break;
          }
        }
        ASSERT_EQ(sampler.sample_at(logits, {}, u), want)
            << "top_k " << top_k << ", sigma " << sigma << ", u " << u;
      }
    }
  }
}

TEST(Sampler, TemperatureSpreadsTheDraws) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.8f};
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p);
  std::map<int, int> hits;
  for (int i = 0; i < 3000; ++i) ++hits[s.sample(logits, {})];
  for (int t = 0; t < 3; ++t) EXPECT_GT(hits[t], 800) << t;
}

TEST(Sampler, RepetitionPenaltyAvoidsRecentTokens) {
  const std::vector<float> logits = {2.0f, 1.9f};
  SamplingParams p = SamplingParams::greedy();
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<TokenId> history = {0, 0};
  EXPECT_EQ(s.sample(logits, history), 1);
}

class EngineBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::default_model() == nullptr) {
      if (const char* r = std::getenv("CHORUS_REQUIRE_MODEL"); r && std::string(r) == "1")
        FAIL() << "default model missing";
      GTEST_SKIP() << "default model not found (run scripts/setup.sh)";
    }
    ASSERT_NO_FATAL_FAILURE(test::load_model(default_model_path(), &model_, &device_));
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuDevice> device_;
};

TEST_F(EngineBadInput, PromptLongerThanTheContextIsAnError) {
  GenerateOptions o;
  o.n_ctx = 32;
  auto g = Generator::create(*model_, *device_, 1, o);
  ASSERT_TRUE(g.ok());
  const std::vector<TokenId> prompt(40, 28);
  auto r = (*g)->run(prompt, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  EXPECT_NE(r.error().message.find("the prompt has 40 tokens but the context holds 32"), std::string::npos);
}

TEST_F(EngineBadInput, HugeTokenCountIsBoundedByTheContext) {
  GenerateOptions o;
  o.n_ctx = 24;
  o.max_new_tokens = 1 << 30;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  auto g = Generator::create(*model_, *device_, 1, o);
  ASSERT_TRUE(g.ok());
  auto r = (*g)->run(model_->tokenizer.encode("Once upon a time"), nullptr);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->generated_tokens, 24 - 4);  // 4 prompt tokens: the rest of the context, no more
}

TEST_F(EngineBadInput, EmptyPromptAndBadTokenIds) {
  GenerateOptions o;
  o.n_ctx = 16;
  auto g = Generator::create(*model_, *device_, 1, o);
  ASSERT_TRUE(g.ok());
  auto r = (*g)->run({}, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  auto bad = (*g)->run({5, 999999}, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("token id 999999 is outside the vocabulary"), std::string::npos);
}

TEST_F(EngineBadInput, ParallelSequencesDecodeLikeOne) {
  // Batching sequences must not change what each computes: 3 greedy sequences of the same
  // prompt produce the same tokens as one.
  GenerateOptions o;
  o.n_ctx = 64;
  o.max_new_tokens = 12;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplingParams::greedy();
  auto one = Generator::create(*model_, *device_, 1, o);
  auto three = Generator::create(*model_, *device_, 3, o);
  ASSERT_TRUE(one.ok() && three.ok());
  const auto prompt = model_->tokenizer.encode("The quick brown fox");
  ASSERT_TRUE((*one)->run(prompt, nullptr).ok());
  ASSERT_TRUE((*three)->run(prompt, nullptr).ok());
  for (int s = 0; s < 3; ++s) EXPECT_EQ((*three)->outputs()[s], (*one)->outputs()[0]) << "sequence " << s;
}

}  // namespace
}  // namespace chorus
