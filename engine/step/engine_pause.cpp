// Engine: what each block's tokens were written under (record_run), and pausing and restoring
// blocks (ThunderAgent's pause/restore at the engine level): offload copies KV pages to host
// memory and back; drop frees them and rebuilds them by replaying the recorded runs.
#include <algorithm>
#include <tuple>

#include "engine/forward/linear_state.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"

namespace chorus {

void Engine::record_run(BlockId block, int64_t start, int64_t count, const std::vector<BlockId>& view) {
  WriteRun run{next_run_++, block, start, count, {}, false, 0, steps_};
  for (size_t i = 0; i < view.size(); ++i) {
    if (view[i] == block) {
      run.target_in_view = true;
      run.target_index = i;
      continue;
    }
    run.view.emplace_back(view[i], (*blocks_->get(view[i]))->n_cached());
  }
  // Consecutive tokens of one block under an unchanged view extend the previous run, when
  // nothing was written in between: then no other run read the block at a length between the
  // two, and replaying the longer run in bigger pieces changes nothing anyone saw.
  if (!runs_.empty()) {
    WriteRun& last = runs_.back();
    if (last.block == block && last.start + last.count == start && last.view == run.view &&
        last.target_in_view == run.target_in_view && last.target_index == run.target_index) {
      last.count += count;
      return;
    }
  }
  runs_.push_back(std::move(run));
}

Status Engine::pause(std::span<const BlockId> ids, PauseMode mode) {
  for (BlockId id : ids) {  // check everything first: a refused pause changes nothing
    auto b = blocks_->get(id);
    if (!b) return b.error();
    const Block& blk = **b;
    if (blk.paused)
      return make_error(Errc::invalid_argument, "block " + std::to_string(id) + " is already paused");
    if (blk.holds > 0)
      return make_error(Errc::invalid_argument, "cannot pause block " + std::to_string(id) + ": " +
                                                    std::to_string(blk.holds) + " pending request(s) use it");
    if (blk.extents.size() > 1)
      return make_error(Errc::unsupported, "cannot pause block " + std::to_string(id) +
                                               ": it was built by merge/fork (pause its sources instead)");
    for (const Extent& e : blk.extents)
      for (int32_t pg : e.kv.pages)
        if (kv_.refs(pg) > 1)
          return make_error(Errc::unsupported, "cannot pause block " + std::to_string(id) +
                                                   ": it shares KV pages with another block (merge/fork)");
  }
  // Offload copies first (pages, then a hybrid block's linear state out of its slot), so that a
  // failed copy leaves every block as it was.
  std::vector<std::vector<std::byte>> saved(ids.size());
  Runner& runner = pass_->runner();
  auto undo = [&](size_t n) {  // states moved out before a copy failed go back into their slots
    for (size_t j = 0; j < n; ++j)
      if (const Block& b = **blocks_->get(ids[j]); !b.extents.empty() && b.extents.back().kv.linear)
        (void)runner.load_linear(*b.extents.back().kv.linear);
  };
  if (mode == PauseMode::offload)
    for (size_t i = 0; i < ids.size(); ++i) {
      const Block& b = **blocks_->get(ids[i]);
      if (b.extents.empty()) continue;
      const SequenceKv& kv = b.extents.back().kv;
      const std::span<const int32_t> pages(kv.pages.data(),
                                           static_cast<size_t>(KvCache::pages_for(kv.n_tokens)));
      saved[i].resize(pages.size() * kv_.page_bytes());
      Status s = kv_.save_pages(pages, saved[i].data());
      if (s.ok() && kv.linear) s = runner.offload_linear(*kv.linear);
      if (!s.ok()) {
        undo(i);
        return make_error(s.error().code,
                          "pausing block " + std::to_string(ids[i]) + ": " + s.error().message);
      }
    }
  for (size_t i = 0; i < ids.size(); ++i) {
    Block& b = **blocks_->get(ids[i]);
    b.paused = true;
    b.paused_cached = b.n_cached();
    b.last_logits.clear();
    if (b.extents.empty()) continue;
    SequenceKv& kv = b.extents.back().kv;
    if (mode == PauseMode::offload) {
      b.offloaded = std::move(saved[i]);
      b.offloaded_linear = kv.linear;  // hybrid models: the linear state, in host memory (no slot)
    }
    kv_.release(kv);
  }
  if (trace_) trace_blocks("pause", ids, mode == PauseMode::offload ? "offload" : "drop");
  return Status::success();
}

// Each is paused; the blocks their dropped runs read are resident or restored with them; all
// their pages fit.
Status Engine::check_restore(std::span<const BlockId> ids) const {
  for (BlockId id : ids) {
    auto b = blocks_->get(id);
    if (!b) return b.error();
    if (!(*b)->paused)
      return make_error(Errc::invalid_argument, "block " + std::to_string(id) + " is not paused");
  }
  // Dropped runs read their views' blocks: those must be resident or restored here too.
  auto restoring = [&](BlockId x) { return std::find(ids.begin(), ids.end(), x) != ids.end(); };
  for (const WriteRun& r : runs_) {
    if (!restoring(r.block) || !(*blocks_->get(r.block))->offloaded.empty()) continue;
    for (const auto& [vb, len] : r.view) {
      auto b = blocks_->get(vb);
      if (!b)
        return make_error(Errc::not_found, "cannot restore block " + std::to_string(r.block) +
                                               ": it was written seeing a block that is gone (" +
                                               b.error().message + ")");
      if ((*b)->paused && !restoring(vb))
        return make_error(Errc::invalid_argument, "cannot restore block " + std::to_string(r.block) +
                                                      ": it was written seeing block " + std::to_string(vb) +
                                                      ", which is paused; restore both together");
    }
  }
  // Room for all of them first: a restore that ran out of pages (or slots) halfway would leave
  // blocks neither paused nor whole.
  int64_t need = 0;
  int need_slots = 0;  // hybrid models: a block with tokens gets its linear state back
  for (BlockId id : ids) {
    const int64_t n = (*blocks_->get(id))->paused_cached;
    need += KvCache::pages_for(n);
    need_slots += n > 0 ? 1 : 0;
  }
  if (need > kv_.n_free())
    return make_error(Errc::out_of_memory, "KV cache full: restoring needs " + std::to_string(need) +
                                               " pages, " + std::to_string(kv_.n_free()) + " of " +
                                               std::to_string(kv_.n_pages()) +
                                               " are free; nothing was restored");
  if (const LinearSlots* slots = kv_.linear_slots(); slots && need_slots > slots->free())
    return make_error(Errc::out_of_memory,
                      "linear-state slots full: restoring needs " + std::to_string(need_slots) + ", " +
                          std::to_string(slots->free()) + " of " + std::to_string(slots->capacity()) +
                          " are free; nothing was restored");
  return Status::success();
}

// Offloaded blocks are copied back; the dropped ones are returned, to be run again.
Result<std::vector<BlockId>> Engine::load_offloaded(std::span<const BlockId> ids) {
  std::vector<BlockId> dropped;
  for (BlockId id : ids) {
    Block& b = **blocks_->get(id);
    if (b.offloaded.empty()) {
      dropped.push_back(id);
      if (!b.extents.empty()) b.extents.back().kv.n_tokens = 0;
      continue;
    }
    SequenceKv& kv = b.extents.back().kv;
    const int64_t n = b.paused_cached;
    CHORUS_TRY(kv_.reserve(kv, n));
    const std::span<const int32_t> pages(kv.pages.data(), static_cast<size_t>(KvCache::pages_for(n)));
    if (pages.size() * kv_.page_bytes() != b.offloaded.size())
      return make_error(Errc::internal, "block " + std::to_string(id) + ": its offloaded copy holds " +
                                            std::to_string(b.offloaded.size()) + " bytes, not " +
                                            std::to_string(pages.size()) + " pages");
    if (Status s = kv_.load_pages(pages, b.offloaded.data()); !s.ok())
      return make_error(s.error().code, "restoring block " + std::to_string(id) + ": " + s.error().message);
    kv.n_tokens = n;
    kv.linear = std::move(b.offloaded_linear);
    if (kv.linear)
      if (Status s = pass_->runner().load_linear(*kv.linear); !s.ok())
        return make_error(s.error().code, "restoring block " + std::to_string(id) + ": " + s.error().message);
    b.offloaded.clear();
    b.offloaded.shrink_to_fit();
    b.paused = false;
  }
  return dropped;
}

Status Engine::replay_dropped(const std::vector<BlockId>& dropped) {
  // Dropped blocks: run their runs again, in their first order, under their recorded views;
  // runs of one step together in one forward (readers of a block written in the same step saw
  // it as the step found it: the same-step rule reproduces that, and a hybrid model's linear
  // layers cannot read a block at an earlier length than it has).
  std::vector<const WriteRun*> todo;
  for (const WriteRun& r : runs_) {
    if (std::find(dropped.begin(), dropped.end(), r.block) == dropped.end()) continue;  // offloaded: back
    if (r.start >= (*blocks_->get(r.block))->paused_cached) continue;  // written after the pause
    todo.push_back(&r);
  }
  for (size_t i = 0; i < todo.size();) {
    size_t j = i + 1;
    while (j < todo.size() && todo[j]->step == todo[i]->step) ++j;
    auto count_of = [&](const WriteRun* r) {
      return std::min(r->count, (*blocks_->get(r->block))->paused_cached - r->start);
    };
    if (j == i + 1) {  // one run: in pieces of the token budget
      const int64_t count = count_of(todo[i]);
      for (int64_t done = 0; done < count;) {
        const int64_t k = std::min<int64_t>(count - done, opts_.token_budget);
        if (Status s = replay({{todo[i], done, k}}); !s.ok()) return s;
        done += k;
      }
    } else {
      std::vector<std::tuple<const WriteRun*, int64_t, int64_t>> pieces;
      for (size_t k = i; k < j; ++k) pieces.emplace_back(todo[k], 0, count_of(todo[k]));
      if (Status s = replay(pieces); !s.ok()) return s;
    }
    i = j;
  }
  return Status::success();
}

Status Engine::restore(std::span<const BlockId> ids) {
  CHORUS_TRY(check_restore(ids));
  CHORUS_ASSIGN_OR_RETURN(const std::vector<BlockId> dropped, load_offloaded(ids));
  for (BlockId id : ids) (*blocks_->get(id))->paused = false;
  CHORUS_TRY(replay_dropped(dropped));
  if (trace_) trace_blocks("restore", ids, dropped.empty() ? "offloaded" : "recomputed");
  return Status::success();
}

Result<BlockImage> Engine::export_block(BlockId id) const {
  CHORUS_ASSIGN_OR_RETURN(const Block* b, blocks_->get(id));
  const std::string name = "block " + std::to_string(id);
  auto cannot = [&](const std::string& why) {
    return make_error(Errc::unsupported, "cannot export " + name + ": " + why);
  };
  if (b->holds > 0)
    return make_error(Errc::invalid_argument, "cannot export " + name + ": " + std::to_string(b->holds) +
                                                  " pending request(s) use it");
  const int64_t cached = b->paused ? b->paused_cached : b->n_cached();
  if (b->extents.size() > 1) return cannot("it was built by merge/fork");
  if (b->offloaded_linear || (!b->extents.empty() && b->extents.back().kv.linear))
    return cannot("a hybrid model's linear state does not travel");
  for (const WriteRun& r : runs_)
    if (r.block == id && !r.view.empty())
      return cannot("it was written seeing block " + std::to_string(r.view.front().first) +
                    ", so its KV depends on that block");
  BlockImage image;
  image.tokens = b->tokens;
  image.cached = cached;
  image.format = kv_.page_format();
  if (cached == 0) return image;
  if (b->paused) {
    if (b->offloaded.empty()) return cannot("its KV was dropped by a pause");
    image.kv = b->offloaded;
    return image;
  }
  const SequenceKv& kv = b->extents.back().kv;
  const std::span<const int32_t> pages(kv.pages.data(), static_cast<size_t>(KvCache::pages_for(kv.n_tokens)));
  for (int32_t pg : pages)
    if (kv_.refs(pg) > 1) return cannot("it shares KV pages with another block (merge/fork)");
  image.kv.resize(pages.size() * kv_.page_bytes());
  if (Status s = kv_.save_pages(pages, image.kv.data()); !s.ok())
    return make_error(s.error().code, "exporting " + name + ": " + s.error().message);
  return image;
}

Status Engine::load_block(BlockId id, BlockImage image) {
  CHORUS_ASSIGN_OR_RETURN(Block * b, blocks_->get(id));
  const std::string name = "block " + std::to_string(id);
  if (!b->paused || !b->tokens.empty() || b->paused_cached != 0 || b->n_cached() != 0 || b->holds > 0)
    return make_error(
        Errc::invalid_argument,
        "cannot load " + name + ": only a paused block that was never written and is unused can");
  if (image.format != kv_.page_format())
    return make_error(Errc::invalid_argument, "cannot load " + name + ": its pages are " + image.format +
                                                  ", this engine's are " + kv_.page_format());
  const int64_t n = image.cached;
  if (n < 0 || n > static_cast<int64_t>(image.tokens.size()))
    return make_error(Errc::invalid_argument, "cannot load " + name + ": " + std::to_string(n) +
                                                  " cached positions in a log of " +
                                                  std::to_string(image.tokens.size()) + " tokens");
  const auto want = static_cast<size_t>(KvCache::pages_for(n)) * kv_.page_bytes();
  if (image.kv.size() != want)
    return make_error(Errc::invalid_argument, "cannot load " + name + ": " + std::to_string(n) +
                                                  " positions take " + std::to_string(want) +
                                                  " bytes of pages, not " + std::to_string(image.kv.size()));
  if (image.tokens.empty()) return Status::success();
  for (TokenId t : image.tokens)
    if (t < 0 || t >= model_.config.n_vocab)
      return make_error(Errc::invalid_argument, "cannot load " + name + ": token " + std::to_string(t) +
                                                    " is outside the vocabulary");
  b->tokens = std::move(image.tokens);
  b->offloaded = std::move(image.kv);
  b->paused_cached = n;
  if (b->extents.empty()) b->extents.push_back(Extent{});
  // Its KV was computed seeing nothing else: a drop pause later runs the log again that way.
  runs_.push_back(WriteRun{next_run_++, id, 0, n, {}, true, 0, steps_});
  if (trace_) trace_blocks("load", std::span<const BlockId>(&id, 1), std::to_string(n) + " positions");
  return Status::success();
}

Status Engine::replay(const std::vector<std::tuple<const WriteRun*, int64_t, int64_t>>& pieces) {
  std::deque<SequenceKv> cut;  // context blocks cut to the lengths they had (stable addresses)
  std::vector<SequenceKv*> seqs;
  std::vector<View> views;
  std::vector<BatchToken> batch;
  std::vector<std::pair<Block*, size_t>> last_logits;  // blocks whose last token is in this forward
  for (const auto& [r, done, k] : pieces) {
    Block& w = **blocks_->get(r->block);
    auto e = blocks_->prepare_write(r->block, k);
    if (!e) return e.error();
    View v;
    auto add_block = [&](BlockId b, int64_t len) {
      for (Extent& x : (*blocks_->get(b))->extents) {
        if (x.first >= len) break;
        SequenceKv c = x.kv;
        c.n_tokens = std::min(x.kv.n_tokens, len - x.first);
        // The linear-layer state is read, not owned: an alias that does not count as a holder
        // (a holder would make the block's own writer copy it).
        c.linear = std::shared_ptr<LinearState>(std::shared_ptr<LinearState>(), x.kv.linear.get());
        cut.push_back(std::move(c));
        v.push_back(static_cast<int32_t>(seqs.size()));
        seqs.push_back(&cut.back());
      }
    };
    for (size_t i = 0; i <= r->view.size(); ++i) {
      if (r->target_in_view && i == r->target_index) v.push_back(-2);  // placeholder for the write block
      if (i < r->view.size()) add_block(r->view[i].first, r->view[i].second);
    }
    const auto write_seq = static_cast<int32_t>(seqs.size());
    seqs.push_back(&e.value()->kv);
    if (r->target_in_view)
      std::replace(v.begin(), v.end(), -2, write_seq);
    else
      v.push_back(write_seq);
    const int64_t base = e.value()->kv.n_tokens;
    const bool last = r->start + done + k == w.paused_cached;
    for (int64_t i = 0; i < k; ++i)
      batch.push_back({w.tokens[static_cast<size_t>(r->start + done + i)], static_cast<int32_t>(base + i),
                       write_seq, last && i + 1 == k, static_cast<int32_t>(views.size())});
    if (last) last_logits.emplace_back(&w, last_logits.size());
    views.push_back(std::move(v));
  }
  logits_.resize(static_cast<size_t>(model_.config.n_vocab) * std::max<size_t>(1, last_logits.size()));
  if (Status s = forward(batch, seqs, views); !s.ok()) return s;
  const auto V = static_cast<size_t>(model_.config.n_vocab);
  for (const auto& [b, i] : last_logits)
    b->last_logits.assign(logits_.begin() + static_cast<long>(i * V),
                          logits_.begin() + static_cast<long>((i + 1) * V));
  return Status::success();
}

}  // namespace chorus
