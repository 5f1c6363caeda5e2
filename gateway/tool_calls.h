// Tool calling in /v1/chat/completions: the request's tools and tool_choice, how the model is
// shown them, and its calls read back from what it wrote (docs/serve.md, "Tool calls").
//
// The model writes a call as <tool_call>{"name": NAME, "arguments": {...}}</tool_call> (Hermes
// and Qwen's format, which their templates teach; chorus's own system turn teaches it to models
// whose template has no tools). Read back too: Mistral's [TOOL_CALLS][...] and a reply that is
// a single {"name": ..., "parameters": ...} object (Llama 3's JSON calls).
//
// tool_choice "required" or a named function constrains the reply to calls (the grammar of
// engine/grammar/json_schema.h, tool_call_grammar): it is always calls of the offered tools with
// arguments that match their parameters. "auto" is unconstrained; a call that does not parse or
// names no offered tool stays text. A constrained reply with parallel calls that max_tokens cuts
// after one or more complete calls answers with those (finish_reason tool_calls); one cut before
// its first call ends is finish_reason length with the partial text as content.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"

namespace chorus {

struct ChatTools {
  std::string tools_json;          // the request's `tools`, as sent ("": none)
  std::string functions_json;      // [{"name", "parameters"}] of the tools the reply may call
  std::vector<std::string> names;  // of every offered tool
  std::string choice = "auto";     // none, auto, required, or "function" (one named tool)
  bool parallel = true;            // parallel_tool_calls: several calls in one reply

  // The prompt shows the tools whenever there are some (tool_choice none too, so that a
  // conversation's prompt does not change with it); only an active choice reads calls back.
  bool offered() const { return !names.empty(); }
  bool active() const { return offered() && choice != "none"; }
  bool constrained() const { return active() && (choice == "required" || choice == "function"); }
};

struct ToolCall {
  std::string id;  // call_...
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ToolReply {
  std::string content;  // the text before the calls, or all of it when there are none
  std::vector<ToolCall> calls;
  std::string cut;  // the call max_tokens cut off after `calls` (dropped), as written so far
};

// The calls in a finished reply; none when it holds none that parse, name an offered tool and
// carry an object of arguments (then `content` is the whole reply). `cut`: the reply was cut
// by max_tokens in the middle of a call, which is dropped (its text in ToolReply::cut), the
// complete ones before it kept.
ToolReply read_tool_calls(const std::string& text, const ChatTools& tools, bool cut = false);

// The system text that shows a model its tools when its template does not.
std::string describe_tools(const ChatTools& tools);

// For such a template, a history's tool turns as text: an assistant's calls as <tool_call>
// blocks after its content, a tool's result as a user turn <tool_response>RESULT</tool_response>.
std::vector<ChatMessage> calls_as_text(std::vector<ChatMessage> messages);

// While a reply streams: the text that can go to the client as content now. Text that may start
// a call (a "<tool_call>" being written, or a reply that opens with '{' or "[TOOL_CALLS]") is held
// until the reply ends; read_tool_calls then decides what it was.
class ToolCallStream {
 public:
  std::string push(const std::string& text);
  // What was held, once the reply is known to hold no calls.
  const std::string& held() const { return pending_; }

 private:
  std::string pending_;
  bool holding_ = false;
  bool started_ = false;  // anything but whitespace seen
};

}  // namespace chorus
