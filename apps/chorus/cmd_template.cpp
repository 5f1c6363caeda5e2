// `chorus template`: what a chat template renders, for a person checking the prompt a model sees
// and for the tests that hold chorus's Jinja interpreter against Python's jinja2.
//
//   chorus template [--model M.gguf] --input vars.json       the model's chat template
//   chorus template --template T.jinja --input vars.json     any template, variables as given
//   ... --batch                                              a JSON list in, a JSON list out
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/chorus/commands.h"
#include "engine/model/gguf.h"
#include "engine/template/jinja.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus::app {
namespace {

using ojson = nlohmann::ordered_json;

Result<std::string> read_all(const std::string& path) {
  if (path.empty() || path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, path + ": cannot be read");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One rendering: a plain template gets `vars` as they are; a chat template its messages, tools,
// add_generation_prompt and the rest as extra variables (bos_token and eos_token: the model's).
Result<std::string> render_one(const TemplateArgs& args, const JinjaTemplate* plain, const ChatTemplate* chat,
                               const ojson& vars) {
  if (!vars.is_object()) return make_error(Errc::invalid_argument, "the variables must be a JSON object");
  if (plain != nullptr) return plain->render(vars);
  ojson extra = vars;
  const ojson messages = extra.contains("messages") ? extra["messages"] : ojson::array();
  const ojson tools = extra.contains("tools") ? extra["tools"] : ojson(nullptr);
  const bool gen = extra.value("add_generation_prompt", args.add_generation_prompt);
  for (const char* k : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    extra.erase(k);
  return chat->render(messages, tools, gen, extra);
}

}  // namespace

int run_template(const TemplateArgs& args) {
  auto input = read_all(args.input);
  if (!report("template", input)) return 1;
  const ojson vars = ojson::parse(*input, nullptr, false);
  if (vars.is_discarded()) {
    std::fprintf(stderr, "chorus template: %s: not valid JSON\n",
                 args.input.empty() ? "stdin" : args.input.c_str());
    return 2;
  }
  std::optional<JinjaTemplate> plain;
  std::optional<ChatTemplate> chat;
  if (!args.template_file.empty()) {
    auto source = read_all(args.template_file);
    if (!report("template", source)) return 1;
    auto t = JinjaTemplate::parse(*source);
    if (!t) {
      std::fprintf(stderr, "chorus template: %s: %s\n", args.template_file.c_str(),
                   t.error().message.c_str());
      return 1;
    }
    plain = std::move(*t);
  } else {
    auto gguf = GgufFile::open(args.model);
    if (!report("template", gguf)) return 1;
    auto tok = Tokenizer::from_gguf(*gguf);
    if (!report("template", tok)) return 1;
    auto t = ChatTemplate::from_gguf(*gguf, *tok);
    if (!report("template", t)) return 1;
    chat = std::move(*t);
  }
  const JinjaTemplate* p = plain ? &*plain : nullptr;
  const ChatTemplate* c = chat ? &*chat : nullptr;
  if (!args.batch) {
    auto out = render_one(args, p, c, vars);
    if (!report("template", out)) return 1;
    std::fwrite(out->data(), 1, out->size(), stdout);
    return 0;
  }
  if (!vars.is_array()) {
    std::fprintf(stderr, "chorus template: --batch: the input must be a JSON list\n");
    return 2;
  }
  ojson results = ojson::array();
  for (const ojson& v : vars) {
    auto out = render_one(args, p, c, v);
    if (out)
      results.push_back({{"text", *out}});
    else
      results.push_back({{"error", {{"code", errc_id(out.error().code)}, {"message", out.error().message}}}});
  }
  std::printf("%s\n", results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace chorus::app
