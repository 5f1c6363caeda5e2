// What a topology program has done, kept outside its node, so that a run of it that starts again
// elsewhere takes its finished work again instead of doing it twice (docs/cluster.md, "A node that
// dies under a topology program"). The coordinator keeps one per program across its runs
// (ProgramHooks::journal); one engine keeps none.
//
// Recorded, per generator role (named by the role and, for a role a patch made again, its
// incarnation) and run: each request's input tokens, the tokens it generated (with their text)
// and how it finished, stamped in the order the requests began; each tool call's result. Per sink
// that reaches the outside (a file, a ZeroMQ socket, a callback) and per producer (a role's text,
// an event's lines): how many bytes it has delivered.
//
// Replayed, in the next run of the program (its roles started again from the topology): a
// generator whose request finds a finished record with the same input writes the recorded tokens
// into its block with one forward (its block's log is the same tokens; its KV is computed again
// there) and hears the recorded tokens as if generated: the same events, sinks and budget. A tool
// call finds its recorded result and the tool does not run again. A sink skips, per producer, the
// bytes it has delivered already.
//
// The history is kept up to the first thing done otherwise. When a run begins, the requests that
// had not finished (in flight when the node died) are where the history stops: every record begun
// after the first of them is dropped, since it may rest on what those requests had written so
// far. When a request runs live over an existing record (another input: the program took another
// path), every record begun after that one is dropped likewise. Thread-safe (roles are actors).
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
    int64_t seq = 0;  // the order in which requests began, over every role
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
  // begin() over an existing record drops every record begun after it.
  void begin(const std::string& role, int run, int k, const std::vector<TokenId>& input);
  void token(const std::string& role, int run, int k, TokenId id, const std::string& text);
  void finish(const std::string& role, int run, int k, FinishReason reason);
  // Call `call` of the run (made by request `call`): its result, or nothing for a call that must
  // run again whatever happened (an edit_program patch, which the new run applies again).
  void tool(const std::string& role, int run, int call, std::optional<std::string> result);

  // Replaying: the finished record of that request when its input is `input`; otherwise nothing
  // (the role runs it live, and its begin() drops what came after).
  std::optional<Generation> replay(const std::string& role, int run, int k,
                                   const std::vector<TokenId>& input);
  // The recorded result of call `call` of that run, if any.
  std::optional<std::string> replay_tool(const std::string& role, int run, int call);

  // The part of `text` that sink `sink` has not delivered yet from `producer`, in this run of the
  // program (counted in bytes since the run began); what it returns counts as delivered.
  std::string deliver(const std::string& sink, const std::string& producer, const std::string& text);
  // Bytes sink `sink` has delivered, over every run and producer (a file sink of a run that
  // starts again appends to its file rather than truncating it).
  int64_t delivered(const std::string& sink) const;

  // A new run of the program begins: the history stops at the first request that had not
  // finished, and the sinks' counts of this run start again at 0.
  void new_run();
  Counts replayed() const;         // over every run
  bool stopped_recording() const;  // past max_bytes

 private:
  struct Run {
    std::vector<Generation> requests;
    std::vector<std::optional<std::string>> tools;  // call i follows request i
  };
  struct SinkCount {
    int64_t delivered = 0;  // over every run
    int64_t seen = 0;       // in this run
  };
  Generation* at(const std::string& role, int run, int k);  // null if not recorded
  void drop_from(const std::string& role, int run, int k);  // records of request k of `run` and after
  void drop_after(int64_t seq);                             // every record begun after `seq`
  bool full() const { return bytes_ >= max_bytes_; }

  mutable std::mutex m_;
  std::map<std::string, std::vector<Run>> roles_;
  std::map<std::pair<std::string, std::string>, SinkCount> sinks_;  // (sink, producer)
  int64_t seq_ = 0;
  Counts replayed_;
  const int64_t max_bytes_;
  int64_t bytes_ = 0;  // recorded so far (what was dropped included)
};

}  // namespace chorus
