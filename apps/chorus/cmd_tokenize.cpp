// `chorus tokenize`: text -> token ids, or ids -> text with --decode.
#include <cstdio>
#include <string>
#include <vector>

#include "apps/chorus/commands.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus::app {
namespace {

// Parses "1, 2 3,4" into ids; reports the first bad item.
Result<std::vector<TokenId>> parse_ids(const std::string& s, size_t vocab) {
  std::vector<TokenId> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ' || s[i] == '\t' || s[i] == '[' || s[i] == ']') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j - i > 9)
      return make_error(Errc::invalid_argument, "--decode: '" + s.substr(i, 12) + "' is not a token id");
    const long id = std::stol(s.substr(i, j - i));
    if (static_cast<size_t>(id) >= vocab)
      return make_error(Errc::out_of_range, "--decode: token id " + std::to_string(id) +
                                                " is outside the vocabulary (" + std::to_string(vocab) +
                                                " tokens)");
    ids.push_back(static_cast<TokenId>(id));
    i = j;
  }
  return ids;
}

std::string visible(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 32) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

int run_tokenize(const TokenizeArgs& args) {
  auto gguf = GgufFile::open(args.model);
  if (!report("tokenize", gguf)) return 1;
  auto tok = Tokenizer::from_gguf(*gguf);
  if (!report("tokenize", tok)) return 1;
  if (!args.decode_ids.empty()) {
    auto ids = parse_ids(args.decode_ids, tok->vocab_size());
    if (!ids) {
      std::fprintf(stderr, "chorus tokenize: %s\n", ids.error().message.c_str());
      return 2;
    }
    std::fwrite(tok->decode(*ids).data(), 1, tok->decode(*ids).size(), stdout);
    std::printf("\n");
    return 0;
  }
  std::string text = args.text;
  if (args.chat) {
    auto tmpl = ChatTemplate::from_gguf(*gguf, *tok);
    if (!report("tokenize", tmpl)) return 1;
    auto rendered = tmpl->apply({{"user", text}});
    if (!report("tokenize", rendered)) return 1;
    text = std::move(*rendered);
  }
  const auto ids =
      tok->encode(text, {.add_special = args.add_special, .parse_special = args.parse_special || args.chat});
  if (args.pieces) {
    for (TokenId id : ids) std::printf("%6d  %s\n", id, visible(tok->token_to_piece(id)).c_str());
    std::printf("%zu tokens\n", ids.size());
    return 0;
  }
  std::printf("[");
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %d" : "%d", ids[i]);
  std::printf("]\n");
  return 0;
}

}  // namespace chorus::app
