#include "actors/program.h"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <chrono>

#include "actors/atoms.h"
#include "actors/program_impl.h"
#include "actors/program_manager.h"
#include "actors/submit.h"
#include "net/codec.h"
#include "net/role_codec.h"

namespace chorus {

void Program::Impl::teardown() {
  std::lock_guard<std::mutex> patching(patch_m);
  if (torn_down) return;
  torn_down = true;
  caf::scoped_actor self{*sys};
  tools_cancel->store(true);
  std::vector<caf::actor> all = actors;
  if (ctl) all.push_back(ctl);
  for (const auto& a : all) self->send_exit(a, caf::exit_reason::user_shutdown);
  for (const auto& a : all) self->wait_for(a);
  for (const auto* stage : {&sinks, &outlets}) {  // nothing a sink was given is lost
    for (const auto& a : *stage) self->send(a, stop_atom::value);
    for (const auto& a : *stage) self->wait_for(a);
  }
  // What the blocks hold, through the batcher (other programs may be stepping the engine);
  // then the program ends there, its blocks freed.
  std::map<std::string, int64_t> tokens;
  // Not paused or restored from here on (abandoned while it waited: already terminated).
  if (managed && !engine->manager()->remove(program_id)) registered = false;
  if (batcher) {
    auto call = [&](const Frame& f) { return ask(self, batcher, f, std::chrono::seconds(60)); };
    for (const auto& [name, id] : blocks)
      if (auto r = call(encode_snapshot_view(0, {id})); r && !r->blocks.empty())
        tokens[name] = r->blocks[0].tokens;
    // Requests its roles left in the engine end with it (their actors are gone): cancelled,
    // then every block freed. An engine of its own goes as a whole.
    if (!own_engine && registered) {
      ProgramCmd end{ProgramCmd::Op::terminate, program_id, "", {}, PauseMode::drop};
      end.cancel = true;
      if (auto r = call(encode_program(0, end)); !r)
        spdlog::warn("program {}: ending it on the shared engine: {}", program_id, r.error().message);
    }
    if (managed) engine->manager()->check_now();  // its room may let a waiting program in
  }
  engine.reset();  // this program's own engine stops here
  std::lock_guard<std::mutex> l(outcome->m);
  for (const auto& [name, n] : tokens) outcome->report.block_tokens[name] = n;
  if (outcome->report.ended_by.empty()) {
    outcome->report.ended_by = "stopped";
    outcome->report.seconds = outcome->now();
  }
}

Program::Program(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Program::~Program() {
  if (impl_) {
    stop();
    wait();
  }
}

Status Program::feed(const std::string& source, const std::string& text) {
  auto it = impl_->api_sources.find(source);
  if (it == impl_->api_sources.end())
    return make_error(Errc::not_found, "no source \"" + source + "\" with from: api");
  caf::anon_send(it->second, role_atom::value, encode_role_text(text));
  return Status::success();
}

Status Program::close(const std::string& source) {
  auto it = impl_->api_sources.find(source);
  if (it == impl_->api_sources.end())
    return make_error(Errc::not_found, "no source \"" + source + "\" with from: api");
  caf::anon_send(it->second, role_atom::value, encode_feed_ended());
  return Status::success();
}

topology::Topology Program::topology() const {
  std::lock_guard<std::mutex> l(impl_->patch_m);
  return impl_->topo;
}

ProgramReport Program::wait() {
  {
    std::unique_lock<std::mutex> l(impl_->outcome->m);
    impl_->outcome->cv.wait(l, [&] { return impl_->outcome->ended; });
  }
  impl_->teardown();
  std::lock_guard<std::mutex> l(impl_->outcome->m);
  return impl_->outcome->report;
}

void Program::stop() {
  if (impl_->ctl) caf::anon_send(impl_->ctl, stop_atom::value);
  std::unique_lock<std::mutex> l(impl_->outcome->m);
  if (!impl_->ctl) {  // never started: nothing will end it but us
    impl_->outcome->ended = true;
    impl_->outcome->report.ended_by = "stopped";
  }
}

}  // namespace chorus
