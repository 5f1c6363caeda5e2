// The words programs and their blocks are described in, shared by the engine (how a paused
// block's KV is kept), the program policy and the actors that carry its decisions out.
#pragma once

namespace chorus {

// How a paused block's KV is kept: dropped (rebuilt by running its tokens again, under the
// views they were first written under) or offloaded (copied to host memory and back: exact).
enum class PauseMode { drop, offload };

// A program's phase (ThunderAgent): reasoning while it wants the engine, acting while a tool or
// an outside event has its turn.
enum class ProgramPhase { reasoning, acting };

// Its status. The values travel in frames (schemas/programs.fbs ProgramState mirrors them).
enum class ProgramState { active = 0, paused = 1, terminated = 2 };

}  // namespace chorus
