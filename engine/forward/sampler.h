// Picks the next token from logits. Order (as llama.cpp's default chain): forbidden-token mask
// and the grammar's mask (constrained decoding, engine/grammar/matcher.h) -> logit bias ->
// repetition penalty -> presence/frequency penalties -> top-k -> top-p -> min-p -> temperature ->
// draw. temperature <= 0 is greedy (argmax, lowest id on ties), and then the
// other filters do not matter.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/grammar/output_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; > 1 divides positive logits (multiplies negative) of recent tokens
  int repeat_last_n = 64;       // how many recent tokens the penalty looks at
  // OpenAI's penalties, over the tokens this sampler has drawn (the output, not the prompt): a
  // drawn token's logit loses presence_penalty once and frequency_penalty per time it was drawn.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // same seed, same logits, same history -> same token
  // Added to the logits of these tokens before any filter (ids outside the vocabulary: ignored).
  std::vector<std::pair<TokenId, float>> logit_bias;
  // >= 0 (at most kMaxLogprobs): each drawn token is reported with its log-probability and this many most
  // likely alternatives (token_logprobs), under the model's own distribution: the log-softmax of the logits
  // as the model made them, before bias, penalties, masks and temperature.
  int logprobs = -1;
  std::vector<TokenId> forbidden;  // never sampled
  // When set, only tokens that keep the output a prefix of one of its sentences are sampled,
  // and end-of-generation tokens only once the output is whole (constrained decoding).
  // `constraint` is the same as it travels: the engine compiles it into `grammar` at submit.
  std::shared_ptr<const TokenGrammar> grammar;
  OutputConstraint constraint;

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
};

// The most alternatives a token's logprobs may list (OpenAI's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;

// A token and its log-probability.
struct TokenLogprob {
  TokenId token = -1;
  float logprob = 0.0f;
};
// The log-softmax of `logits` (in double) at `chosen`, then at the `top` most likely tokens (most
// likely first, lower id first among equals): 1 + top entries.
std::vector<TokenLogprob> token_logprobs(std::span<const float> logits, TokenId chosen, int top);

// A draw made elsewhere (on a GPU, kernels/cuda/ops.h sample_rows): the filters, and the
// uniform u in [0, 1) that picks among the tokens they keep.
struct PlannedDraw {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  int top_k = 1;
  double u = 0.0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // `history` is the sequence so far (for the repetition penalty); the token returned counts as
  // drawn (for the presence and frequency penalties). Never returns a forbidden
  // token unless every token is forbidden (then the argmax of the unmasked logits). With a
  // grammar, the token is taken by the matcher; kNoToken when the grammar allows no token of
  // the vocabulary (a grammar whose bytes no token spells).
  TokenId sample(std::span<const float> logits, std::span<const TokenId> history);
  // The token sample() picks when its uniform draw is u (neither the generator nor the grammar
  // matcher is touched).
  TokenId sample_at(std::span<const float> logits, std::span<const TokenId> history, double u);
  static constexpr TokenId kNoToken = -1;
  // The grammar's matcher (null without a grammar): whether the output is whole, or ended.
  const GrammarMatcher* matcher() const { return matcher_.get(); }
  // When the next token depends on the logits only through the filters a device sampler has
  // (no penalty or bias, no forbidden tokens, no logprobs asked for, greedy or top_k in 1..max_top_k): the
  // draw, taken from the generator exactly as sample() would take it, so that a device pick equals sample()'s
  // (up to the last bit of an exponential at a boundary). Else nothing (and the generator is not touched):
  // sample() on the logits instead.
  std::optional<PlannedDraw> plan_draw(int max_top_k);

  const SamplingParams& params() const { return p_; }

 private:
  // Above this many candidates with no top-p/min-p filter, the draw sorts lazily (draw_unfiltered).
  static constexpr size_t kSortedDrawFrom = 512;
  TokenId draw_unfiltered(size_t keep, double u);
  // sample_at()'s phases: the candidates (false when there are none), their adjusted logits, the
  // filtered draw.
  bool gather(std::span<const float> logits);
  void adjust(size_t n, std::span<const TokenId> history);
  TokenId draw_filtered(size_t keep, double u);
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;  // scratch, reused
  std::vector<uint8_t> forbidden_mask_;
  std::vector<float> bias_;  // per token, when logit_bias is set
  std::vector<int> drawn_;   // per token, times drawn (with presence/frequency penalties)
  std::unique_ptr<GrammarMatcher> matcher_;
};

// Index of the largest value (lowest index on ties).
TokenId argmax(std::span<const float> logits);

}  // namespace chorus
