// Chain reads of Gated DeltaNet views on the device (kernels/cuda/gdn_chain.cu): where the raw
// convolution inputs around a block of a view come from. Plain arithmetic, compiled for the
// device by the kernels and for the host by the tests (tests/engine/test_cuda_step_plan.cpp), so the
// index rules are checked without a GPU.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif

namespace chorus::cuda {

// One block of a chain read, in view order (engine/forward/cuda/cuda_linear.h): its slot, its length as the
// step found it, the body tokens in its summary, and where its head tokens' factors are in the
// step's head rows (min(n, keep) rows from head_row).
struct GdnChainBlock {
  int32_t slot, n, dense, head_row;
};

// Where a raw input is: row `row` of block `block`'s head rows or of its tail (its last
// min(n, keep) inputs, right-aligned in `keep` rows), row `row` of the reader's base tail (the
// inputs before the view's first block, right-aligned), or nowhere (zero: the view starts there).
struct GdnChainSource {
  enum From : int32_t { head, tail, base, zero };
  From from;
  int32_t block, row;
};

// The raw input at position p relative to the first token of blocks[i] (i may be n_blocks: the
// position after the last block), with p < keep and p < blocks[i].n when p >= 0: its own head
// row p, else the input -p positions back, found by walking the blocks before it (a block of n
// tokens holds the n inputs just before the next one; its tail keeps the last min(n, keep)),
// then the base tail when the reader has one.
CHORUS_HOST_DEVICE inline GdnChainSource gdn_chain_source(const GdnChainBlock* blocks, int i, int p, int keep,
                                                          bool has_base) {
  if (p >= 0) return {GdnChainSource::head, i, p};
  int back = -p;  // 1..keep
  for (int b = i - 1; b >= 0; --b) {
    if (back <= blocks[b].n) return {GdnChainSource::tail, b, keep - back};
    back -= blocks[b].n;
  }
  if (has_base) return {GdnChainSource::base, -1, keep - back};
  return {GdnChainSource::zero, -1, 0};
}

}  // namespace chorus::cuda
