// The words programs and their blocks are described in, shared by the engine (how a paused
// block's KV is kept), the program policy and the actors that carry its decisions out.
#pragma once

#include <cstdint>

namespace chorus {

// Memory is counted in KV pages of this many positions (the KV cache's page, engine/forward/
// kv_cache.h, which checks that they agree).
inline constexpr int kPageTokens = 16;
inline constexpr int64_t pages_for_tokens(int64_t tokens) {
  return (tokens + kPageTokens - 1) / kPageTokens;
}

// How a paused block's KV is kept: dropped (rebuilt by running its tokens again, under the
// views they were first written under) or offloaded (copied to host memory and back: exact).
enum class PauseMode { drop, offload };

// A program's phase (ThunderAgent): reasoning while it wants the engine, acting while a tool or
// an outside event has its turn.
enum class ProgramPhase { reasoning, acting };

// Its status. The values travel in frames (schemas/programs.fbs ProgramState mirrors them).
enum class ProgramState { active = 0, paused = 1, terminated = 2 };

}  // namespace chorus
