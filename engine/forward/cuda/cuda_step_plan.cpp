#include "engine/forward/cuda/cuda_step_plan.h"

#include <algorithm>
#include <string>

namespace chorus {
namespace {

Error bad(const std::string& what) {
  return make_error(Errc::invalid_argument, what);
}

// The device draws, one per logits row that has one.
Status plan_draws(std::span<const BatchToken> batch, std::span<const std::optional<PlannedDraw>> draws,
                  bool have_tokens_out, CudaStepPlan* p) {
  if (draws.empty()) return Status::success();
  int64_t row = 0;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!batch[t].logits) continue;
    if (static_cast<size_t>(row) < draws.size())
      if (const auto& d = draws[static_cast<size_t>(row)]) {
        if (d->temperature > 0.0f && (d->top_k < 1 || d->top_k > cuda::kMaxSampleTopK))
          return bad("draw for logits row " + std::to_string(row) + ": top_k " + std::to_string(d->top_k) +
                     " (the device sampler takes 1.." + std::to_string(cuda::kMaxSampleTopK) + ")");
        if (!have_tokens_out) return bad("draws given without tokens_out");
        p->samples.push_back({d->temperature, d->top_p, d->min_p, d->top_k, d->u, static_cast<int32_t>(t)});
        p->sample_out.push_back(row);
      }
    ++row;
  }
  if (static_cast<size_t>(row) != draws.size())
    return bad(std::to_string(draws.size()) + " draws for " + std::to_string(row) + " logits rows");
  return Status::success();
}

// Runs of up to 32 consecutive tokens of one sequence under one view: they attend the same pages.
void plan_tiles(std::span<const BatchToken> batch, const std::vector<std::vector<AttendSegment>>& plan,
                std::vector<cuda::AttnTile>* tiles) {
  auto same_blocks = [&](size_t t, size_t u) {
    const auto& a = plan[t];
    const auto& b = plan[u];
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(),
                      [](const auto& x, const auto& y) { return x.block == y.block; });
  };
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!tiles->empty()) {
      cuda::AttnTile& last = tiles->back();
      const auto prev = static_cast<size_t>(last.first_token + last.n_tokens - 1);
      const BatchToken &pb = batch[prev], &b = batch[t];
      if (prev + 1 == t && last.n_tokens < 32 && pb.seq == b.seq && pb.view == b.view &&
          pb.pos + 1 == b.pos && same_blocks(prev, t)) {
        ++last.n_tokens;
        continue;
      }
    }
    tiles->push_back({static_cast<int32_t>(t), 1});
  }
}

// The page list of every block some token attends, once, as far as it is read; each token's
// segments point into it. Returns each block's first entry.
Result<std::vector<int32_t>> plan_page_list(const std::vector<std::vector<AttendSegment>>& plan,
                                            std::span<SequenceKv* const> seqs, const CudaStepLimits& lim,
                                            CudaStepPlan* p) {
  std::vector<int64_t> read_upto(seqs.size(), 0);
  for (const auto& segs_t : plan) {
    if (segs_t.size() > static_cast<size_t>(kMaxViewBlocks))
      return bad("a view of " + std::to_string(segs_t.size()) + " blocks exceeds the limit of " +
                 std::to_string(kMaxViewBlocks));
    for (const AttendSegment& sg : segs_t)
      read_upto[static_cast<size_t>(sg.block)] = std::max(read_upto[static_cast<size_t>(sg.block)], sg.n_kv);
  }
  std::vector<int32_t> first_page(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    first_page[i] = static_cast<int32_t>(p->page_ids.size());
    const auto n = static_cast<std::ptrdiff_t>(KvCache::pages_for(read_upto[i]));
    p->page_ids.insert(p->page_ids.end(), seqs[i]->pages.begin(), seqs[i]->pages.begin() + n);
  }
  if (static_cast<int64_t>(p->page_ids.size()) > lim.page_table - 1)  // one entry stays for the spare page
    return make_error(Errc::out_of_range, "the step's sequences list " + std::to_string(p->page_ids.size()) +
                                              " pages; the CUDA runner's table holds " +
                                              std::to_string(lim.page_table - 1));
  return first_page;
}

// Decode-sized steps run as CUDA graphs, one per padded size (powers of two): tokens past T write
// and read only the spare page, so they touch nothing real. The view depth needs no key: each
// token's segment list is data.
void pad_graphed(const CudaStepLimits& lim, CudaStepPlan* p) {
  const int T = p->n_tokens;
  p->n_run = 1;
  while (p->n_run < T) p->n_run *= 2;
  p->n_run = std::min(p->n_run, lim.max_tokens);
  const auto spare = static_cast<int32_t>(p->page_ids.size());
  p->page_ids.push_back(static_cast<int32_t>(lim.n_pages));
  for (int t = T; t < p->n_run; ++t) {
    p->ids.push_back(0);
    p->pos.push_back(0);
    p->write_page.push_back(static_cast<int32_t>(lim.n_pages));
    p->write_slot.push_back(0);
    p->tokens.push_back({static_cast<int32_t>(p->segs.size()), 1});
    p->segs.push_back({spare, 1, 0, 0});
  }
}

// Prefill-sized steps attend in tiles and project only the tokens that want logits.
void plan_prefill(std::span<const BatchToken> batch, const std::vector<std::vector<AttendSegment>>& plan,
                  CudaStepPlan* p) {
  plan_tiles(batch, plan, &p->tiles);
  // A tile of one reads its pages once per query head with one warp of four busy: such tokens go
  // to the per-token kernel, which serves a KV head's whole query group at once.
  for (const cuda::AttnTile& t : p->tiles)
    if (t.n_tokens == 1) {
      p->single_tokens.push_back(t.first_token);
      p->single_table.push_back(p->tokens[static_cast<size_t>(t.first_token)]);
    }
  std::erase_if(p->tiles, [](const cuda::AttnTile& t) { return t.n_tokens == 1; });
  for (int t = 0; t < static_cast<int>(batch.size()); ++t)
    if (batch[static_cast<size_t>(t)].logits) p->logit_tokens.push_back(t);
}

}  // namespace

Result<CudaStepPlan> plan_cuda_step(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                                    std::span<const View> views,
                                    std::span<const std::optional<PlannedDraw>> draws, bool have_tokens_out,
                                    const CudaStepLimits& lim) {
  CudaStepPlan p;
  const int T = static_cast<int>(batch.size());
  p.n_tokens = T;
  if (Status s = plan_draws(batch, draws, have_tokens_out, &p); !s.ok()) return s.error();
  for (const SequenceKv* s : seqs)
    for (int32_t pg : s->pages)
      if (pg < 0 || pg >= lim.n_pages)
        return bad("page " + std::to_string(pg) + " is outside the CUDA runner's " +
                   std::to_string(lim.n_pages) + " pages");

  const auto plan = plan_attention(batch, seqs, views);
  auto first_page = plan_page_list(plan, seqs, lim, &p);
  if (!first_page) return first_page.error();
  for (int t = 0; t < T; ++t) {
    const BatchToken& b = batch[static_cast<size_t>(t)];
    p.ids.push_back(b.token);
    p.pos.push_back(b.pos);
    p.write_page.push_back(
        seqs[static_cast<size_t>(b.seq)]->pages[static_cast<size_t>(b.pos / KvCache::page_size())]);
    p.write_slot.push_back(b.pos % KvCache::page_size());
    p.tokens.push_back(
        {static_cast<int32_t>(p.segs.size()), static_cast<int32_t>(plan[static_cast<size_t>(t)].size())});
    for (const AttendSegment& sg : plan[static_cast<size_t>(t)])
      p.segs.push_back({(*first_page)[static_cast<size_t>(sg.block)], static_cast<int32_t>(sg.n_kv),
                        static_cast<int32_t>(sg.rotation), 0});
  }

  // Decode-sized steps run as CUDA graphs (pad_graphed), larger ones in tiles.
  p.graphed = lim.graphs && T <= lim.graph_max_tokens;
  p.n_run = T;
  if (p.graphed)
    pad_graphed(lim, &p);
  else
    plan_prefill(batch, plan, &p);
  for (size_t i = 0; i < p.samples.size(); ++i)  // samples[i].row held its token
    p.samples[i].row = static_cast<int32_t>(p.logits_row(p.samples[i].row, p.sample_out[i]));
  return p;
}

}  // namespace chorus
