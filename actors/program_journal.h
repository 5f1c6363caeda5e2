// What a topology program has done, kept outside its node, so that a run of it that starts again
// elsewhere takes its finished work again instead of doing it twice (docs/cluster.md, "A node that
// dies under a topology program"). The coordinator keeps one per program across its runs
// (ProgramHooks::journal); one engine keeps none.
//
// Recorded, per generator role and run: each request's input tokens, the tokens it generated
// (with their text) and how it finished; each tool call's result. Per sink that reaches the
// outside (a file, a ZeroMQ socket, a callback): how many bytes it has delivered.
//
// Replayed, in the next run of the program (its roles started again from the topology): a
// generator whose request finds a finished record with the same input writes the recorded tokens
// into its block with one forward (its block's log is the same tokens; its KV is computed again
// there) and hears the recorded tokens as if generated: the same events, sinks and budget. A tool
// call finds its recorded result and the tool does not run again. A sink skips the bytes it has
// delivered already. A request whose record had not finished (in flight when the node died) runs
// live from there (that role's later records are dropped). One whose input differs means the
// program took another path: nothing more is given back in that run, and every role's records
// past the point the run has reached are dropped, so no role replays work that rested on blocks
// written otherwise. Thread-safe (roles are actors).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/step/engine.h"

namespace chorus {

class ProgramJournal {
 public:
  // What one program may record: past it, nothing more is recorded (a run after that gives back
  // what came before and does the rest live), so a program that runs for days does not grow the
  // coordinator's memory without end.
  static constexpr int64_t kDefaultMaxBytes = int64_t{64} << 20;
  explicit ProgramJournal(int64_t max_bytes = kDefaultMaxBytes) : max_bytes_(max_bytes) {}

  // One request of a run: what went in, what came out (each token and its text), how it ended.
  struct Generation {
    std::vector<TokenId> input;
    std::vector<TokenId> out;
    std::vector<uint32_t> ends;  // token i's text is text[ends[i - 1] .. ends[i])
    std::string text;
    bool finished = false;
    FinishReason reason = FinishReason::completed;
    std::string token_text(size_t i) const {
      const uint32_t b = i == 0 ? 0 : ends[i - 1];
      return text.substr(b, ends[i] - b);
    }
  };
  struct Counts {
    int64_t requests = 0;      // generations taken from the record
    int64_t tokens = 0;        // their generated tokens
    int64_t tool_results = 0;  // tool calls not run again
    int64_t sink_bytes = 0;    // bytes sinks did not deliver again
  };

  // Recording (role `role`'s run `run`, request `k` of that run: 0, then one per tool call).
  void begin(const std::string& role, int run, int k, const std::vector<TokenId>& input);
  void token(const std::string& role, int run, int k, TokenId id, const std::string& text);
  void finish(const std::string& role, int run, int k, FinishReason reason);
  void tool(const std::string& role, int run, int call, const std::string& result);

  // Replaying: the finished record of that request when its input is `input`; otherwise nothing
  // (the role runs it live, and its begin() drops the role's records from there on).
  std::optional<Generation> replay(const std::string& role, int run, int k,
                                   const std::vector<TokenId>& input);
  // The recorded result of call `call` of that run, if any.
  std::optional<std::string> replay_tool(const std::string& role, int run, int call);

  // The part of `text` that sink `sink` has not delivered yet, in this run of the program
  // (counted in bytes since the run began); what it returns counts as delivered.
  std::string deliver(const std::string& sink, const std::string& text);

  bool stopped_recording() const;  // past max_bytes
  // Bytes sink `sink` has delivered, over every run (a file sink of a run that starts again
  // appends to its file rather than truncating it).
  int64_t delivered(const std::string& sink) const;
  // A new run of the program begins (the sinks' counts of this run start again at 0).
  void new_run();
  Counts replayed() const;  // over every run

 private:
  struct Run {
    std::vector<Generation> requests;
    std::vector<std::string> tools;
  };
  struct SinkCount {
    int64_t delivered = 0;  // over every run
    int64_t seen = 0;       // in this run
  };
  Generation* at(const std::string& role, int run, int k);  // null if not recorded
  void drop_from(const std::string& role, int run, int k);  // records of request k of `run` and after
  void touch(const std::string& role, int run, int k);      // this run has reached that request
  // A record with another input: nothing more is given back in this run, and every role's records
  // past what this run has reached are dropped.
  void diverge();

  mutable std::mutex m_;
  std::map<std::string, std::vector<Run>> roles_;
  std::map<std::string, SinkCount> sinks_;
  std::map<std::string, std::pair<int, int>> touched_;  // per role, the last request this run reached
  bool diverged_ = false;                               // in this run
  Counts replayed_;
  const int64_t max_bytes_;
  int64_t bytes_ = 0;  // recorded so far (what was dropped included)
  bool full() const { return bytes_ >= max_bytes_; }
};

}  // namespace chorus
