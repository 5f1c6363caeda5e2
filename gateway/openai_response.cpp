#include "gateway/openai_response.h"

#include <algorithm>

namespace chorus {

using json = nlohmann::json;

std::string StopStrings::push(const std::string& text) {
  held_ += text;
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  bool stopped = false;
  for (const auto& s : stops_)
    if (const auto at = held_.find(s); at != std::string::npos) {
      held_.resize(at);
      stopped = true;
    }
  if (stopped) keep = 0;
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  if (stopped) held_.clear();
  return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json list = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c = {{"id", calls[k].id},
              {"type", "function"},
              {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) c["index"] = k;
    list.push_back(std::move(c));
  }
  return list;
}

namespace {
json token_json(const Tokenizer& tok, const TokenLogprob& t) {
  const std::string piece = tok.token_to_piece(t.token);
  json bytes = json::array();
  for (const unsigned char c : piece) bytes.push_back(c);
  return {{"token", piece}, {"logprob", t.logprob}, {"bytes", std::move(bytes)}};
}
}  // namespace

json chat_logprobs(const Tokenizer& tok, const TokenLogprobs& entries, size_t from, size_t to) {
  json content = json::array();
  for (size_t k = from; k < to; ++k) {
    json c = token_json(tok, entries[k][0]);
    json top = json::array();
    for (size_t t = 1; t < entries[k].size(); ++t) top.push_back(token_json(tok, entries[k][t]));
    c["top_logprobs"] = std::move(top);
    content.push_back(std::move(c));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json legacy_logprobs(const Tokenizer& tok, const TokenLogprobs& entries, size_t from, size_t to,
                     int64_t& offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t k = from; k < to; ++k) {
    const std::string piece = tok.token_to_piece(entries[k][0].token);
    tokens.push_back(piece);
    lps.push_back(entries[k][0].logprob);
    json top = json::object();
    for (size_t t = 1; t < entries[k].size(); ++t)
      top[tok.token_to_piece(entries[k][t].token)] = entries[k][t].logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(piece.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace chorus
