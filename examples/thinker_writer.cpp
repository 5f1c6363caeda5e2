// The AsyncLLM paper's thinker-writer agent (its Figure 2) on chorus's actors: a thinker
// reasons into its block; a writer, seeing the thinker's block live through its view, writes
// one short line after each sentence or line the thinker finishes — while the thinker goes on.
//   ./build/examples/thinker_writer "Why is the sky blue?"
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/roles.h"
#include "device/cpu_device.h"
#include "engine/model/model_paths.h"
#include "engine/step/engine.h"
#include "net/codec.h"

using namespace chorus;

int main(int argc, char** argv) {
  const std::string question = argc > 1 ? argv[1] : "Why is the sky blue?";
  auto model = Model::load(default_model_path());
  auto device = CpuDevice::create();
  if (!model || !device) {
    std::fprintf(stderr, "%s\n", (!model ? model.error() : device.error()).to_string().c_str());
    return 1;
  }
  auto engine = Engine::create(**model, **device);
  if (!engine) return 1;
  const Tokenizer& tok = (*model)->tokenizer;

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::actor batcher = spawn_batcher(sys, std::move(*engine));
  {
    caf::scoped_actor self{sys};
    auto call = [&](const Frame& f) {
      Reply out;
      self->request(batcher, caf::infinite, frame_atom::value, f)
          .receive([&](const std::vector<uint8_t>& r) { out = *decode_reply(r); }, [](caf::error&) {});
      return out;
    };
    // Three blocks: the question, the thinker's thoughts, the writer's answer.
    const auto prompt = static_cast<BlockId>(call(encode_create_block(1, "prompt")).id);
    const auto thoughts = static_cast<BlockId>(call(encode_create_block(2, "thoughts")).id);
    const auto answer = static_cast<BlockId>(call(encode_create_block(3, "answer")).id);
    const std::string q =
        "<|im_start|>system\nYou are a helpful assistant. Think step by step.<|im_end|>\n"
        "<|im_start|>user\n" +
        question + "<|im_end|>\n";
    call(encode_request(4, Request::forward(prompt, tok.encode(q, {.parse_special = true}))));
    self->receive([](event_atom, const std::vector<uint8_t>&) {});  // the prompt is in

    std::mutex out;  // the two roles print from their own threads
    const auto t0 = std::chrono::steady_clock::now();
    auto stamp = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    ThinkerConfig tc;
    tc.view = {prompt};
    tc.write_to = thoughts;
    tc.prefill = tok.encode("<|im_start|>assistant\n", {.parse_special = true});
    tc.max_tokens = 120;
    tc.separators = {"\n", ". "};
    tc.on_text = [&](const std::string& text) {
      std::lock_guard<std::mutex> l(out);
      std::printf("%s", text.c_str());
      std::fflush(stdout);
    };
    WriterConfig wc;
    wc.view = {prompt, thoughts, answer};
    wc.write_to = answer;
    wc.prefill = tok.encode("\nIn one line:", {.parse_special = true});
    wc.max_tokens = 24;
    wc.sink = [&](const std::string& line) {
      std::lock_guard<std::mutex> l(out);
      std::printf("\n    [writer %.2fs]%s\n", stamp(), line.c_str());
      std::fflush(stdout);
    };
    wc.notify = caf::actor_cast<caf::actor>(self);
    tc.subscribers = {spawn_writer(sys, batcher, wc)};
    std::printf("[thinker]\n");
    spawn_thinker(sys, batcher, tc);
    self->receive([](done_atom) {});
    std::printf("\n[done in %.2fs]\n", stamp());
  }
  caf::anon_send_exit(batcher, caf::exit_reason::user_shutdown);
  return 0;
}
